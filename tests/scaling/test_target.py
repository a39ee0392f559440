"""The study's target against the evaluation's noise: values by hand."""

import math

import pytest

from rlscale.scaling import target


def test_binomial_standard_error_by_hand():
  # p = 0.5 on 256 prompts: sqrt(0.25 / 256) = 1 / 32.
  assert target.binomial_standard_error(0.5, 256) == pytest.approx(1 / 32)
  assert target.standard_errors_above(0.5 + 5 / 32, 0.5, 256) == pytest.approx(5.0)
  assert target.standard_errors_above(1.0, 1.0, 10) is None  # SE 0
  with pytest.raises(ValueError, match=">= 1 prompt"):
    target.binomial_standard_error(0.5, 0)


def test_a_target_two_standard_errors_above_the_warm_start_is_refused_in_one_line():
  with pytest.raises(target.WeakTargetError) as err:
    target.check_target(0.5 + 2 / 32, 0.5, 256, metric="eval/greedy_accuracy")
  message = str(err.value)
  assert "\n" not in message
  assert message.startswith("target eval/greedy_accuracy >= 0.5625 is 2.00 standard errors above "
                            "the warm start (0.500 on 256 prompts, SE 0.031)")
  assert "--allow_weak_target" in message


def test_weak_target_allowed_is_flagged():
  checked = target.check_target(0.5625, 0.5, 256, metric="m", allow_weak=True)
  assert checked["weak"] and checked["standard_errors_above_warm_start"] == pytest.approx(2.0)
  strong = target.check_target(0.5 + 3.5 / 32, 0.5, 256, metric="m")
  assert not strong["weak"] and strong["eval_size"] == 256


def test_proposed_target_says_it_was_chosen_after_the_runs():
  value, how = target.propose_target([0.2, 0.3], [0.6, 0.7, 0.5])
  # Highest warm start 0.3, median best 0.6: halfway 0.45.
  assert value == pytest.approx(0.45) and how.startswith("proposed after the runs")
  assert math.isclose(target.best_smoothed([0.1, 0.9, 0.1], 1), 0.9)
