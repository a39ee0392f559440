"""Applying a plan on the device: gathers and scatters by hand."""

import jax.numpy as jnp
import numpy as np

from rlscale.packing import gather
from rlscale.packing.plan import pack_rows

INPUT_MASK = np.array([[0, 1, 1, 1, 1], [0, 0, 1, 1, 0]])


def test_take_by_hand():
  x = jnp.arange(10).reshape(2, 5)
  np.testing.assert_array_equal(gather.take(x, jnp.array([[3, -1, 9]])), [[3, 0, 9]])


def test_pack_batch_and_unpack_targets_round_trip():
  plan = pack_rows(INPUT_MASK, 2, [0, 1], width=7, rows_per_microbatch=1).arrays()
  tokens = jnp.array([[0, 11, 12, 13, 14], [0, 0, 21, 22, 0]])
  old_logp = jnp.array([[-1.0, -2.0], [-3.0, 0.0]])
  batch = {"tokens": tokens, "input_mask": jnp.asarray(INPUT_MASK),
           "response_mask": jnp.array([[1, 1], [1, 0]]), "old_logp": old_logp,
           "advantages": jnp.array([0.5, -0.5])}
  packed = gather.pack_batch(batch, plan)
  np.testing.assert_array_equal(packed["tokens"], [[[11, 12, 13, 14, 21, 22, 0]]])
  np.testing.assert_array_equal(packed["input_mask"], [[[1, 1, 1, 1, 2, 2, 0]]])
  np.testing.assert_array_equal(packed["old_logp"], [[[0, -1, -2, 0, -3, 0]]])
  np.testing.assert_array_equal(packed["advantages"], [[[0, 0.5, 0.5, 0, -0.5, 0]]])
  np.testing.assert_array_equal(packed["response_mask"], [[[0, 1, 1, 0, 1, 0]]])
  assert "ref_logp" not in packed
  back = gather.unpack_targets(packed["old_logp"], plan["target_src"], 2, 2)
  np.testing.assert_array_equal(back, old_logp)
  assert float(gather.sequences_in(plan["target_src"], packed["response_mask"], 2, 2)) == 2.0
  masked = jnp.zeros_like(packed["response_mask"]).at[0, 0, 4].set(1)
  assert float(gather.sequences_in(plan["target_src"], masked, 2, 2)) == 1.0
