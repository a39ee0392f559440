"""Per-executable XLA options: the update step gets CPU_UPDATE_OPTIONS, everything else defaults."""

import jax
import jax.numpy as jnp
import numpy as np

from rlscale.train.compile_options import CPU_UPDATE_OPTIONS, with_cpu_compiler_options


def _fn():
  return jax.jit(lambda a, b: jnp.tanh(a @ b).sum(axis=0))


def test_compiles_once_per_signature_with_the_options_and_matches_the_default():
  fn = _fn()
  wrapped = with_cpu_compiler_options(fn, CPU_UPDATE_OPTIONS)
  a = np.random.default_rng(0).normal(size=(64, 32)).astype(np.float32)
  b = np.random.default_rng(1).normal(size=(32, 16)).astype(np.float32)
  np.testing.assert_allclose(wrapped(a, b), fn(a, b), rtol=1e-5, atol=1e-5)
  wrapped(a + 1, b)
  assert len(wrapped.compiled) == 1
  wrapped(a[:8], b)
  assert len(wrapped.compiled) == 2


def test_no_options_returns_the_function_itself():
  fn = _fn()
  assert with_cpu_compiler_options(fn, None) is fn
  assert with_cpu_compiler_options(fn, {}) is fn


def test_an_option_this_xla_lacks_falls_back_to_the_defaults(caplog):
  fn = _fn()
  wrapped = with_cpu_compiler_options(fn, {"xla_no_such_option_for_rlscale": "1"})
  a, b = np.ones((4, 3), np.float32), np.ones((3, 2), np.float32)
  with caplog.at_level("WARNING"):
    np.testing.assert_allclose(wrapped(a, b), fn(a, b))
  assert "xla_no_such_option_for_rlscale" in caplog.text
