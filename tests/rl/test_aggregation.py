"""Loss aggregation modes: the hand values of the issue, and shard-invariance."""

import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.rl import aggregation as agg

# Sequences A = [1, 1] and B = [2, 2, 2, 2], padded to 4 tokens.
LOSS = jnp.array([[1.0, 1.0, 7.0, 7.0], [2.0, 2.0, 2.0, 2.0]])
MASK = jnp.array([[1, 1, 0, 0], [1, 1, 1, 1]])


@pytest.mark.parametrize("mode, norm, expected", [
    ("token-mean", None, 10 / 6),
    ("seq-mean-token-mean", None, 1.5),
    ("seq-mean-token-sum", None, 5.0),
    ("seq-mean-token-sum-norm", 4.0, 1.25),
])
def test_hand_values(mode, norm, expected):
  np.testing.assert_allclose(agg.aggregate_loss(LOSS, MASK, mode, norm_constant=norm), expected,
                             rtol=1e-6)


@pytest.mark.parametrize("mode", agg.LOSS_AGG_MODES)
def test_single_token_scalar_case(mode):
  out = agg.aggregate_loss(jnp.array([[3.0]]), jnp.array([[1]]), mode, norm_constant=1.0)
  np.testing.assert_allclose(out, 3.0)


@pytest.mark.parametrize("mode", agg.LOSS_AGG_MODES)
def test_shards_with_global_counts_sum_to_full_batch(mode):
  rng = np.random.default_rng(0)
  loss = jnp.asarray(rng.normal(size=(8, 5)), jnp.float32)
  mask = jnp.asarray(np.arange(5)[None, :] < rng.integers(0, 6, size=(8, 1)), jnp.int32)
  full = agg.aggregate_loss(loss, mask, mode, norm_constant=5.0)
  counts = agg.aggregation_counts(mask)
  parts = [agg.aggregate_loss(loss[i:i + 2], mask[i:i + 2], mode, norm_constant=5.0, counts=counts)
           for i in range(0, 8, 2)]
  np.testing.assert_allclose(sum(parts), full, rtol=1e-6)


def test_masked_nan_does_not_leak_and_empty_rows_are_skipped():
  loss = jnp.array([[1.0, jnp.nan], [jnp.inf, jnp.inf]])
  mask = jnp.array([[1, 0], [0, 0]])
  for mode in agg.LOSS_AGG_MODES:
    np.testing.assert_allclose(agg.aggregate_loss(loss, mask, mode, norm_constant=1.0), 1.0)


def test_errors():
  with pytest.raises(ValueError, match=r"rl.loss_agg_mode='mean' is not one of"):
    agg.aggregate_loss(LOSS, MASK, "mean")
  with pytest.raises(ValueError, match="needs rl.loss_agg_norm > 0"):
    agg.aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm")
  with pytest.raises(ValueError, match="must equal response_mask shape"):
    agg.aggregate_loss(LOSS[:, :3], MASK, "token-mean")
