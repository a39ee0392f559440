"""Response masks, masked reductions and response log-probabilities."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.model.config import ModelConfig
from rlscale.model.transformer import forward, init_params
from rlscale.rl import logprob, masks

EOS = 2


def test_mask_with_pad_equal_to_eos():
  out = masks.response_mask_from_tokens(jnp.array([[5, 7, EOS, EOS, EOS]]), EOS)
  np.testing.assert_array_equal(out, [[1, 1, 1, 0, 0]])


def test_mask_batched_several_eos_ids_and_no_eos():
  tokens = jnp.array([[EOS, 4, 4], [4, 4, 4], [4, 9, 9], [4, 0, EOS]])
  out = masks.response_mask_from_tokens(tokens, [EOS, 9])
  np.testing.assert_array_equal(out, [[1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1]])
  with pytest.raises(AssertionError):
    masks.response_mask_from_tokens(jnp.array([5, 7]), EOS)


def test_masked_mean_and_sum():
  x = jnp.array([[1.0, jnp.nan], [3.0, 5.0]])
  m = jnp.array([[1, 0], [1, 1]])
  np.testing.assert_allclose(masks.masked_sum(x, m), 9.0)
  np.testing.assert_allclose(masks.masked_mean(x, m), 3.0)
  np.testing.assert_allclose(masks.masked_mean(x, m, axis=1), [1.0, 4.0])
  np.testing.assert_allclose(masks.masked_mean(x, jnp.zeros_like(m)), 0.0)


def test_response_logp_gathers_next_token_positions():
  # Logits at position t favour token t + 1 of the sequence: logits[:, t] = onehot(tokens[:, t+1]) * 5.
  tokens = jnp.array([[3, 1, 4, 1, 5]])
  logits = jnp.zeros((1, 5, 6)).at[0, jnp.arange(4), tokens[0, 1:]].set(5.0)
  out = logprob.response_logp(logits, tokens, 2)
  expected = 5.0 - np.log(np.exp(5.0) + 5.0)
  np.testing.assert_allclose(out, [[expected, expected]], rtol=1e-6)
  hot = logprob.response_logp(logits, tokens, 2, temperature=0.5)
  np.testing.assert_allclose(hot, [[10.0 - np.log(np.exp(10.0) + 5.0)] * 2], atol=1e-7)
  with pytest.raises(ValueError, match="response length 5 must be in"):
    logprob.response_logp(logits, tokens, 5)


def test_response_logp_matches_model_forward_one_position_at_a_time():
  config = ModelConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_layers=1,
                       num_heads=2, num_kv_heads=1, head_dim=8)
  params = init_params(config, jax.random.key(0))
  tokens = jnp.array([[0, 7, 3, 9, 11], [5, 6, 3, 2, 30]])
  mask = jnp.array([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
  logits_fn = jax.jit(lambda tok, m: forward(params, config, tok, m).logits)
  out = logprob.response_logp(logits_fn(tokens, mask), tokens, 2)
  for t in (3, 4):  # log p(token t | tokens < t) from a forward over the prefix only
    prefix = logits_fn(tokens[:, :t], mask[:, :t])[:, -1]
    expected = jax.nn.log_softmax(prefix)[jnp.arange(2), tokens[:, t]]
    np.testing.assert_allclose(out[:, t - 3], expected, atol=1e-5)


def test_entropy():
  uniform = logprob.entropy_from_logits(jnp.zeros((2, 4)))
  np.testing.assert_allclose(uniform, [np.log(4.0)] * 2, rtol=1e-6)
  peaked = logprob.entropy_from_logits(jnp.array([[1e4, 0.0, 0.0]]))
  np.testing.assert_array_equal(peaked, [0.0])


def test_truncated_rows():
  eos = 2
  tokens = jnp.array([[5, 7, 2, 2], [5, 7, 8, 9], [2, 2, 2, 2], [5, 7, 8, 2]])
  mask = masks.response_mask_from_tokens(tokens, eos)
  # Row 1 ran to the limit without EOS; row 3 ends with EOS exactly at the limit (not truncated).
  np.testing.assert_array_equal(masks.truncated_rows(tokens, mask, eos), [False, True, False, False])
  np.testing.assert_array_equal(masks.truncated_rows(tokens, mask, (3, 2)), [False, True, False, False])
  # Pad id = EOS id after the end: only real tokens count, so a padded row is never mistaken.
  np.testing.assert_array_equal(masks.truncated_rows(tokens, jnp.ones_like(tokens), ()), [True] * 4)
  with pytest.raises(ValueError, match="must both be"):
    masks.truncated_rows(tokens, mask[:, :3], eos)


def test_mask_rows():
  mask = jnp.array([[1, 1, 0], [1, 1, 1], [1, 0, 0]], jnp.int32)
  out = masks.mask_rows(mask, jnp.array([True, False, True]))
  np.testing.assert_array_equal(out, [[1, 1, 0], [0, 0, 0], [1, 0, 0]])
  assert out.dtype == jnp.int32
  with pytest.raises(ValueError, match=r"keep_rows \(2,\) must be \[B\]"):
    masks.mask_rows(mask, jnp.array([True, False]))
