"""The decision rule and its bootstrap intervals."""

import pytest

from rlscale.scaling import decision


def test_rule_compares_throughput_gain_with_samples_penalty():
  assert decision.predicted_faster(2.0, 1.5)   # 2x throughput, 1.5x samples: faster
  assert not decision.predicted_faster(1.2, 1.5)
  assert not decision.predicted_faster(1.5, 1.5)  # equal time is not faster


def test_bootstrap_of_constant_seeds_is_the_ratio():
  assert decision.bootstrap_ratio_ci([300, 300], [100, 100]) == pytest.approx((3.0, 3.0))
  assert decision.bootstrap_ratio_ci([300], [100]) == pytest.approx((3.0, 3.0))


def test_bootstrap_interval_spans_the_seed_extremes():
  low, high = decision.bootstrap_ratio_ci([200, 400], [100, 100], resamples=4000)
  assert low == pytest.approx(2.0) and high == pytest.approx(4.0)
  low, high = decision.bootstrap_mean_ci([1.0, 3.0], resamples=4000)
  assert low == pytest.approx(1.0) and high == pytest.approx(3.0)


def test_bootstrap_errors():
  with pytest.raises(ValueError, match="at least one"):
    decision.bootstrap_ratio_ci([], [1.0])
  with pytest.raises(ValueError, match="level"):
    decision.bootstrap_mean_ci([1.0], level=1.5)
