"""Packing plans on the host: first-fit decreasing and the index arrays, by hand."""

import numpy as np
import pytest

from rlscale.packing import plan as plan_lib


def test_first_fit_decreasing_by_hand():
  # Longest first: 5 -> bin 0, 4 -> bin 1, 3 -> bin 2, 2 -> bin 1 (room 2), 1 -> bin 0 (room 1).
  assert plan_lib.first_fit_decreasing([5, 3, 4, 2, 1], 6) == [[0, 4], [2, 3], [1]]
  assert plan_lib.first_fit_decreasing([0, 2, 0], 4) == [[1]]  # empty sequences go nowhere
  assert plan_lib.first_fit_decreasing([], 4) == []


def test_first_fit_decreasing_refuses_a_sequence_longer_than_a_row():
  with pytest.raises(ValueError, match="train.max_tokens_per_row=4 .* 5 tokens"):
    plan_lib.first_fit_decreasing([3, 5], 4)


# Two padded rows of T = 5 tokens, the last Tr = 2 columns the response: row 0 holds a 2-token
# prompt (columns 1, 2) and a 2-token response; row 1 a 1-token prompt (column 2) and a 1-token
# response (column 3).
INPUT_MASK = np.array([[0, 1, 1, 1, 1], [0, 0, 1, 1, 0]])


def test_pack_rows_by_hand():
  plan = plan_lib.pack_rows(INPUT_MASK, 2, [0, 1], width=7, rows_per_microbatch=1)
  # One row: row 0's columns 1..4 (flat 1..4), then row 1's columns 2, 3 (flat 5 + 2, 5 + 3).
  np.testing.assert_array_equal(plan.token_src, [[[1, 2, 3, 4, 7, 8, -1]]])
  np.testing.assert_array_equal(plan.segment_ids, [[[1, 1, 1, 1, 2, 2, 0]]])
  # Packed column c predicts column c + 1: row 0's response tokens 0 and 1 (flat 0, 1) from
  # columns 1 and 2, row 1's response token 0 (flat 1 * 2 + 0) from column 4; nothing predicts
  # across the segment boundary (column 3) or into padding.
  np.testing.assert_array_equal(plan.target_src, [[[-1, 0, 1, -1, 2, -1]]])
  assert (plan.microbatches, plan.rows_per_microbatch) == (1, 1)


def test_pack_rows_deals_rows_round_the_microbatches_and_pads():
  plan = plan_lib.pack_rows(INPUT_MASK, 2, [0, 1], width=4, rows_per_microbatch=2)
  # Width 4 holds one sequence per row; one microbatch of 2 rows holds both, longest first.
  np.testing.assert_array_equal(plan.token_src[0, :, :2], [[1, 2], [7, 8]])
  # Two microbatches: packed row i goes to microbatch i mod 2, the rest is padding rows.
  plan = plan_lib.pack_rows(INPUT_MASK, 2, [0, 1], width=4, rows_per_microbatch=2,
                            microbatches=2)
  np.testing.assert_array_equal(plan.segment_ids[:, 0], [[1, 1, 1, 1], [1, 1, 0, 0]])
  np.testing.assert_array_equal(plan.segment_ids[:, 1], np.zeros((2, 4)))  # padding rows
  np.testing.assert_array_equal(plan.target_src[:, 1], -np.ones((2, 3)))
  with pytest.raises(ValueError, match="2 packed rows do not fit 1 microbatches of 1 rows"):
    plan_lib.pack_rows(INPUT_MASK, 2, [0, 1], width=4, rows_per_microbatch=1, microbatches=1)


def test_real_spans_and_non_contiguous_rows():
  np.testing.assert_array_equal(plan_lib.real_spans(INPUT_MASK), [[1, 5], [2, 4]])
  np.testing.assert_array_equal(plan_lib.real_spans(np.zeros((1, 3))), [[0, 0]])
  with pytest.raises(ValueError, match="row 1's real tokens"):
    plan_lib.real_spans(np.array([[1, 1, 0], [1, 0, 1]]))


def test_every_real_token_lands_once_in_random_plans():
  rng = np.random.default_rng(0)
  for _ in range(20):
    rows, prompt, response = rng.integers(1, 9), rng.integers(1, 6), rng.integers(1, 6)
    prompt_len = rng.integers(1, prompt + 1, rows)
    response_len = rng.integers(0, response + 1, rows)
    cols = np.arange(prompt + response)
    mask = ((cols >= prompt - prompt_len[:, None])
            & (cols < prompt + response_len[:, None])).astype(np.int32)
    width = int(prompt + response + rng.integers(0, 6))
    plan = plan_lib.pack_rows(mask, response, range(rows), width=width,
                              rows_per_microbatch=int(rng.integers(1, 4)))
    real = np.flatnonzero(mask.reshape(-1))
    np.testing.assert_array_equal(np.sort(plan.token_src[plan.token_src >= 0]), real)
    targets = np.flatnonzero(mask[:, prompt:].reshape(-1))
    np.testing.assert_array_equal(np.sort(plan.target_src[plan.target_src >= 0]), targets)
    assert ((plan.token_src >= 0) == (plan.segment_ids > 0)).all()
