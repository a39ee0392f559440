"""A step's packing: microbatch sizes by hand, and the update's minibatches."""

import jax
import ml_collections
import numpy as np
import pytest

from rlscale.packing import layout


@pytest.mark.parametrize("packed, width, budget, micro, platform, noise, parts, expected", [
    (10, 100, 300, None, "tpu", False, 1, (4, 3)),     # budget: 3 rows each, 4 microbatches
    (2, 100, 300, None, "tpu", False, 1, (1, 2)),      # never more rows than the batch packs into
    (10, 100, None, 3, "tpu", False, 1, (3, 4)),       # rl.microbatches: ceil(10 / 3) rows each
    (10, 100, 300, 3, "tpu", False, 1, (4, 3)),        # the budget wins over rl.microbatches
    (10, 100, None, None, "cpu", False, 1, (1, 10)),   # CPU: >= 1,024 tokens per microbatch
    (30, 100, None, None, "cpu", False, 1, (3, 11)),
    (10, 100, None, None, "tpu", False, 1, (1, 10)),   # GPU / TPU: one microbatch
    (10, 100, None, None, "tpu", True, 1, (2, 5)),     # the noise scale needs two
    (1, 100, None, None, "tpu", True, 1, (1, 1)),      # ... which one row cannot give
    (10, 100, 300, None, "tpu", False, 4, (3, 4)),     # rows a multiple of the batch devices
])
def test_microbatch_shape_by_hand(packed, width, budget, micro, platform, noise, parts, expected):
  assert layout.microbatch_shape(packed, width, max_tokens_per_microbatch=budget,
                                 microbatches=micro, platform=platform,
                                 measure_noise_scale=noise, parts=parts) == expected


def test_microbatch_shape_refuses_a_budget_below_one_row():
  with pytest.raises(ValueError, match="max_tokens_per_microbatch=50 must be >= "
                                       "train.max_tokens_per_row=100"):
    layout.microbatch_shape(4, 100, max_tokens_per_microbatch=50, microbatches=None,
                            platform="cpu")


def test_minibatch_rows_are_the_padded_steps():
  key = jax.random.key(3)
  rows = layout.minibatch_rows(key, 8, epochs=2, minibatches=2)
  for epoch in range(2):
    order = np.asarray(jax.random.permutation(jax.random.fold_in(key, epoch), 8))
    np.testing.assert_array_equal(rows[2 * epoch], order[0::2])
    np.testing.assert_array_equal(rows[2 * epoch + 1], order[1::2])
  np.testing.assert_array_equal(layout.minibatch_rows(None, 4, 1, 1), [[0, 1, 2, 3]])


def test_update_plan_shapes():
  rl = ml_collections.ConfigDict({"epochs": 1, "minibatches": 2, "microbatches": None})
  mask = np.ones((8, 10), np.int32)
  plan = layout.update_plan(mask, 4, jax.random.key(0), rl, width=20,
                            max_tokens_per_microbatch=40, platform="tpu")
  # 4 sequences of 10 tokens per minibatch: 2 rows of 20, 2 rows per microbatch.
  assert plan.rows.shape == (2, 4)
  assert plan.token_src.shape == (2, 1, 2, 20) and plan.target_src.shape == (2, 1, 2, 19)
  assert (plan.segment_ids.max(axis=-1) == 2).all()
