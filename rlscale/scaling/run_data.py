"""Reading a sweep's run directories: RunData (config, metrics records, summary), finding them,
and the sweep's metadata (sweep.json).

A run directory holds config.json, metrics.jsonl (or its gzipped archive, as committed results
store it) and summary.json once finished (`rlscale.runner`). `RunData` answers what the analysis
asks of one run: its batch, seeds, effective LR, evaluation curve, own clock by phase and budget.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import types

import numpy as np

from rlscale import inputs
from rlscale.runner.metrics_log import metrics_path, read_metrics
from rlscale.runner.timing import PHASES
from rlscale.train.optimizer import scaled_learning_rate


@dataclasses.dataclass
class RunData:
  """One run directory, read."""
  name: str
  path: str
  config: dict
  records: list
  summary: dict | None

  def get(self, dotted: str, default=None):
    node = self.config
    for key in dotted.split("."):
      if not isinstance(node, dict) or key not in node:
        return default
      node = node[key]
    return node

  @property
  def prompts_per_step(self) -> int:
    return int(self.get("rl.prompts_per_step"))

  @property
  def group_size(self) -> int:
    return int(self.get("rl.group_size"))

  @property
  def batch_size(self) -> int:
    return self.prompts_per_step * self.group_size

  @property
  def update_batch(self) -> int:
    """Responses per optimizer update (the batch the LR rule scales with)."""
    return self.batch_size // int(self.get("rl.minibatches", 1) or 1)

  @property
  def seed(self) -> int:
    return int(self.get("seed", 0))

  @property
  def sft_seed(self) -> int:
    """The warm start's seed: sft.seed, or the run seed where it is unset (runs before the field)."""
    value = self.get("sft.seed")
    return int(value) if value is not None else self.seed

  @property
  def seed_key(self) -> tuple[int, int]:
    """(warm-start seed, RL seed): runs with equal keys share warm start and prompt stream."""
    return (self.sft_seed, self.seed)

  @property
  def eval_size(self) -> int | None:
    """Held-out prompts per evaluation: logged as eval/num_prompts, else task.eval_size."""
    for record in self.records:
      if record.get("eval/num_prompts"):
        return int(record["eval/num_prompts"])
    size = self.get("task.eval_size")
    return int(size) if size else None

  @property
  def effective_lr(self) -> float:
    return scaled_learning_rate(_optim(self.get("optim.learning_rate"), self.get("optim.lr_scaling"),
                                       self.get("optim.reference_batch")), self.update_batch)

  def curve(self, metric: str, x_key: str = "samples") -> tuple[np.ndarray, np.ndarray]:
    """(x [n], metric [n]) over the records that hold the metric (evaluations)."""
    points = [(r[x_key], r[metric]) for r in self.records
              if r.get(metric) is not None and r.get(x_key) is not None]
    xs = np.asarray([p[0] for p in points], np.float64)
    ys = np.asarray([p[1] for p in points], np.float64)
    keep = np.concatenate([[True], np.diff(xs) > 0]) if xs.size else xs.astype(bool)
    return xs[keep], ys[keep]

  def rl_seconds_curve(self) -> tuple[np.ndarray, np.ndarray]:
    """(samples [n], RL seconds so far [n]): generation + reward + training from the run's own
    clock (evaluation and compilation excluded), one point per record."""
    pts = [(r["samples"], sum(r.get(f"wall/{p}", 0.0) or 0.0 for p in PHASES))
           for r in self.records if "samples" in r]
    return np.asarray([p[0] for p in pts], np.float64), np.asarray([p[1] for p in pts], np.float64)

  def phase_seconds(self) -> dict[str, float]:
    """Cumulative seconds per phase at the last record."""
    last = self.records[-1] if self.records else {}
    return {p: float(last.get(f"wall/{p}", 0.0) or 0.0) for p in PHASES + ("evaluation",)}

  @property
  def samples_consumed(self) -> int:
    return int(self.records[-1].get("samples", 0)) if self.records else 0

  @property
  def budget(self) -> int:
    total = self.get("train.total_samples")
    if total:
      return int(total)
    steps = self.get("train.total_steps")
    return int(steps) * self.batch_size if steps else self.samples_consumed

  def mean_response_tokens(self) -> float | None:
    """Mean response length in tokens over the run's steps (response/length_mean)."""
    lengths = [r["response/length_mean"] for r in self.records if "response/length_mean" in r]
    return float(np.mean(lengths)) if lengths else None


def _optim(learning_rate, lr_scaling, reference_batch):
  return types.SimpleNamespace(learning_rate=learning_rate, lr_scaling=lr_scaling,
                               reference_batch=reference_batch)


def run_dirs(sweep_dir: str, *, required: bool = True) -> list[str]:
  """Run directories of a sweep: <sweep_dir>/runs/* (or <sweep_dir>/* without runs/) holding a
  config.json and a metrics.jsonl (or its gzipped archive, as committed results store it).
  Raises FileNotFoundError when there are none and `required`."""
  root = os.path.join(sweep_dir, "runs")
  if not os.path.isdir(root):
    root = sweep_dir
  found = sorted(d for d in glob.glob(os.path.join(root, "*"))
                 if os.path.isfile(os.path.join(d, "config.json"))
                 and metrics_path(d) is not None)
  if not found and required:
    raise FileNotFoundError(f"no run directories under {root!r} (a run directory holds "
                            "config.json and metrics.jsonl; run `python -m rlscale.sweep` first)")
  return found


def load_run(path: str) -> RunData:
  """The run directory at `path`, read: config.json, metrics.jsonl(.gz), summary.json if any."""
  config = inputs.read_json(os.path.join(path, "config.json"))["config"]
  summary = None
  if os.path.exists(os.path.join(path, "summary.json")):
    summary = inputs.read_json(os.path.join(path, "summary.json"))
  return RunData(os.path.basename(path), path, config,
                 read_metrics(metrics_path(path)), summary)


def load_sweep_meta(sweep_dir: str) -> dict:
  """The sweep's sweep.json (written by rlscale.scaling.sweep), or {} without one."""
  path = os.path.join(sweep_dir, "sweep.json")
  if not os.path.exists(path):
    return {}
  return inputs.read_json(path)
