"""Samples-to-target, censoring and invariance scores on hand-made curves."""

import numpy as np
import pytest

from rlscale.scaling import curves


def test_centred_mean_window():
  # Window 3: [mean(1, 3), mean(1, 3, 5), mean(3, 5, 7), mean(5, 7)].
  np.testing.assert_allclose(curves.centred_mean([1.0, 3.0, 5.0, 7.0], 3), [2.0, 3.0, 5.0, 6.0])
  np.testing.assert_allclose(curves.centred_mean([1.0, 3.0, 5.0], 1), [1.0, 3.0, 5.0])
  with pytest.raises(ValueError, match="window"):
    curves.centred_mean([1.0], 0)


def test_crossing_between_two_evaluations_is_interpolated():
  # 0.4 at 100 responses, 0.6 at 200: 0.5 is reached halfway, at 150.
  c = curves.samples_to_target([0, 100, 200], [0.2, 0.4, 0.6], 0.5)
  assert c.samples == pytest.approx(150.0) and c.bound == pytest.approx(150.0)
  assert not c.censored


def test_crossing_uses_the_centred_smoothed_curve():
  # Window 3: smoothed [0.3, 0.4, 1.6 / 3, 0.6] (the ends average 2 values); 0.45 lies between
  # 0.4 (at 10) and 1.6 / 3 (at 20): 10 + 10 x 0.05 / (1.6 / 3 - 0.4) = 13.75.
  c = curves.samples_to_target([0, 10, 20, 30], [0.2, 0.4, 0.6, 0.6], 0.45, window=3)
  assert c.samples == pytest.approx(13.75)
  assert not c.censored


def test_sustained_crossing_is_the_last_one_from_below():
  # Crosses 0.5 at 5 (0 -> 1), dips to 0 at 20, crosses again at 25 and stays: N* = 25, first 5.
  c = curves.samples_to_target([0, 10, 20, 30, 40], [0.0, 1.0, 0.0, 1.0, 0.8], 0.5)
  assert c.samples == pytest.approx(25.0) and c.bound == pytest.approx(25.0)
  assert c.first == pytest.approx(5.0) and not c.censored


def test_a_curve_ending_below_the_target_is_censored_with_its_first_crossing():
  c = curves.samples_to_target([0, 10, 20], [0.0, 0.6, 0.4], 0.5)
  assert c.censored and c.samples is None and c.bound == 20.0
  assert c.first == pytest.approx(10 * 0.5 / 0.6)


def test_never_reaching_the_target_is_censored_at_the_budget():
  c = curves.samples_to_target([0, 100, 200], [0.2, 0.3, 0.4], 0.5)
  assert c == curves.Crossing(None, True, 200.0, None)


def test_lower_is_better():
  c = curves.samples_to_target([0, 10], [1.0, 0.0], 0.25, higher_is_better=False)
  assert c.samples == pytest.approx(7.5)


def test_curve_shape_errors():
  with pytest.raises(ValueError, match="equal non-zero length"):
    curves.samples_to_target([0, 1], [0.1], 0.5)
  with pytest.raises(ValueError, match="increasing"):
    curves.samples_to_target([0, 0], [0.1, 0.2], 0.5)


def test_invariance_identical_curves_score_zero():
  curve = ([0, 10, 20], [0.1, 0.5, 0.7])
  assert curves.invariance_score({0: curve, 1: curve}, {0: curve, 1: curve}) == 0.0


def test_invariance_of_a_shifted_curve_is_the_shift():
  ref = ([0, 10, 20], [0.1, 0.5, 0.7])
  shifted = ([0, 10, 20], [0.2, 0.6, 0.8])
  assert curves.invariance_score({0: shifted}, {0: ref}) == pytest.approx(0.1)


def test_gap_leaves_out_the_shared_start():
  # Both start at the warm start's 0.1; gaps 0.2 and 0.4 at 10 and 20: mean 0.3 (0.2 with 0).
  ref, cand = ([0, 10, 20], [0.1, 0.3, 0.3]), ([0, 10, 20], [0.1, 0.5, 0.7])
  assert curves.curve_gap(cand, ref) == pytest.approx(0.3)
  assert curves.curve_gap(cand, ref, skip_start=False) == pytest.approx(0.2)


def test_invariance_pairs_seeds_and_averages():
  ref = {0: ([0, 10], [0.0, 0.0]), 1: ([0, 10], [1.0, 1.0])}
  cand = {0: ([0, 10], [0.2, 0.2]), 1: ([0, 10], [0.6, 0.6]), 2: ([0, 10], [9.0, 9.0])}
  # seed 0 gap 0.2, seed 1 gap 0.4; seed 2 has no reference.
  assert curves.invariance_score(cand, ref) == pytest.approx(0.3)
  assert curves.invariance_score({5: cand[0]}, ref) is None


def test_gap_on_a_common_grid_of_different_evaluation_points():
  # Reference evaluated at 0, 20; candidate at 0, 10, 20, 30 (both linear in samples, +0.1).
  ref = ([0, 20], [0.0, 0.2])
  cand = ([0, 10, 20, 30], [0.1, 0.2, 0.3, 0.4])
  np.testing.assert_allclose(curves.common_grid([cand, ref]), [0, 10, 20])
  assert curves.curve_gap(cand, ref) == pytest.approx(0.1)
