"""Learning-curve panels: which metrics are drawn for grouped and single-response runs."""

import os

import numpy as np
import pytest

from rlscale.runner import plots


def _records():
  return [{"step": s, "samples": 4 * s, "wall/total": 0.5 * s, "reward/mean": 0.1 * s,
           "groups/with_variance": 0.0, "response/length_mean": 3.0 + s,
           **({"eval/greedy_accuracy": 0.2, "eval/pass_at_k": 0.4} if s % 2 == 0 else {})}
          for s in range(5)]


def test_single_response_runs_plot_length_instead_of_group_variance():
  keys = [key for key, _ in plots.panels(1)]
  assert "groups/with_variance" not in keys and keys[-1] == "response/length_mean"
  assert [key for key, _ in plots.panels(8)][-1] == "groups/with_variance"
  assert keys[:3] == [key for key, _ in plots.PANELS[:3]]


def test_plot_curves_writes_both_figures(tmp_path):
  for group_size in (1, 4):
    out = tmp_path / str(group_size)
    out.mkdir()
    paths = plots.plot_curves(_records(), str(out), title="t", group_size=group_size)
    assert sorted(paths) == ["vs_samples", "vs_wall_time"]
    for path in paths.values():
      assert os.path.getsize(path) > 1000


def test_pass_at_k_title_names_k():
  titles = dict(plots.panels(8, pass_k=4))
  assert titles["eval/pass_at_k"] == "held-out pass@4 (4 samples per prompt)"
  assert dict(plots.panels(8))["eval/pass_at_k"] == "held-out pass@k"


def test_running_mean_by_hand():
  np.testing.assert_allclose(plots.running_mean([1.0, 3.0, 5.0, 7.0], 2), [1.0, 2.0, 4.0, 6.0])
  np.testing.assert_allclose(plots.running_mean([2.0, 4.0, 9.0], 3), [2.0, 3.0, 5.0])
  assert plots.smoothing_window(9) == 1 and plots.smoothing_window(10) == 3
  assert plots.smoothing_window(500) == 25


@pytest.mark.parametrize("kwargs, title", [
    (dict(algorithm="grpo", prompts_per_step=32, group_size=8, update_batch=256,
          learning_rate=1e-4, base_learning_rate=1e-4, lr_scaling="none", reference_batch=256,
          schedule="cosine"),
     "GRPO: P 32 x G 8 = B 256, peak lr 1e-04 (lr_scaling=none: the same lr at every B), "
     "cosine schedule"),
    (dict(algorithm="dapo", prompts_per_step=64, group_size=8, update_batch=512,
          learning_rate=1e-4 * 2 ** 0.5, base_learning_rate=1e-4, lr_scaling="sqrt",
          reference_batch=256, schedule="constant"),
     "DAPO: P 64 x G 8 = B 512, peak lr 1.41e-04 (lr_scaling=sqrt: 1e-04 x sqrt(B/B0), B0 = 256), "
     "constant schedule"),
    (dict(algorithm="ppo", prompts_per_step=32, group_size=1, update_batch=16,
          learning_rate=1e-4 * 16 / 256, base_learning_rate=1e-4, lr_scaling="linear",
          reference_batch=256, schedule="cosine"),
     "PPO: P 32 x G 1 = B 32, peak lr 6.25e-06 (lr_scaling=linear: 1e-04 x b/B0, b = 16 per "
     "update, B0 = 256), cosine schedule"),
])
def test_run_title_names_algorithm_batch_and_lr_rule(kwargs, title):
  assert plots.run_title(**kwargs) == title


def test_wall_time_curves_put_the_starting_policy_at_zero(tmp_path, monkeypatch):
  # The step-0 record's clock holds its own evaluation (5.2 s); the policy it evaluates exists
  # at the RL clock's start. Step 2's point keeps its clock (1.0 s + 5.2 s).
  records = [dict(r, **{"wall/total": r["wall/total"] + 5.2}) for r in _records()]
  figures = []
  monkeypatch.setattr(plots.plt, "close", figures.append)
  plots.plot_curves(records, str(tmp_path), title="t", group_size=4)
  wall_figure = figures[1]
  accuracy = wall_figure.axes[0].get_lines()[0]
  np.testing.assert_allclose(accuracy.get_xdata(), [0.0, 6.2, 7.2])
  assert records[0]["wall/total"] == 5.2  # the caller's records are not changed


def test_compile_spans_sit_at_the_start_of_their_interval_by_hand():
  records = [
      # The warm start's evaluation, 8 s of which 7.5 compiling: 0 .. 7.5.
      {"step": 0, "wall/total": 8.0, "wall/compile": 7.5},
      {"step": 1, "wall/total": 18.0, "time/total": 10.0, "time/compile": 9.0},  # 8 .. 8 + 9 = 17
      {"step": 2, "wall/total": 18.5, "time/total": 0.5, "time/compile": 0.2},  # < 1 s: not shaded
      {"step": 3, "wall/total": 23.5, "time/total": 5.0, "time/compile": 4.0},  # 18.5 .. 22.5
  ]
  assert plots.compile_spans(records) == [(0.0, 7.5), (8.0, 17.0), (18.5, 22.5)]
  assert plots.compile_spans(records, min_seconds=0.1)[2] == (18.0, 18.2)
