"""Width bucketing: the update step trains on the batch's longest prompt and longest response
(bucketed), not on the sampler's prompt bucket and response limit."""

import jax
import numpy as np
import pytest

from rlscale.runner.batching import train_widths, trim_rollout, width_bucket
from rlscale.runner.builders import build_run
from rlscale.sampler.decode import Rollout
from rlscale.train import update_fn as update_fn_lib
from tests.runner.runner_configs import tiny_config
from tests.train import update_problem as problem


@pytest.mark.parametrize("length, limit, parts, expected", [
    (0, 8, 4, 2), (1, 8, 4, 2), (3, 8, 4, 4), (8, 8, 4, 8), (5, 64, 4, 16), (17, 64, 4, 32),
    (64, 64, 4, 64), (7, 10, 4, 9), (10, 10, 4, 10), (3, 5, 1, 5)])
def test_width_bucket_by_hand(length, limit, parts, expected):
  # Widths are multiples of ceil(limit / parts), capped at the limit (10 -> 3, 6, 9, 10).
  assert width_bucket(length, limit, parts) == expected


def test_width_bucket_errors():
  with pytest.raises(ValueError, match="limit=8"):
    width_bucket(9, 8)
  with pytest.raises(ValueError, match="parts=0"):
    width_bucket(1, 8, parts=0)


def _rollout(lengths, prompt_width=3, limit=6, prompt_lengths=None):
  b = len(lengths)
  response_mask = (np.arange(limit)[None] < np.asarray(lengths)[:, None]).astype(np.int32)
  tokens = np.arange(b * (prompt_width + limit), dtype=np.int32).reshape(b, -1)
  prompt_lengths = np.full(b, prompt_width) if prompt_lengths is None else np.asarray(prompt_lengths)
  prompt_mask = (np.arange(prompt_width)[None] >= prompt_width - prompt_lengths[:, None])
  return Rollout(tokens=tokens, prompt_mask=prompt_mask.astype(np.int32),
                 response_mask=response_mask, logp=-response_mask.astype(np.float32),
                 lengths=np.asarray(lengths, np.int32), num_steps=np.full(b, limit, np.int32))


def test_train_widths_bucket_the_longest_prompt_and_response():
  # Prompt bucket 16 (steps of 4), prompts of 11 and 9 tokens -> 12; responses of <= 3 of 8 -> 4.
  rollout = _rollout([1, 3], prompt_width=16, limit=8, prompt_lengths=[11, 9])
  assert train_widths(rollout) == (12, 4)
  assert train_widths(_rollout([8, 1], prompt_width=16, limit=8, prompt_lengths=[16, 1])) == (16, 8)


def test_trim_rollout_drops_the_leading_prompt_padding():
  rollout = _rollout([1, 3], prompt_width=5, prompt_lengths=[2, 3])
  trimmed = trim_rollout(rollout, 4, prompt_width=3)
  np.testing.assert_array_equal(trimmed.tokens, rollout.tokens[:, 2:9])
  np.testing.assert_array_equal(trimmed.prompt_mask, [[0, 1, 1], [1, 1, 1]])
  np.testing.assert_array_equal(trimmed.response_mask, rollout.response_mask[:, :4])
  with pytest.raises(ValueError, match="only all-padding leading columns"):
    trim_rollout(rollout, 4, prompt_width=2)  # would drop the first token of row 1


def test_trim_rollout_keeps_the_prompt_and_the_first_columns():
  rollout = _rollout([1, 3])
  trimmed = trim_rollout(rollout, 4)
  np.testing.assert_array_equal(trimmed.tokens, rollout.tokens[:, :7])
  np.testing.assert_array_equal(trimmed.response_mask, [[1, 0, 0, 0], [1, 1, 1, 0]])
  np.testing.assert_array_equal(trimmed.logp, [[-1, 0, 0, 0], [-1, -1, -1, 0]])
  np.testing.assert_array_equal(trimmed.prompt_mask, rollout.prompt_mask)
  with pytest.raises(ValueError, match="up to 3 tokens to 2"):
    trim_rollout(rollout, 2)


@pytest.mark.parametrize("mode, norm, prompt_drop", [("seq-mean-token-mean", None, 0),
                                                    ("token-mean", None, 2),
                                                    ("seq-mean-token-sum-norm", 5.0, 2)])
def test_update_on_the_trimmed_width_equals_the_full_width(mode, norm, prompt_drop):
  """Responses of at most 3 of Tr = 5 tokens and prompts whose first `prompt_drop` columns are
  padding in every row: one update on columns [prompt_drop:Tp + 3] gives the params and metrics
  of the update on all columns (masked columns carry no loss, padding keys are masked out of
  attention, positions count real tokens only, and causal attention never looks right)."""
  rl = problem.rl_config("grpo", loss_agg_mode=mode, loss_agg_norm=norm)
  tx = problem.make_optimizer(rl)
  params, _ = problem.initial_params(rl)
  host = problem.host_batch(rl, params, None)
  width = 3
  keep = (np.arange(problem.RESPONSE_LEN) < width).astype(np.int32)
  host["response_mask"] = host["response_mask"] * keep
  host["input_mask"][:, problem.PROMPT_LEN:] = host["response_mask"]
  host["old_logp"] = host["old_logp"] * keep
  host["input_mask"][:, :prompt_drop] = 0
  host["tokens"][:, :prompt_drop] = 0
  trimmed = dict(host, tokens=host["tokens"][:, prompt_drop:problem.PROMPT_LEN + width],
                 input_mask=host["input_mask"][:, prompt_drop:problem.PROMPT_LEN + width],
                 response_mask=host["response_mask"][:, :width], old_logp=host["old_logp"][:, :width])
  trimmed.pop("ref_logp")
  host.pop("ref_logp")
  results = []
  for batch in (host, trimmed):
    fn = update_fn_lib.make_update_fn(problem.MODEL, rl, tx, problem.one_device_mesh())
    state = problem.placed_state(fn, params, tx)
    state, metrics = fn(state, batch, jax.random.key(0))
    results.append((jax.device_get(state.params),
                    {k: float(v) for k, v in jax.device_get(metrics).items()}))
  (full_params, full_metrics), (trim_params, trim_metrics) = results
  for a, b in zip(jax.tree.leaves(full_params), jax.tree.leaves(trim_params)):
    np.testing.assert_allclose(a, b, atol=1e-6)
  # The GRPO loss at ratio 1 is 0 up to rounding (advantages sum to 0 per group): atol for it.
  for key in ("loss", "pg_loss", "entropy", "grad_norm"):
    np.testing.assert_allclose(full_metrics[key], trim_metrics[key], rtol=1e-5, atol=1e-7,
                               err_msg=key)


def test_dr_grpo_norm_defaults_to_the_response_limit(tmp_path):
  """Dr. GRPO without rl.loss_agg_norm divides by Tr = rollout.max_new_tokens; the runner fixes it
  so a trimmed batch keeps that constant."""
  config = tiny_config(rl__loss_agg_mode="seq-mean-token-sum-norm", sft__steps=0)
  run = build_run(config, str(tmp_path), log=lambda _: None)
  assert run.rl_config.loss_agg_norm == float(config.rollout.max_new_tokens) == 4.0
