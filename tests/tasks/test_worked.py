"""Worked solutions (running sums) as SFT targets."""

import ml_collections
import pytest

from rlscale.tasks import make_task
from rlscale.tasks import worked


def test_running_sums_fold_the_first_two_terms_each_step():
  assert worked.running_sums("7 - 3 + 2") == "4 + 2 = 6"
  assert worked.running_sums("3 - 7 + 2") == "-4 + 2 = -2"
  assert worked.running_sums("12 + 30") == "42"
  assert worked.running_sums("5") == "5"
  assert worked.running_sums("4 + 1 + 7 - 7 + 7 - 6") == (
      "5 + 7 - 7 + 7 - 6 = 12 - 7 + 7 - 6 = 5 + 7 - 6 = 12 - 6 = 6")


def test_malformed_chains_are_rejected():
  for bad in ("7 * 3", "x + 1", "7 - - 3", ""):
    with pytest.raises(ValueError, match="worked solution"):
      worked.running_sums(bad)


def _chain_task(template):
  return make_task(dict(source="reasoning_gym", name="chain_sum", kwargs=ml_collections.ConfigDict(
      dict(min_terms=6, max_terms=6, min_digits=1, max_digits=1)),
      prompt_template="{metadata[expression]} =", target_template=template), seed=0)


def test_worked_target_scores_one_and_is_long():
  task = _chain_task(" {worked}")
  for i in range(20):
    example = task.train_example(i)
    target = task.format_target(example)
    assert target.endswith(" " + example.answer)
    assert task.score(target, example).reward == 1.0
    assert len(target) >= 48


def test_worked_needs_an_expression():
  task = make_task(dict(source="arithmetic", target_template="{worked}"), seed=0)
  with pytest.raises(ValueError, match=r"metadata\['expression'\]"):
    task.format_target(task.train_example(0))
