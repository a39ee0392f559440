"""Response-width bucketing: the update step trains on the batch's longest response (bucketed)."""

import jax
import numpy as np
import pytest

from rlscale.runner.batching import response_bucket, trim_rollout
from rlscale.runner.builders import build_run
from rlscale.sampler.sampler import Rollout
from rlscale.train import state as state_lib
from rlscale.train import update as update_lib
from tests.runner.runner_configs import tiny_config
from tests.train import update_problem as problem


@pytest.mark.parametrize("length, limit, parts, expected", [
    (0, 8, 4, 2), (1, 8, 4, 2), (3, 8, 4, 4), (8, 8, 4, 8), (5, 64, 4, 16), (17, 64, 4, 32),
    (64, 64, 4, 64), (7, 10, 4, 9), (10, 10, 4, 10), (3, 5, 1, 5)])
def test_response_bucket_by_hand(length, limit, parts, expected):
  # Widths are multiples of ceil(limit / parts), capped at the limit (10 -> 3, 6, 9, 10).
  assert response_bucket(length, limit, parts) == expected


def test_response_bucket_errors():
  with pytest.raises(ValueError, match="max_new_tokens=8"):
    response_bucket(9, 8)
  with pytest.raises(ValueError, match="parts=0"):
    response_bucket(1, 8, parts=0)


def _rollout(lengths, prompt_width=3, limit=6):
  b = len(lengths)
  response_mask = (np.arange(limit)[None] < np.asarray(lengths)[:, None]).astype(np.int32)
  tokens = np.arange(b * (prompt_width + limit), dtype=np.int32).reshape(b, -1)
  return Rollout(tokens=tokens, prompt_mask=np.ones((b, prompt_width), np.int32),
                 response_mask=response_mask, logp=-response_mask.astype(np.float32),
                 lengths=np.asarray(lengths, np.int32), num_steps=np.full(b, limit, np.int32))


def test_trim_rollout_keeps_the_prompt_and_the_first_columns():
  rollout = _rollout([1, 3])
  trimmed = trim_rollout(rollout, 4)
  np.testing.assert_array_equal(trimmed.tokens, rollout.tokens[:, :7])
  np.testing.assert_array_equal(trimmed.response_mask, [[1, 0, 0, 0], [1, 1, 1, 0]])
  np.testing.assert_array_equal(trimmed.logp, [[-1, 0, 0, 0], [-1, -1, -1, 0]])
  np.testing.assert_array_equal(trimmed.prompt_mask, rollout.prompt_mask)
  with pytest.raises(ValueError, match="up to 3 tokens to 2"):
    trim_rollout(rollout, 2)


@pytest.mark.parametrize("mode, norm", [("seq-mean-token-mean", None),
                                        ("token-mean", None),
                                        ("seq-mean-token-sum-norm", 5.0)])
def test_update_on_the_trimmed_width_equals_the_full_width(mode, norm):
  """Responses of at most 3 of Tr = 5 tokens: one update on columns [:Tp + 3] gives the params
  and metrics of the update on all columns (masked columns carry no loss, and causal attention
  never looks right)."""
  rl = problem.rl_config("grpo", loss_agg_mode=mode, loss_agg_norm=norm)
  devices = jax.local_devices()[:1]
  tx = problem.make_optimizer(rl)
  params, _ = problem.initial_params(rl)
  host = problem.host_batch(rl, params, None, devices=devices)
  width = 3
  keep = (np.arange(problem.RESPONSE_LEN) < width).astype(np.int32)
  host["response_mask"] = host["response_mask"] * keep
  host["input_mask"][:, problem.PROMPT_LEN:] = host["response_mask"]
  host["old_logp"] = host["old_logp"] * keep
  trimmed = dict(host, tokens=host["tokens"][:, :problem.PROMPT_LEN + width],
                 input_mask=host["input_mask"][:, :problem.PROMPT_LEN + width],
                 response_mask=host["response_mask"][:, :width], old_logp=host["old_logp"][:, :width])
  trimmed.pop("ref_logp")
  host.pop("ref_logp")
  results = []
  for batch in (host, trimmed):
    fn = update_lib.make_update_fn(problem.MODEL, rl, tx, devices=devices)
    state = update_lib.replicate(state_lib.create_train_state(params, tx), devices)
    state, metrics = fn(state, update_lib.shard_batch(batch, 1), jax.random.key(0))
    results.append((jax.device_get(update_lib.unreplicate(state.params)),
                    {k: float(np.asarray(v)[0]) for k, v in jax.device_get(metrics).items()}))
  (full_params, full_metrics), (trim_params, trim_metrics) = results
  for a, b in zip(jax.tree.leaves(full_params), jax.tree.leaves(trim_params)):
    np.testing.assert_allclose(a, b, atol=1e-6)
  for key in ("loss", "pg_loss", "entropy", "grad_norm"):
    np.testing.assert_allclose(full_metrics[key], trim_metrics[key], rtol=1e-5, err_msg=key)


def test_dr_grpo_norm_defaults_to_the_response_limit(tmp_path):
  """Dr. GRPO without rl.loss_agg_norm divides by Tr = rollout.max_new_tokens; the runner fixes it
  so a trimmed batch keeps that constant."""
  config = tiny_config(rl__loss_agg_mode="seq-mean-token-sum-norm", sft__steps=0)
  run = build_run(config, str(tmp_path), log=lambda _: None)
  assert run.rl_config.loss_agg_norm == float(config.rollout.max_new_tokens) == 4.0
