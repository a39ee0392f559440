"""KL estimators against values worked out by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.rl import kl


def test_scalar_values():
  logp, ref = jnp.array(-1.0), jnp.array(-1.5)  # d = ref - logp = -0.5
  np.testing.assert_allclose(kl.kl_divergence("k1", logp, ref), 0.5, rtol=1e-6)
  np.testing.assert_allclose(kl.kl_divergence("k2", logp, ref), 0.125, rtol=1e-6)
  np.testing.assert_allclose(kl.kl_divergence("k3", logp, ref), np.exp(-0.5) - 0.5, rtol=1e-6)


def test_batched_and_equal_policies():
  logp = jnp.array([[-1.0, -2.0], [-0.1, -3.0]])
  ref = jnp.array([[-1.0, -1.0], [-0.1, -4.0]])
  np.testing.assert_allclose(kl.kl_divergence("k1", logp, ref), [[0.0, -1.0], [0.0, 1.0]], atol=1e-7)
  np.testing.assert_allclose(kl.kl_divergence("k2", logp, ref), [[0.0, 0.5], [0.0, 0.5]], atol=1e-7)
  np.testing.assert_allclose(kl.kl_divergence("k3", logp, ref),
                             [[0.0, np.e - 2.0], [0.0, np.exp(-1.0)]], rtol=1e-6, atol=1e-7)


def test_k3_clamped_like_verl():
  # d = 50 -> clamped to 20, exp(20) - 21 is clamped to 10; d = -50 -> -20: exp(-20) + 19 -> 10.
  out = kl.kl_divergence("k3", jnp.array([-50.0, 0.0]), jnp.array([0.0, -50.0]))
  np.testing.assert_allclose(out, [10.0, 10.0])
  assert np.all(np.isfinite(out))


def test_shape_mismatch_and_unknown_name():
  with pytest.raises(ValueError, match="must equal ref_logp shape"):
    kl.kl_divergence("k3", jnp.zeros((2, 3)), jnp.zeros((2, 4)))
  with pytest.raises(ValueError, match=r"rl.kl_estimator='k4' is not registered; registered: \['k1', 'k2', 'k3'"):
    kl.kl_divergence("k4", jnp.zeros(2), jnp.zeros(2))


@pytest.mark.parametrize("name", ["k1", "k2", "k3"])
def test_token_impossible_under_both_policies_has_zero_kl_and_finite_gradient(name):
  # A masked vocabulary entry: logp = ref_logp = -inf. -inf - (-inf) was NaN; both agree, KL 0.
  logp = jnp.array([-jnp.inf, -1.0])
  ref = jnp.array([-jnp.inf, -1.5])
  out = kl.kl_divergence(name, logp, ref)
  expected = {"k1": 0.5, "k2": 0.125, "k3": np.exp(-0.5) - 0.5}[name]
  np.testing.assert_allclose(out, [0.0, expected], rtol=1e-6)
  grad = jax.grad(lambda x: jnp.sum(kl.kl_divergence(name, x, ref)))(logp)
  assert np.all(np.isfinite(grad)) and float(grad[0]) == 0.0


def test_log_ratio_keeps_the_gradient_of_the_difference():
  # The -inf guard must not touch equal finite values (on-policy ratios start exactly there).
  grad = jax.grad(lambda a: jnp.sum(kl.log_ratio(a, jnp.array([-1.0, -jnp.inf]))))(
      jnp.array([-1.0, -jnp.inf]))
  np.testing.assert_array_equal(grad, [1.0, 0.0])
  assert float(kl.log_ratio(jnp.array(-jnp.inf), jnp.array(-2.0))) == -np.inf
