"""q(B) as the analysis uses it: responses per second and per-phase seconds per step by batch,
from a throughput profile measured alone on the machine (`rlscale.scaling.throughput`) or, without
one, from the runs' own clocks; the step-cost line through them; generation's throughput ratio
and each phase's share of RL time.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rlscale.runner.timing import PHASES
from rlscale.scaling import fits
from rlscale.scaling.run_data import RunData


class Throughput:
  """q(B) responses/s end to end and per-phase seconds per step, from a throughput profile
  (measured alone on the machine) or, without one, from the runs' own clocks."""

  def __init__(self, profile: dict | None, runs: Sequence[RunData]):
    self.profile = profile
    self.source = "profile" if profile else "runs"
    self.device = (profile or {}).get("device")
    # A profile estimated from the TPU compiler's cost model (`rlscale.aot.profile`) carries its
    # label ("cost-model estimate ..., not a measurement"); a measured one has none.
    self.estimate = (profile or {}).get("label") if (profile or {}).get("estimate") else None
    self.by_batch: dict[int, dict] = {}
    if profile:
      for row in profile["batches"]:
        self.by_batch[int(row["batch_size"])] = {
            "responses_per_s": row["responses_per_s"],
            "seconds": {p: row["seconds"][p]["median"] for p in PHASES + ("step",)},
            "iqr": row["seconds"]["step"]["iqr"]}
    else:
      per_batch: dict[int, list] = {}
      for run in runs:
        secs = run.phase_seconds()
        steps = max(sum(1 for r in run.records if r.get("step", 0) > 0), 1)
        per_batch.setdefault(run.batch_size, []).append({p: secs[p] / steps for p in PHASES})
      for batch, rows in per_batch.items():
        seconds = {p: float(np.mean([r[p] for r in rows])) for p in PHASES}
        seconds["step"] = sum(seconds[p] for p in PHASES)
        self.by_batch[batch] = {"responses_per_s": batch / seconds["step"] if seconds["step"] else None,
                                "seconds": seconds, "iqr": None}
    batches = sorted(self.by_batch)
    self.step_line = None
    if len(batches) >= 2:
      self.step_line = fits.fit_line(batches, [self.by_batch[b]["seconds"]["step"] for b in batches])

  def q(self, batch: int) -> float | None:
    """Responses per second at `batch`: measured, else from the fitted step-cost line."""
    if batch in self.by_batch:
      return self.by_batch[batch]["responses_per_s"]
    if self.step_line is not None and self.step_line(batch) > 0:
      return float(batch / self.step_line(batch))
    return None

  def ratio_ci(self, base: int, cand: int) -> list[float] | None:
    """q(cand) / q(base) from the profile's step-time quartiles, slowest candidate over fastest
    base and the reverse; None without quartiles at both batches."""
    sb, sc = (self.by_batch.get(b, {}).get("iqr") for b in (base, cand))
    if not sb or not sc:
      return None
    return [(cand / sc[1]) / (base / sb[0]), (cand / sc[0]) / (base / sb[1])]

  def run_q(self, run: RunData) -> float | None:
    """A run's own responses per second (RL phases of its clock)."""
    rl = sum(run.phase_seconds()[p] for p in PHASES)
    return run.samples_consumed / rl if rl > 0 else None


def generation_ratio(throughput) -> float | None:
  """Generation responses/s at the largest batch over the smallest (measured ones)."""
  measured = sorted(throughput.by_batch)
  if len(measured) < 2:
    return None
  lo, hi = measured[0], measured[-1]
  rate = lambda b: b / throughput.by_batch[b]["seconds"]["generation"]  # noqa: E731
  return float(rate(hi) / rate(lo))


def phase_shares(throughput) -> dict:
  """{batch: {phase: its share of the RL seconds per step}} (None where a step took 0 s)."""
  out = {}
  for batch, row in sorted(throughput.by_batch.items()):
    total = sum(row["seconds"][p] for p in PHASES)
    out[str(batch)] = {p: row["seconds"][p] / total if total else None for p in PHASES}
  return out
