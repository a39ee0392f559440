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

import numpy as np  # noqa: E402  pylint: disable=g-import-not-at-top

from rlscale.runner.metrics_log import series  # noqa: E402

# (metric key, panel title); eval metrics exist only on evaluation steps.
PANELS = (
    ("eval/greedy_accuracy", "held-out greedy accuracy"),
    ("eval/pass_at_k", "held-out pass@k"),
    ("reward/mean", "training reward (mean over the batch)"),
    ("groups/with_variance", "fraction of groups with reward variance"),
)
# With one response per prompt (PPO) no group has reward variance; the last panel shows length.
SINGLE_RESPONSE_PANEL = ("response/length_mean", "mean response length (tokens)")
FRACTIONS = {"eval/greedy_accuracy", "eval/pass_at_k", "groups/with_variance"}  # y in [0, 1]
# Per-step metrics drawn as raw points under a running mean (they are noisy batch statistics).
SMOOTHED = {"reward/mean", "groups/with_variance", "response/length_mean"}


def panels(group_size: int, pass_k: int | None = None) -> tuple:
  """The (metric key, title) panels for runs with `group_size` responses per prompt; the pass@k
  title names k when `pass_k` (eval.pass_k) is given."""
  chosen = PANELS if group_size > 1 else PANELS[:-1] + (SINGLE_RESPONSE_PANEL,)
  if pass_k is None:
    return chosen
  return tuple((key, f"held-out pass@{pass_k} ({pass_k} samples per prompt)")
               if key == "eval/pass_at_k" else (key, title) for key, title in chosen)


# Compilation stretches at least this long are shaded on the wall-time figure.
MARKED_COMPILE_SECONDS = 1.0
COMPILE_LABEL = "JAX compilation (first evaluation and step, new batch shapes)"

# The RL clock starts after model loading and the warm start (reported apart in summary.json).
X_AXES = (("samples", "responses consumed"),
          ("wall/total", "wall time (s) of RL; model load and warm start excluded"))


def running_mean(values, window: int) -> np.ndarray:
  """Trailing running mean over `window` points ([n] float64): point i averages values
  [max(0, i - window + 1), i], so the start uses the points it has."""
  values = np.asarray(values, np.float64)
  sums = np.cumsum(np.insert(values, 0, 0.0))
  ends = np.arange(1, len(values) + 1)
  starts = np.maximum(ends - window, 0)
  return (sums[ends] - sums[starts]) / (ends - starts)


