"""Sample-indexed runs (issue 9 item 1): train.total_samples and train.eval_every_samples."""

import types

import pytest

from rlscale.runner import loop
from rlscale.runner.validate import resolve_total_steps
from rlscale.runner.evaluate import Evaluator, evaluation_key
from rlscale.runner.metrics_log import read_metrics
from tests.runner.runner_configs import tiny_config


def _train(**fields):
  return types.SimpleNamespace(get=lambda name: fields.get(name))


def _eval_steps(batch, total_samples, eval_every_samples):
  """(step, samples) of every evaluation after the warm start, for a run of fixed batch."""
  total_steps = resolve_total_steps(_train(total_samples=total_samples), batch)
  return [(step, step * batch) for step in range(1, total_steps + 1)
          if loop.evaluation_due(step=step, total_steps=total_steps,
                                 samples_before=(step - 1) * batch, samples_after=step * batch,
                                 eval_every=50, eval_every_samples=eval_every_samples)]


def test_batch_sizes_evaluate_at_the_same_sample_counts():
  # Budget 4096 responses, E = 1024: B = 64 takes 64 steps and evaluates at steps 16, 32, 48, 64;
  # B = 256 takes 16 steps and evaluates at steps 4, 8, 12, 16; both at 1024, 2048, 3072, 4096.
  assert _eval_steps(64, 4096, 1024) == [(16, 1024), (32, 2048), (48, 3072), (64, 4096)]
  assert _eval_steps(256, 4096, 1024) == [(4, 1024), (8, 2048), (12, 3072), (16, 4096)]


def test_batch_not_dividing_eval_every_samples_evaluates_at_the_first_step_past_each_multiple():
  # B = 384, E = 1024, budget 4096 -> ceil(4096 / 384) = 11 steps (4224 responses). Counts after
  # each step: 384, 768, 1152*, 1536, 1920, 2304*, 2688, 3072*, 3456, 3840, 4224* (last step).
  assert _eval_steps(384, 4096, 1024) == [(3, 1152), (6, 2304), (8, 3072), (11, 4224)]
  # A batch larger than E crosses several multiples in one step: one evaluation per step.
  assert _eval_steps(2048, 4096, 1024) == [(1, 2048), (2, 4096)]


def test_without_eval_every_samples_evaluates_every_eval_every_steps():
  due = [s for s in range(1, 8) if loop.evaluation_due(
      step=s, total_steps=7, samples_before=0, samples_after=1, eval_every=3,
      eval_every_samples=None)]
  assert due == [3, 6, 7]


def test_total_steps_from_the_budget():
  assert resolve_total_steps(_train(total_steps=500), 256) == 500
  assert resolve_total_steps(_train(total_samples=4096), 256) == 16
  assert resolve_total_steps(_train(total_samples=4096, total_steps=16), 256) == 16
  assert resolve_total_steps(_train(total_samples=4097), 256) == 17  # ceil
  with pytest.raises(ValueError, match=r"train\.total_samples=4096 .*train\.total_steps=500"):
    resolve_total_steps(_train(total_samples=4096, total_steps=500), 256)
  with pytest.raises(ValueError, match=r"train\.total_steps .*train\.total_samples"):
    resolve_total_steps(_train(), 256)


@pytest.mark.parametrize("field, value", [("total_samples", 0), ("eval_every_samples", -5),
                                          ("eval_every_samples", True)])
def test_bad_sample_fields_are_named(tmp_path, field, value):
  from rlscale.runner.builders import build_run  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match=f"train\\.{field}"):
    build_run(tiny_config(**{f"train__{field}": value}), str(tmp_path), log=lambda _: None)


def test_run_by_sample_budget_with_one_fixed_evaluation_key(tmp_path, monkeypatch):
  """B = 2 x 2 = 4, budget 12 -> 3 steps; E = 8 -> evaluations at 0, 8 (step 2) and 12 (last).
  Every evaluation samples with the one key from task.eval_seed (issue 13 item 10): before, each
  drew fold_in(key(config.seed), 1e9 + step)."""
  keys = []
  original = Evaluator.__call__

  def spy(self, params, rng):
    import jax  # pylint: disable=g-import-not-at-top
    keys.append(jax.random.key_data(rng).tolist())
    return original(self, params, rng)

  monkeypatch.setattr(Evaluator, "__call__", spy)
  config = tiny_config(sft__cache_dir=str(tmp_path / "sft"), train__total_steps=None,
                       train__total_samples=12, train__eval_every_samples=8, train__eval_every=1)
  summary = loop.train_and_evaluate(config, str(tmp_path / "run"))
  assert summary["steps"] == 3 and summary["samples_consumed"] == 12
  records = read_metrics(str(tmp_path / "run" / "metrics.jsonl"))
  assert [r["samples"] for r in records if "eval/greedy_accuracy" in r] == [0, 8, 12]
  import jax  # pylint: disable=g-import-not-at-top
  expected = jax.random.key_data(evaluation_key(config.task.eval_seed)).tolist()
  assert keys == [expected] * 3
