"""builders.held_out_examples: an explicit task.eval_size is required exactly; otherwise
task.default_eval_size is shrunk, with a warning, to what a data file holds."""

import ml_collections
import pytest

from rlscale.runner import builders


class _FileTask:
  """A task with `num_eval` held-out rows, like LocalMathSource."""

  def __init__(self, num_eval):
    self.num_eval = num_eval

  def eval_examples(self, n):
    if n > self.num_eval:
      raise ValueError(f"task.eval_size={n} but the file has only {self.num_eval} held-out rows")
    return list(range(n))


class _GeneratorTask:
  """A task that generates prompts (no num_eval), like ReasoningGymSource."""

  def eval_examples(self, n):
    return list(range(n))


def _config(**task):
  return ml_collections.ConfigDict({"task": {"data_path": "/data/small.jsonl",
                                             "holdout_fraction": 0.1, **task}})


def test_explicit_eval_size_is_required_exactly():
  logs = []
  assert builders.held_out_examples(_config(eval_size=3), _FileTask(5), logs.append) == [0, 1, 2]
  with pytest.raises(ValueError, match="task.eval_size=8 but the file has only 5"):
    builders.held_out_examples(_config(eval_size=8, default_eval_size=2), _FileTask(5), logs.append)
  assert not logs


def test_default_eval_size_shrinks_with_a_warning():
  logs = []
  config = _config(eval_size=None, default_eval_size=4)
  assert builders.held_out_examples(config, _FileTask(2), logs.append) == [0, 1]
  assert logs == ["warning: /data/small.jsonl holds 2 held-out rows at task.holdout_fraction=0.1, "
                  "fewer than task.default_eval_size=4: evaluating on 2 (set task.eval_size to "
                  "require a number)"]
  logs.clear()
  assert builders.held_out_examples(config, _FileTask(9), logs.append) == [0, 1, 2, 3]
  assert not logs


def test_default_eval_size_without_a_field_is_256():
  config = ml_collections.ConfigDict({"task": {"eval_size": None}})
  assert len(builders.held_out_examples(config, _GeneratorTask(), print)) == 256


def test_no_held_out_rows_names_holdout_fraction():
  with pytest.raises(ValueError, match="no held-out rows at task.holdout_fraction=0.1; raise it"):
    builders.held_out_examples(_config(eval_size=None), _FileTask(0), print)
