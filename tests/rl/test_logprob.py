"""NaN-free log-probabilities and entropies: masked vocabulary entries (-inf logits) and tiny
temperatures give 0 log 0 = 0, in values and gradients (issue 12, case 7); the chunked output
head (response positions only) against the full-logits computation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.model.config import ModelConfig
from rlscale.model.transformer import forward, init_params
from rlscale.rl import logprob


def _entropy64(logits):
  """Reference entropy in float64 over the finite entries only."""
  z = np.asarray(logits, np.float64)
  z = z[np.isfinite(z)]
  p = np.exp(z - z.max())
  p /= p.sum()
  return float(-(p * np.log(p)).sum())


def test_entropy_of_a_masked_entry_is_zero_with_a_finite_gradient():
  logits = jnp.array([0.0, -jnp.inf])
  for fn in (logprob.entropy_from_logits, jax.jit(logprob.entropy_from_logits)):
    assert float(fn(logits)) == 0.0
  grad = jax.grad(logprob.entropy_from_logits)(logits)
  # A one-point distribution is the entropy's minimum: the gradient is exactly 0 (was NaN).
  np.testing.assert_array_equal(grad, [0.0, 0.0])


def test_masked_entries_drop_out_of_entropy_and_its_gradient():
  # [0, -inf, -1] is the distribution of [0, -1] with an impossible token in the middle.
  masked = jnp.array([0.0, -jnp.inf, -1.0])
  plain = jnp.array([0.0, -1.0])
  p = 1.0 / (1.0 + np.exp(-1.0))  # by hand: p = (0.731, 0.269), H = 0.5822
  expected = -(p * np.log(p) + (1 - p) * np.log(1 - p))
  np.testing.assert_allclose(logprob.entropy_from_logits(masked), expected, rtol=1e-6)
  np.testing.assert_allclose(logprob.entropy_from_logits(masked), _entropy64(masked), rtol=1e-6)
  # dH/dz_j = -p_j (log p_j + H): the -inf slot gets 0, the others what they get without it.
  grad = jax.grad(logprob.entropy_from_logits)(masked)
  np.testing.assert_allclose(grad, [-p * (np.log(p) + expected), 0.0,
                                    -(1 - p) * (np.log(1 - p) + expected)], rtol=1e-5)
  np.testing.assert_allclose(grad[jnp.array([0, 2])], jax.grad(logprob.entropy_from_logits)(plain),
                             rtol=1e-6)


@pytest.mark.parametrize("temperature", [1e-3, 1e-9, 1e-30, 1e-40])
def test_entropy_at_tiny_temperature_is_finite(temperature):
  # 1e-40 is a float32 subnormal, flushed to 0 by XLA:CPU; the floor at 1.2e-38 keeps 0 / 0 out.
  logits = jnp.array([[1.0, 0.5, -jnp.inf, 0.25], [2.0, 2.0, -jnp.inf, 0.0]])
  entropy = jax.jit(logprob.entropy_from_logits, static_argnums=1)(logits, temperature)
  grad = jax.grad(lambda z: jnp.sum(logprob.entropy_from_logits(z, temperature)))(logits)
  assert np.all(np.isfinite(grad))
  # Row 0 is a point mass at T -> 0; row 1 splits evenly between its two tied maxima.
  np.testing.assert_allclose(entropy, [0.0, np.log(2.0)], rtol=1e-5, atol=1e-7)


def test_response_logp_with_masked_vocabulary():
  # tokens [3, 0, 1]: the response is the last 2 tokens, scored by logits at positions 0 and 1.
  logits = jnp.array([[[0.0, -1.0, -jnp.inf, 5.0], [2.0, 0.0, -jnp.inf, -jnp.inf],
                       [0.0, 0.0, 0.0, 0.0]]])
  tokens = jnp.array([[3, 0, 1]])
  out = logprob.response_logp(logits, tokens, 2)
  z0, z1 = np.array([0.0, -1.0, 5.0]), np.array([2.0, 0.0])  # the finite entries of each row
  expected = [[z0[0] - np.log(np.exp(z0).sum()), z1[1] - np.log(np.exp(z1).sum())]]
  np.testing.assert_allclose(out, expected, rtol=1e-6)
  grad = jax.grad(lambda z: jnp.sum(logprob.response_logp(z, tokens, 2)))(logits)
  assert np.all(np.isfinite(grad))
  assert float(grad[0, 0, 2]) == 0.0 and float(grad[0, 1, 3]) == 0.0


TP, TR = 4, 7


def _problem(tie_embeddings: bool):
  config = ModelConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_layers=1,
                       num_heads=4, num_kv_heads=2, head_dim=8, tie_embeddings=tie_embeddings)
  params = init_params(config, jax.random.key(0))
  params = jax.tree.map(lambda x: x * 4.0 if x.ndim == 2 else x, params)  # sharper softmaxes
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(1, config.vocab_size, (3, TP + TR)), jnp.int32)
  return config, params, tokens, jnp.ones_like(tokens)


def _reference(params, config, tokens, mask, temperature):
  logits = forward(params, config, tokens, mask).logits
  return (logprob.response_logp(logits, tokens, TR, temperature),
          logprob.entropy_from_logits(logprob.response_logits(logits, TR), temperature))


def _chunked(params, config, tokens, mask, temperature, chunk_size):
  hidden = forward(params, config, tokens, mask, head=False).hidden
  return logprob.chunked_response_logp(params, config, hidden, tokens, TR, temperature,
                                       chunk_size=chunk_size)


@pytest.mark.parametrize("tie_embeddings", [True, False])
@pytest.mark.parametrize("chunk_size", [1, 3, TR, None])  # 3 pads 7 positions to 9
def test_chunked_logp_entropy_and_gradients_equal_the_full_logits(tie_embeddings, chunk_size):
  config, params, tokens, mask = _problem(tie_embeddings)
  weights = jnp.asarray(np.random.default_rng(1).standard_normal((3, TR)), jnp.float32)

  def loss(fn, p):
    logp, entropy = fn(p)
    return jnp.sum(weights * logp) + 0.1 * jnp.sum(weights * entropy), (logp, entropy)

  reference = jax.jit(jax.value_and_grad(
      lambda p: loss(lambda q: _reference(q, config, tokens, mask, 0.7), p), has_aux=True))
  chunked = jax.jit(jax.value_and_grad(
      lambda p: loss(lambda q: _chunked(q, config, tokens, mask, 0.7, chunk_size), p), has_aux=True))
  (_, (ref_logp, ref_entropy)), ref_grads = reference(params)
  (_, (logp, entropy)), grads = chunked(params)
  assert logp.shape == entropy.shape == (3, TR)
  np.testing.assert_allclose(logp, ref_logp, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(entropy, ref_entropy, rtol=1e-6, atol=1e-6)
  # Gradients sum the positions in another order: equal to float32 rounding of their scale.
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(ref_grads), jax.tree.leaves(grads)):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6 * float(np.max(np.abs(a))),
                               err_msg=jax.tree_util.keystr(path))


def test_logits_chunk_size():
  # 2^25 logits: 8 rows x V = 151,936 -> 27 positions per chunk; a small vocabulary fits whole.
  assert logprob.logits_chunk_size(8, 512, 151_936) == 27
  assert logprob.logits_chunk_size(256, 8, 40) == 8
  assert logprob.logits_chunk_size(10**6, 8, 10**6) == 1
  config, params, tokens, mask = _problem(True)
  hidden = forward(params, config, tokens, mask, head=False).hidden
  with pytest.raises(ValueError, match="chunk_size must be >= 1"):
    logprob.chunked_response_logp(params, config, hidden, tokens, TR, chunk_size=0)


def test_response_positions_by_hand():
  # T = 10 tokens, the last Tr = 3 are the response: positions 6, 7, 8 predict tokens 7, 8, 9.
  assert logprob.response_positions(10, 3) == (6, 9)
  for bad in (0, 10):
    with pytest.raises(ValueError, match="response length"):
      logprob.response_positions(10, bad)
