"""Learning-curve panels: which metrics are drawn for grouped and single-response runs."""

import os

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
