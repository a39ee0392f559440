"""Sampling strategies: config validation, top-k / top-p / min-p on hand-made distributions, their
order (transformers'), greedy, logp."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.sampler import strategies

PROBS = np.array([0.5, 0.3, 0.15, 0.05], np.float32)


def _kept(filtered):
  return set(np.flatnonzero(np.isfinite(np.asarray(filtered))).tolist())


@pytest.mark.parametrize("kwargs, field", [
    ({"temperature": -0.1}, "sampling.temperature"),
    ({"top_k": -1}, "sampling.top_k"),
    ({"top_k": 2.5}, "sampling.top_k"),
    ({"top_p": 0.0}, "sampling.top_p"),
    ({"top_p": 1.5}, "sampling.top_p"),
    ({"min_p": -0.1}, "sampling.min_p"),
    ({"min_p": 1.5}, "sampling.min_p"),
    ({"min_p": True}, "sampling.min_p"),
])
def test_sampling_config_rejects_bad_fields(kwargs, field):
  with pytest.raises(ValueError, match=field):
    strategies.SamplingConfig(**kwargs)


def test_sampling_config_is_hashable_and_greedy_at_zero():
  assert hash(strategies.SamplingConfig()) == hash(strategies.SamplingConfig(1.0, 0, 1.0))
  assert strategies.SamplingConfig(temperature=0.0).greedy
  assert not strategies.SamplingConfig(temperature=0.5).greedy


@pytest.mark.parametrize("p, expected", [
    (0.8, {0, 1}),  # 0.5 + 0.3 reaches 0.8 exactly: token 2 is not needed
    (0.5, {0}),
    (0.81, {0, 1, 2}),  # token 2 crosses 0.81 and is included
    (0.1, {0}),  # never empty
    (1.0, {0, 1, 2, 3}),
])
def test_top_p_keeps_smallest_set_reaching_p(p, expected):
  assert _kept(strategies.top_p_filter(jnp.log(PROBS), p)) == expected


def test_top_p_is_per_row_and_order_independent():
  logits = jnp.log(jnp.stack([PROBS, PROBS[::-1]]))  # second row: most likely token is 3
  filtered = strategies.top_p_filter(logits, 0.7)
  assert _kept(filtered[0]) == {0, 1}
  assert _kept(filtered[1]) == {3, 2}
  np.testing.assert_array_equal(filtered[0, :2], jnp.log(PROBS)[:2])  # kept logits unchanged


@pytest.mark.parametrize("k, expected", [(1, {0}), (2, {0, 1}), (3, {0, 1, 2}), (0, {0, 1, 2, 3}),
                                         (9, {0, 1, 2, 3})])
def test_top_k_keeps_k_largest(k, expected):
  logits = jnp.log(PROBS[[2, 0, 3, 1]])  # token order shuffled: ranks are 1, 3, 0, 2
  rank_to_token = {0: 1, 1: 3, 2: 0, 3: 2}
  assert _kept(strategies.top_k_filter(logits, k)) == {rank_to_token[r] for r in expected}


def test_min_p_keeps_tokens_above_a_fraction_of_the_top_probability():
  # Threshold 0.2 * 0.5 = 0.1: 0.5, 0.3 and 0.15 stay, 0.05 goes; renormalised over the kept mass
  # 0.95: [0.5, 0.3, 0.15] / 0.95 = [0.526, 0.316, 0.158].
  filtered = strategies.min_p_filter(jnp.log(PROBS), 0.2)
  assert _kept(filtered) == {0, 1, 2}
  np.testing.assert_allclose(jax.nn.softmax(filtered)[:3], [0.526, 0.316, 0.158], atol=1e-3)
  assert float(jax.nn.softmax(filtered)[3]) == 0.0
  assert _kept(strategies.min_p_filter(jnp.log(PROBS), 0.0)) == {0, 1, 2, 3}  # off
  assert _kept(strategies.min_p_filter(jnp.log(PROBS), 1.0)) == {0}  # only the top token
  # Relative to each row's own top: the shuffled row keeps the same probabilities.
  rows = strategies.min_p_filter(jnp.log(jnp.stack([PROBS, PROBS[::-1]])), 0.5)  # threshold 0.25
  assert _kept(rows[0]) == {0, 1} and _kept(rows[1]) == {3, 2}
  with pytest.raises(ValueError, match="min_p"):
    strategies.min_p_filter(jnp.zeros(4), 1.5)


def test_filters_apply_in_transformers_order_top_k_top_p_then_min_p():
  # top_p 0.81 keeps {0, 1, 2} (the mass above token 2 is 0.8 < 0.81); min_p 0.2 then keeps all
  # three (threshold 0.1). Min-p first would renormalise to [0.526, 0.316, 0.158], and top-p would
  # then stop at token 1 (0.526 + 0.316 = 0.842 >= 0.81): {0, 1}.
  sampling = strategies.SamplingConfig(temperature=1.0, top_p=0.81, min_p=0.2)
  assert _kept(strategies.filter_logits(jnp.log(PROBS), sampling)) == {0, 1, 2}
  # top-k 2 then min-p 0.7 (threshold 0.35): {0}.
  sampling = strategies.SamplingConfig(temperature=1.0, top_k=2, min_p=0.7)
  assert _kept(strategies.filter_logits(jnp.log(PROBS), sampling)) == {0}


def test_filters_match_transformers_warpers():
  """temperature, top-k, top-p and min-p together equal transformers' warpers in the order its
  `generate` builds them (TemperatureLogitsWarper, TopK, TopP, MinP) on random logits."""
  torch = pytest.importorskip("torch")
  generation = pytest.importorskip("transformers.generation")
  logits = np.array(jax.random.normal(jax.random.key(0), (16, 50)) * 3, np.float32)  # writable
  for temperature, top_k, top_p, min_p in [(0.7, 0, 1.0, 0.1), (1.3, 20, 0.9, 0.05),
                                          (1.0, 5, 0.5, 0.3), (0.5, 0, 0.95, 0.0)]:
    warpers = generation.LogitsProcessorList(
        [generation.TemperatureLogitsWarper(temperature)]
        + ([generation.TopKLogitsWarper(top_k)] if top_k else [])
        + [generation.TopPLogitsWarper(top_p)] * (top_p < 1)
        + ([generation.MinPLogitsWarper(min_p)] if min_p else []))
    expected = warpers(torch.zeros(16, 1, dtype=torch.long), torch.from_numpy(logits)).numpy()
    ours = strategies.filter_logits(jnp.asarray(logits), strategies.SamplingConfig(
        temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p))
    np.testing.assert_array_equal(np.isfinite(ours), np.isfinite(expected))
    kept = np.isfinite(expected)
    np.testing.assert_allclose(np.asarray(ours)[kept], expected[kept], rtol=1e-6)


def test_filters_reject_bad_arguments():
  with pytest.raises(ValueError, match="top_p"):
    strategies.top_p_filter(jnp.zeros(4), 0.0)
  with pytest.raises(ValueError, match="top_k"):
    strategies.top_k_filter(jnp.zeros(4), -2)
  with pytest.raises(ValueError, match="temperature"):
    strategies.filter_logits(jnp.zeros(4), strategies.SamplingConfig(temperature=0.0))


def test_greedy_is_argmax_for_any_key_with_temperature_one_logp():
  logits = jax.random.normal(jax.random.key(0), (5, 11)) * 3
  greedy = strategies.SamplingConfig(temperature=0.0)
  expected_logp = jax.nn.log_softmax(logits)[jnp.arange(5), jnp.argmax(logits, -1)]
  for seed in range(3):
    token, logp = strategies.sample_token(logits, jax.random.key(seed), greedy)
    np.testing.assert_array_equal(token, np.argmax(logits, -1))
    assert token.dtype == jnp.int32
    np.testing.assert_allclose(logp, expected_logp, rtol=1e-6)
    assert np.all(np.isfinite(logp))


def test_logp_is_unfiltered_policy_at_temperature():
  logits = jnp.log(jnp.tile(PROBS, (3, 1)))
  sampling = strategies.SamplingConfig(temperature=0.7, top_k=2)
  token, logp = strategies.sample_token(logits, jax.random.key(1), sampling)
  tempered = PROBS ** (1 / 0.7) / np.sum(PROBS ** (1 / 0.7))  # softmax(log p / T) by hand
  np.testing.assert_allclose(logp, np.log(tempered[np.asarray(token)]), rtol=1e-5)


def test_samples_follow_the_filtered_tempered_distribution():
  n = 20000
  logits = jnp.log(jnp.tile(PROBS, (n, 1)))
  half = strategies.SamplingConfig(temperature=0.5)
  token, _ = strategies.sample_token(logits, jax.random.key(2), half)
  tempered = PROBS ** 2 / np.sum(PROBS ** 2)  # [0.6757, 0.2432, 0.0608, 0.0068]
  np.testing.assert_allclose(np.bincount(np.asarray(token), minlength=4) / n, tempered, atol=0.015)
  token, _ = strategies.sample_token(logits, jax.random.key(3), strategies.SamplingConfig(top_p=0.8))
  np.testing.assert_allclose(np.bincount(np.asarray(token), minlength=4) / n,
                             [0.5 / 0.8, 0.3 / 0.8, 0, 0], atol=0.015)
  token, _ = strategies.sample_token(logits, jax.random.key(4), strategies.SamplingConfig(min_p=0.2))
  np.testing.assert_allclose(np.bincount(np.asarray(token), minlength=4) / n,
                             [0.526, 0.316, 0.158, 0], atol=0.015)


def test_first_argmax_matches_argmax_and_takes_the_first_tie():
  x = jnp.array([[1.0, 3.0, 3.0, 0.0], [-1.0, -2.0, -3.0, -1.0], [0.0, 0.0, 0.0, 5.0]])
  np.testing.assert_array_equal(strategies.first_argmax(x), [1, 0, 3])
  y = jax.random.normal(jax.random.key(0), (7, 50))
  np.testing.assert_array_equal(strategies.first_argmax(y), jnp.argmax(y, axis=-1))
  assert strategies.first_argmax(y).dtype == jnp.int32


def test_sampling_draws_what_jax_categorical_draws():
  logits = jax.random.normal(jax.random.key(0), (64, 30)) * 2
  for seed in range(3):
    token, _ = strategies.sample_token(logits, jax.random.key(seed), strategies.SamplingConfig())
    np.testing.assert_array_equal(token, jax.random.categorical(jax.random.key(seed), logits))


def test_sampling_config_takes_numpy_scalars_as_python_numbers_and_rejects_bools():
  # Values computed with numpy (np.float32 temperatures, np.int64 k) were rejected as "not a
  # float"; they must give the same hashable config (one compilation) as the Python numbers.
  from_numpy = strategies.SamplingConfig(np.float32(0.5), np.int64(3), np.float64(0.9))
  assert from_numpy == strategies.SamplingConfig(0.5, 3, 0.9)
  assert hash(from_numpy) == hash(strategies.SamplingConfig(0.5, 3, 0.9))
  assert type(from_numpy.temperature) is float and type(from_numpy.top_k) is int
  # True was accepted as temperature 1 (bool is an int subclass).
  with pytest.raises(ValueError, match="sampling.temperature"):
    strategies.SamplingConfig(temperature=True)
  with pytest.raises(ValueError, match="sampling.top_p"):
    strategies.SamplingConfig(top_p=True)
