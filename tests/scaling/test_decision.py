"""The decision rule, paired t intervals on log ratios, and verdicts: values by hand."""

import math

import pytest

from rlscale.scaling import decision

T_975_DF2 = 4.302652729911275  # t quantile 0.975 with 2 degrees of freedom (tables)
T_975_DF3 = 3.182446305284263


def test_rule_compares_throughput_gain_with_samples_penalty():
  assert decision.predicted_faster(2.0, 1.5)   # 2x throughput, 1.5x samples: faster
  assert not decision.predicted_faster(1.2, 1.5)
  assert not decision.predicted_faster(1.5, 1.5)  # equal time is not faster


def test_paired_log_ratio_interval_by_hand():
  # Seeds 0, 1, 2: ratios 2, 2, 4 -> logs ln2, ln2, 2 ln2: mean (4/3) ln2,
  # sd = ln2 * sd([1, 1, 2]) = ln2 / sqrt(3), half width t(0.975, 2) sd / sqrt(3) = t ln2 / 3.
  paired = decision.paired_log_ratio({0: 200, 1: 400, 2: 400}, {0: 100, 1: 200, 2: 100})
  mean, half = 4 / 3 * math.log(2), T_975_DF2 * math.log(2) / 3
  assert paired.ratio == pytest.approx(math.exp(mean))  # 2^(4/3), the geometric mean of 2, 2, 4
  assert paired.ci == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
  assert paired.n == 3 and paired.seeds == [0, 1, 2]


def test_pairing_uses_only_common_seeds_and_ignores_order():
  # Unpaired, means 250 / 150; paired by seed the ratios are 2, 3, 2.5, 2 (seed 9 has no base).
  paired = decision.paired_log_ratio({1: 300, 0: 200, 2: 250, 3: 200, 9: 1.0},
                                     {0: 100, 1: 100, 2: 100, 3: 100})
  logs = [math.log(2), math.log(3), math.log(2.5), math.log(2)]
  mean = sum(logs) / 4
  sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 3)
  assert paired.ratio == pytest.approx(math.exp(mean))
  assert paired.ci == pytest.approx((math.exp(mean - T_975_DF3 * sd / 2),
                                     math.exp(mean + T_975_DF3 * sd / 2)))
  assert paired.n == 4


def test_no_interval_below_three_seeds():
  paired = decision.paired_log_ratio({0: 200, 1: 400}, {0: 100, 1: 100})
  assert paired.ratio == pytest.approx(math.sqrt(2 * 4)) and paired.ci is None
  assert decision.t_interval([1.0, 3.0]) is None
  assert decision.verdict(paired.ci) == "unresolved"


def test_t_interval_of_a_mean_by_hand():
  # [1, 2, 3]: mean 2, sd 1, half width t(0.975, 2) / sqrt(3).
  low, high = decision.t_interval([1.0, 2.0, 3.0])
  assert (low, high) == pytest.approx((2 - T_975_DF2 / math.sqrt(3), 2 + T_975_DF2 / math.sqrt(3)))


def test_verdicts_are_three_valued():
  assert decision.verdict((0.5, 0.9)) == "faster"
  assert decision.verdict((1.1, 1.4)) == "slower"
  assert decision.verdict((0.8, 1.2)) == "unresolved"
  assert decision.verdict(None) == "unresolved"
  assert decision.verdict((0.5, 0.9), censored=True) == "unresolved"


def test_time_ratio_interval_divides_by_the_throughput_ratio():
  assert decision.time_ratio_interval((1.0, 2.0), 2.0) == pytest.approx((0.5, 1.0))
  # With the q ratio's interval [1.6, 2.5]: low end over the highest q ratio, high over the lowest.
  assert decision.time_ratio_interval((1.0, 2.0), 2.0, (1.6, 2.5)) == pytest.approx((0.4, 1.25))
  assert decision.time_ratio_interval(None, 2.0) is None


def test_errors_name_the_problem():
  with pytest.raises(ValueError, match="no seed in common"):
    decision.paired_log_ratio({0: 1.0}, {1: 1.0})
  with pytest.raises(ValueError, match="positive finite"):
    decision.paired_log_ratio({0: 0.0}, {0: 1.0})
  with pytest.raises(ValueError, match="level"):
    decision.t_interval([1.0, 2.0, 3.0], level=1.5)


def test_seeds_needed_for_a_half_width_by_hand():
  # sd 0.2 of log ratios, +-15% wanted (log 1.15 = 0.1398): n = 9 gives t(0.975, 8) = 2.306,
  # 2.306 x 0.2 / 3 = 0.1537 > 0.1398; n = 10: 2.262 x 0.2 / sqrt(10) = 0.1431 > 0.1398;
  # n = 11: 2.228 x 0.2 / sqrt(11) = 0.1344 <= 0.1398.
  assert decision.seeds_needed(0.2, math.log(1.15)) == 11
  assert decision.seeds_needed(0.0, 0.1) == 3  # never below the interval's minimum
  with pytest.raises(ValueError, match="half_width"):
    decision.seeds_needed(0.1, 0.0)