def smoothing_window(n: int) -> int:
  """Points averaged by the running mean of an n-point per-step curve: about n / 20, at least 3;
  1 (no smoothing) below 10 points."""
  return 1 if n < 10 else max(3, n // 20)


def run_title(*, algorithm: str, prompts_per_step: int, group_size: int, update_batch: int,
              learning_rate: float, base_learning_rate: float, lr_scaling: str,
              reference_batch: int, schedule: str) -> str:
  """A figure title that says which run it shows, e.g.
  "GRPO: P 32 x G 8 = B 256, peak lr 1e-04 (lr_scaling=none: the same lr at every B), cosine".

  Args: the algorithm preset, P, G, the responses per optimizer update b (B / minibatches, what
  LR scaling uses), the peak learning rate used, the reference lr0 at reference_batch B0, the LR
  scaling rule (none, linear, sqrt) and the schedule name."""
  batch = prompts_per_step * group_size
  if lr_scaling == "none":
    rule = "lr_scaling=none: the same lr at every B"
  else:
    ratio = "B/B0" if update_batch == batch else f"b/B0, b = {update_batch} per update"
    factor = ratio if lr_scaling == "linear" else f"sqrt({ratio})"
    rule = f"lr_scaling={lr_scaling}: {_number(base_learning_rate)} x {factor}, B0 = {reference_batch}"
  return (f"{algorithm.upper()}: P {prompts_per_step} x G {group_size} = B {batch}, "
          f"peak lr {_number(learning_rate)} ({rule}), {schedule} schedule")


def at_start_of_rl(records: list[dict]) -> list[dict]:
  """The records with the step-0 record (the starting policy's evaluation) at wall time 0.

  That record's `wall/total` is the seconds its own evaluation took (~5 s): plotted as is, the
  policy RL starts from would sit after the RL clock's start, as if RL had run. Later records keep
  their clock (their evaluation time is part of the run's wall time)."""
  return [dict(r, **{"wall/total": 0.0}) if r.get("step") == 0 and "wall/total" in r else r
          for r in records]


def compile_spans(records: list[dict], min_seconds: float = MARKED_COMPILE_SECONDS
                  ) -> list[tuple[float, float]]:
  """(start, end) in RL wall seconds of each record's JAX compilation of >= min_seconds: its
  `time/compile` seconds (`wall/compile` for the run's first record, the warm start's
  evaluation, which has no interval fields) placed at the start of its interval, the previous
  record's `wall/total` (0 for the first; where in the step the compile ran is not recorded).
  During these stretches no RL step advances, which is why the wall-time curves have gaps there.

  Args: metrics.jsonl records as written (before `at_start_of_rl`)."""
  spans, start = [], 0.0
  for record in records:
    seconds = record.get("time/compile", 0.0 if "time/total" in record
                         else record.get("wall/compile", 0.0))
    if seconds >= min_seconds:
      spans.append((start, start + seconds))
    start = record.get("wall/total", start)
  return spans


def _number(x: float) -> str:
  """1e-4 -> "1e-04", 1.414e-4 -> "1.41e-04", 0.3 -> "0.3": learning rates read at a glance."""
  return f"{x:.3g}" if x >= 1e-2 else f"{x:.2e}".replace(".00e", "e")


def plot_curves(records: list[dict], out_dir: str, *, title: str = "",
                group_size: int = 2, pass_k: int | None = None) -> dict[str, str]:
  """Writes `curves_vs_samples.png` and `curves_vs_wall_time.png` into out_dir.

  Args:
    records: metrics.jsonl records (dicts with `samples`, `wall/total` and the `panels` keys).
    out_dir: directory for the PNGs.
    title: figure title (`run_title`: algorithm, batch, learning rate and its rule).
    group_size: responses per prompt G; with G = 1 the reward-variance panel (always 0) becomes
      mean response length.
    pass_k: k of the pass@k panel (eval.pass_k), named in its title.
  Returns: {"vs_samples": path, "vs_wall_time": path}. The wall-time figure shades the
  compilation stretches (`compile_spans`).
  """
  paths = {}
  chosen = panels(group_size, pass_k)
  spans = compile_spans(records)
  records = at_start_of_rl(records)
  for (x_key, x_label), name in zip(X_AXES, ("vs_samples", "vs_wall_time")):
    fig, axes = plt.subplots(1, len(chosen), figsize=(4.2 * len(chosen), 3.6))
    for i, (ax, (y_key, y_title)) in enumerate(zip(axes, chosen)):
      if x_key == "wall/total":
        for j, (start, end) in enumerate(spans):
          ax.axvspan(start, end, color="0.85", zorder=0,
                     label=COMPILE_LABEL if i == 0 and j == 0 else None)
        if i == 0 and spans:
          ax.legend(fontsize=7, loc="best")
      xs, ys = series(records, x_key, y_key)
      window = smoothing_window(len(xs)) if y_key in SMOOTHED else 1
      if window > 1:
        ax.plot(xs, ys, linestyle="none", marker=".", markersize=3, alpha=0.35, label="per step")
        ax.plot(xs, running_mean(ys, window), linewidth=1.6,
                label=f"running mean of {window} steps")
        ax.legend(fontsize=7, loc="best")
      else:
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3)
      ax.set_title(y_title, fontsize=10)
      ax.set_xlabel(x_label, fontsize=9)
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
