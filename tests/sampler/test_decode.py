"""The decode core (`decode.generate`): left padding, logp vs a full forward, EOS, early exit,
seeds, shared prefill, MoE routing, the argument checks and prompt bucketing."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.model import ModelConfig, forward, init_params, token_logp
from rlscale.sampler.decode import (check_prompts, checked_batch, generate, map_rollout,
                                    pad_to_bucket)
from rlscale.sampler.strategies import SamplingConfig

CONFIG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=8)
TR = 8  # response length limit
GREEDY = SamplingConfig(temperature=0.0)


@functools.lru_cache()
def model_params():
  weights = init_params(CONFIG, jax.random.key(0))
  # Weights 20x the init: varied greedy continuations whose top-2 logits differ by > 0.1, so no
  # argmax is decided by float rounding, and temperature-1 samples still vary (mean logp ~ -2.6).
  return jax.tree.map(lambda x: x * 20 if x.ndim == 2 else x, weights)


def prompts():
  """Three left-padded prompts of 5, 3 and 1 real tokens in 5 slots."""
  tokens = np.array([[11, 12, 13, 14, 15], [0, 0, 21, 22, 23], [0, 0, 0, 0, 31]], np.int32)
  return tokens, (tokens != 0).astype(np.int32)


def run_generate(tokens, mask, rng=jax.random.key(0), sampling=GREEDY, eos_ids=(), pad_id=0, tr=TR):
  return generate(model_params(), jnp.asarray(tokens), jnp.asarray(mask), rng, model_config=CONFIG,
                  max_new_tokens=tr, sampling=sampling, eos_ids=eos_ids, pad_id=pad_id)


def _first_eos_lengths(responses, eos_ids):
  """Expected response lengths: index of the first EOS + 1, or the full width."""
  hits = np.isin(responses, eos_ids)
  return np.where(hits.any(1), hits.argmax(1) + 1, responses.shape[1])


def test_left_padded_batch_matches_each_prompt_alone():
  tokens, mask = prompts()
  batch = run_generate(tokens, mask)
  for row in range(3):
    real = tokens[row, mask[row] == 1][None]
    alone = run_generate(real, np.ones_like(real))
    np.testing.assert_array_equal(batch.tokens[row, 5:], alone.tokens[0, real.shape[1]:])
    np.testing.assert_allclose(batch.logp[row], alone.logp[0], atol=1e-5)
  assert batch.tokens.shape == (3, 5 + TR) and batch.tokens.dtype == jnp.int32
  np.testing.assert_array_equal(batch.tokens[:, :5], tokens)
  np.testing.assert_array_equal(batch.prompt_mask, mask)
  np.testing.assert_array_equal(batch.response_mask, np.ones((3, TR)))
  np.testing.assert_array_equal(batch.lengths, [TR] * 3)
  np.testing.assert_array_equal(batch.num_steps, [TR] * 3)


def _full_forward(rollout):
  """Logits [B, Tr, V] for each response position, from one uncached forward."""
  tp = rollout.prompt_mask.shape[1]
  input_mask = jnp.concatenate([rollout.prompt_mask, rollout.response_mask], axis=1)
  logits = forward(model_params(), CONFIG, rollout.tokens, input_mask).logits
  return logits[:, tp - 1:-1]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logp_equals_full_forward_token_logp(temperature):
  tokens, mask = prompts()
  rollout = run_generate(tokens, mask, sampling=SamplingConfig(temperature=temperature),
                         eos_ids=(7,))
  expected = token_logp(_full_forward(rollout), rollout.tokens[:, 5:], temperature)
  expected = jnp.where(rollout.response_mask == 1, expected, 0.0)
  np.testing.assert_allclose(rollout.logp, expected, atol=1e-5)


def test_bfloat16_model_samples_with_logp_near_its_full_forward():
  # bf16 parameters and compute (the accelerator setting): the cache is bf16 too. XLA:CPU once
  # failed here at run time on a bf16 x bf16 -> f32 attention dot.
  config = CONFIG.replace(dtype="bfloat16", param_dtype="bfloat16")
  params = jax.tree.map(lambda x: x.astype(jnp.bfloat16), model_params())
  tokens, mask = prompts()
  rollout = generate(params, jnp.asarray(tokens), jnp.asarray(mask), jax.random.key(0),
                     model_config=config, max_new_tokens=TR, sampling=SamplingConfig(temperature=1.0),
                     eos_ids=(), pad_id=0)
  assert rollout.logp.dtype == jnp.float32
  logits = forward(params, config, rollout.tokens, jnp.concatenate([mask, rollout.response_mask], 1))
  expected = token_logp(logits.logits[:, 4:-1], rollout.tokens[:, 5:])
  # Cached decode and one full forward round differently in bf16 (8-bit mantissa): close, not equal.
  np.testing.assert_allclose(rollout.logp, expected, atol=0.15)
  assert float(jnp.abs(rollout.logp - expected).max()) > 0  # it really ran in bf16


def test_greedy_is_argmax_of_full_forward_for_any_key():
  tokens, mask = prompts()
  first = run_generate(tokens, mask, rng=jax.random.key(1))
  other_key = run_generate(tokens, mask, rng=jax.random.key(2))
  np.testing.assert_array_equal(first.tokens, other_key.tokens)
  np.testing.assert_array_equal(first.tokens[:, 5:], jnp.argmax(_full_forward(first), axis=-1))
  expected = token_logp(_full_forward(first), first.tokens[:, 5:], 1.0)
  np.testing.assert_allclose(first.logp, expected, atol=1e-5)


def test_tiny_temperature_samples_the_argmax_with_logp_zero():
  # T = 1e-9 is greedy in all but name: the argmax tokens, each with probability 1 (logp 0, and
  # never +-inf, which XLA's rounding of logits / T once produced; see token_logp).
  tokens, mask = prompts()
  greedy = run_generate(tokens, mask)
  tiny = run_generate(tokens, mask, sampling=SamplingConfig(temperature=1e-9))
  np.testing.assert_array_equal(tiny.tokens, greedy.tokens)
  np.testing.assert_allclose(tiny.logp, np.zeros((3, TR)), atol=1e-6)


def test_eos_equal_to_pad_masks_through_first_eos_only():
  tokens, mask = prompts()
  free = np.asarray(run_generate(tokens, mask).tokens[:, 5:])  # no EOS: the greedy continuation
  eos = int(free[0, 2])  # row 0 ends at column 2 (or earlier if the token came before)
  rollout = run_generate(tokens, mask, eos_ids=(eos,), pad_id=eos)
  lengths = _first_eos_lengths(free, [eos])
  assert lengths[0] <= 3
  np.testing.assert_array_equal(rollout.lengths, lengths)
  for row in range(3):
    n = lengths[row]
    np.testing.assert_array_equal(rollout.response_mask[row], [1] * n + [0] * (TR - n))
    np.testing.assert_array_equal(rollout.tokens[row, 5:5 + n], free[row, :n])  # EOS included
    np.testing.assert_array_equal(rollout.tokens[row, 5 + n:], eos)  # pad_id afterwards
    np.testing.assert_array_equal(rollout.logp[row, n:], 0.0)
    assert np.all(np.asarray(rollout.logp[row, :n]) < 0)


def test_multiple_eos_ids_and_early_exit():
  tokens, mask = prompts()
  free = np.asarray(run_generate(tokens, mask).tokens[:, 5:])
  eos_ids = (int(free[0, 1]), int(free[1, 3]), int(free[2, 0]))
  rollout = run_generate(tokens, mask, eos_ids=eos_ids, pad_id=0)
  lengths = _first_eos_lengths(free, eos_ids)
  np.testing.assert_array_equal(rollout.lengths, lengths)
  np.testing.assert_array_equal(rollout.response_mask.sum(1), lengths)
  assert lengths.max() <= 4
  # The loop stopped as soon as the last row finished, not at Tr.
  np.testing.assert_array_equal(rollout.num_steps, [lengths.max()] * 3)
  np.testing.assert_array_equal(rollout.tokens[:, 5 + lengths.max():], 0)


def test_no_eos_runs_to_the_limit():
  tokens, mask = prompts()
  rollout = run_generate(tokens, mask, sampling=SamplingConfig(), eos_ids=())
  np.testing.assert_array_equal(rollout.lengths, [TR] * 3)
  np.testing.assert_array_equal(rollout.num_steps, [TR] * 3)


def test_same_seed_same_samples_other_seed_differs():
  tokens, mask = prompts()
  sample = lambda seed: np.asarray(  # noqa: E731
      run_generate(tokens, mask, rng=jax.random.key(seed), sampling=SamplingConfig()).tokens)
  np.testing.assert_array_equal(sample(3), sample(3))
  assert np.mean(sample(3)[:, 5:] != sample(4)[:, 5:]) > 0.5


def test_generate_rejects_bad_shapes():
  tokens, mask = prompts()
  with pytest.raises(ValueError, match="prompt_mask shape"):
    run_generate(tokens, mask[:, 1:])
  with pytest.raises(ValueError, match="eos_ids"):
    run_generate(tokens, mask, eos_ids=[3])
  with pytest.raises(ValueError, match="max_new_tokens"):
    run_generate(tokens, mask, tr=0)


# Prompts `generate` (and so the Sampler) must refuse: (edit of `prompts()`, error message).
GARBLED_PROMPTS = [
    # Right padding: the first token would be drawn after a pad slot (silently wrong before).
    (lambda t, m: (t, m[:, ::-1].copy()), r"prompt_mask row 1 is not left-padded"),
    (lambda t, m: (t, m * np.array([[1], [1], [0]])), r"prompt_mask row 2 has no real token"),
    (lambda t, m: (t, m * 2), r"prompt_mask must hold only 0 and 1"),
    # An id outside the embedding table reads NaN (jnp.take fills), so every logp was NaN.
    (lambda t, m: (t + 50 * m, m), r"prompt_tokens row 0 holds id 64 at a real position, outside "
                                   r"the model's vocabulary \[0, 64\)"),
]


@pytest.mark.parametrize("edit, message", GARBLED_PROMPTS)
def test_generate_rejects_prompts_it_would_garble(edit, message):
  tokens, mask = edit(*prompts())
  with pytest.raises(ValueError, match=message):
    run_generate(tokens, mask)
  with pytest.raises(ValueError, match=message):
    check_prompts(tokens, mask, CONFIG.vocab_size)


def test_pad_and_eos_ids_must_be_in_the_vocabulary():
  # pad_id = V (a common "one past the vocabulary" choice) embedded as NaN: every padded row's
  # logp was NaN and its tokens V - 1. An EOS id >= V can never be sampled.
  tokens, mask = prompts()
  with pytest.raises(ValueError, match=r"pad_id 64 is outside the model's vocabulary \[0, 64\)"):
    run_generate(tokens, mask, pad_id=64)
  with pytest.raises(ValueError, match=r"eos_ids \(3, 64\) must lie in the model's vocabulary \[0, 64\)"):
    run_generate(tokens, mask, eos_ids=(3, 64))


def test_pad_to_bucket_left_pads_to_the_smallest_bucket():
  tokens, mask = prompts()
  padded, padded_mask = pad_to_bucket(tokens, mask, (4, 8, 16), pad_id=9)
  assert padded.shape == (3, 8)
  np.testing.assert_array_equal(padded[:, :3], 9)
  np.testing.assert_array_equal(padded[:, 3:], tokens)
  np.testing.assert_array_equal(padded_mask[:, :3], 0)
  with pytest.raises(ValueError, match="largest prompt bucket 4"):
    pad_to_bucket(tokens, mask, (2, 4), pad_id=0)


@pytest.mark.parametrize("sampling", [GREEDY, SamplingConfig(temperature=1.0)])
def test_shared_prefill_equals_each_prompt_repeated(sampling):
  tokens, mask = prompts()
  group = 3
  shared = generate(model_params(), jnp.asarray(tokens), jnp.asarray(mask), jax.random.key(4),
                    model_config=CONFIG, max_new_tokens=TR, sampling=sampling, eos_ids=(7,),
                    pad_id=0, samples_per_prompt=group)
  repeated = run_generate(np.repeat(tokens, group, 0), np.repeat(mask, group, 0), jax.random.key(4),
                       sampling=sampling, eos_ids=(7,))
  np.testing.assert_array_equal(shared.tokens, repeated.tokens)  # rows p * G + g, prompts repeated
  np.testing.assert_array_equal(shared.prompt_mask, repeated.prompt_mask)
  np.testing.assert_array_equal(shared.response_mask, repeated.response_mask)
  np.testing.assert_allclose(shared.logp, repeated.logp, atol=1e-6)
  if not sampling.greedy:  # the G samples of a prompt differ
    assert len({tuple(r) for r in np.asarray(shared.tokens[:group])}) > 1
  with pytest.raises(ValueError, match="samples_per_prompt must be an int >= 1, got 0"):
    generate(model_params(), jnp.asarray(tokens), jnp.asarray(mask), jax.random.key(4),
             model_config=CONFIG, max_new_tokens=TR, sampling=sampling, eos_ids=(), pad_id=0,
             samples_per_prompt=0)


def test_checked_batch_names_the_parts_it_must_split_into():
  tokens, mask = prompts()
  out_tokens, out_mask, group = checked_batch(tokens.tolist(), mask, CONFIG.vocab_size,
                                              np.int64(2), 2, "two parts")
  assert isinstance(out_tokens, np.ndarray) and group == 2 and type(group) is int
  np.testing.assert_array_equal(out_mask, mask)
  with pytest.raises(ValueError, match=r"B=3 \(prompts x samples_per_prompt\) must be divisible "
                                       r"by two parts"):
    checked_batch(tokens, mask, CONFIG.vocab_size, 1, 2, "two parts")
  with pytest.raises(ValueError, match="must both be \\[P, Tp\\]"):
    checked_batch(tokens, mask[:, 1:], CONFIG.vocab_size, 1, 1, "one")


def test_map_rollout_keeps_a_missing_field_missing():
  rollout = run_generate(*prompts())
  both = map_rollout(lambda a, b: np.concatenate([a, b]), rollout, rollout)
  assert both.tokens.shape == (6, 5 + TR) and both.experts is None
  np.testing.assert_array_equal(both.logp[3:], rollout.logp)


MOE = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=8, num_experts=4, num_experts_per_tok=2,
                  moe_intermediate_size=16, norm_topk_prob=True)


def test_moe_rollout_records_the_routing_the_full_forward_chooses():
  """Rollout.experts: per response token, each MoE layer's experts at the position predicting it
  (KV-cached decode), equal to the full forward's there; -1 after the response ends; G rows of
  a shared prefill each get the prompt's routing for token 0; a dense model records none."""
  moe_params = init_params(MOE, jax.random.key(1))
  tokens, mask = prompts()
  rollout = generate(moe_params, jnp.asarray(tokens), jnp.asarray(mask), jax.random.key(2),
                     model_config=MOE, max_new_tokens=TR, sampling=SamplingConfig(temperature=1.0),
                     eos_ids=tuple(range(3, 13)), pad_id=0, samples_per_prompt=2)
  assert rollout.experts.shape == (6, TR, 2, 2)  # [B, Tr, L_moe, k]
  full = forward(moe_params, MOE, rollout.tokens,
                 jnp.concatenate([rollout.prompt_mask, rollout.response_mask], 1))
  tp = rollout.prompt_mask.shape[1]
  expected = jnp.transpose(full.moe.experts[:, :, tp - 1:-1], (1, 2, 0, 3))
  real = np.asarray(rollout.response_mask) > 0
  assert not real.all()  # some rows ended early
  np.testing.assert_array_equal(np.asarray(rollout.experts)[real], np.asarray(expected)[real])
  assert (np.asarray(rollout.experts)[~real] == -1).all()
  assert run_generate(tokens, mask).experts is None
