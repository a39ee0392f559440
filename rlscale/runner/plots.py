"""PNG learning curves from metrics.jsonl: each metric against responses consumed and wall time.

The batch-size study compares runs on both axes: by samples (sample efficiency) and by seconds
(what a larger batch buys in throughput), so every curve is drawn twice.
"""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top
from matplotlib.ticker import EngFormatter  # noqa: E402  pylint: disable=g-import-not-at-top

from rlscale.runner.metrics_log import series  # noqa: E402

# (metric key, panel title); eval metrics exist only on evaluation steps.
PANELS = (
    ("eval/greedy_accuracy", "held-out greedy accuracy"),
    ("eval/pass_at_k", "held-out pass@k"),
    ("reward/mean", "training reward (mean)"),
    ("groups/with_variance", "fraction of groups with reward variance"),
)
# With one response per prompt (PPO) no group has reward variance; the last panel shows length.
SINGLE_RESPONSE_PANEL = ("response/length_mean", "mean response length (tokens)")
FRACTIONS = {"eval/greedy_accuracy", "eval/pass_at_k", "groups/with_variance"}  # y in [0, 1]


def panels(group_size: int) -> tuple:
  """The (metric key, title) panels for runs with `group_size` responses per prompt."""
  return PANELS if group_size > 1 else PANELS[:-1] + (SINGLE_RESPONSE_PANEL,)
X_AXES = (("samples", "responses consumed"), ("wall/total", "wall time (s)"))


def plot_curves(records: list[dict], out_dir: str, *, title: str = "",
                group_size: int = 2) -> dict[str, str]:
  """Writes `curves_vs_samples.png` and `curves_vs_wall_time.png` into out_dir.

  Args:
    records: metrics.jsonl records (dicts with `samples`, `wall/total` and the `panels` keys).
    out_dir: directory for the PNGs.
    title: figure title (e.g. the run's workdir).
    group_size: responses per prompt G; with G = 1 the reward-variance panel (always 0) becomes
      mean response length.
  Returns: {"vs_samples": path, "vs_wall_time": path}.
  """
  paths = {}
  chosen = panels(group_size)
  for (x_key, x_label), name in zip(X_AXES, ("vs_samples", "vs_wall_time")):
    fig, axes = plt.subplots(1, len(chosen), figsize=(4.2 * len(chosen), 3.4))
    for ax, (y_key, y_title) in zip(axes, chosen):
      xs, ys = series(records, x_key, y_key)
      ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3)
      ax.set_title(y_title, fontsize=10)
      ax.set_xlabel(x_label)
      ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 120k, not 120000 (ticks would collide)
      ax.grid(alpha=0.3)
      if y_key in FRACTIONS:
        ax.set_ylim(-0.02, 1.02)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = os.path.join(out_dir, f"curves_{name}.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    paths[name] = path
  return paths
