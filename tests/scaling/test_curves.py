"""Samples-to-target, censoring and invariance scores on hand-made curves."""

import numpy as np
import pytest

from rlscale.scaling import curves


def test_running_mean_trailing_window():
  np.testing.assert_allclose(curves.running_mean([1.0, 3.0, 5.0, 7.0], 2), [1.0, 2.0, 4.0, 6.0])
  np.testing.assert_allclose(curves.running_mean([1.0, 3.0, 5.0], 1), [1.0, 3.0, 5.0])
  with pytest.raises(ValueError, match="window"):
    curves.running_mean([1.0], 0)


def test_crossing_between_two_evaluations_is_interpolated():
  # 0.4 at 100 responses, 0.6 at 200: 0.5 is reached halfway, at 150.
  c = curves.samples_to_target([0, 100, 200], [0.2, 0.4, 0.6], 0.5)
  assert c.samples == pytest.approx(150.0) and c.bound == pytest.approx(150.0)
  assert not c.censored


def test_crossing_uses_the_smoothed_curve():
  # Window 2: smoothed [0.2, 0.3, 0.5, 0.6]; 0.45 lies between 0.3 (at 10) and 0.5 (at 20): 17.5.
  c = curves.samples_to_target([0, 10, 20, 30], [0.2, 0.4, 0.6, 0.6], 0.45, window=2)
  assert c.samples == pytest.approx(17.5)
  assert not c.censored


def test_first_crossing_counts_not_a_later_one():
  c = curves.samples_to_target([0, 10, 20, 30], [0.0, 1.0, 0.0, 1.0], 0.5)
  assert c.samples == pytest.approx(5.0)


def test_never_reaching_the_target_is_censored_at_the_budget():
  c = curves.samples_to_target([0, 100, 200], [0.2, 0.3, 0.4], 0.5)
  assert c == curves.Crossing(None, True, 200.0)


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
