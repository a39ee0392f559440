"""DAPO overlong shaping and the dynamic-sampling group filter."""

import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.rl import dapo


def test_overlong_penalty_by_hand():
  # L_max = 20, L_cache = 4: no penalty up to 16, then -1/4 per token down to -1 at 20.
  out = dapo.overlong_penalty(jnp.array([10, 16, 17, 18, 20, 25]), max_len=20, buffer_len=4)
  np.testing.assert_allclose(out, [0.0, 0.0, -0.25, -0.5, -1.0, -1.0])
  np.testing.assert_allclose(dapo.overlong_penalty(jnp.array([18]), max_len=20, buffer_len=4,
                                                   penalty_factor=2.0), [-1.0])
  np.testing.assert_array_equal(dapo.overlong_penalty(jnp.array([20]), max_len=20, buffer_len=0), [0.0])
  with pytest.raises(ValueError, match="overlong buffer length"):
    dapo.overlong_penalty(jnp.array([1]), max_len=4, buffer_len=5)


def test_overlong_buffer_tokens():
  assert dapo.overlong_buffer_tokens(0.2, 20480) == 4096
  assert dapo.overlong_buffer_tokens(0.0, 16) == 0
  with pytest.raises(ValueError, match="overlong_buffer_frac"):
    dapo.overlong_buffer_tokens(1.0, 16)


def test_groups_with_signal():
  out = dapo.groups_with_signal(jnp.array([1.0, 1.0, 0.0, 1.0, 0.35, 0.35]), 2)
  np.testing.assert_array_equal(out, [False, True, False])
  with pytest.raises(ValueError, match="do not split into groups"):
    dapo.groups_with_signal(jnp.ones(5), 2)
