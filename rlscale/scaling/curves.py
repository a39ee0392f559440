"""Held-out learning curves on the sample axis: smoothing, samples-to-target, invariance scores.

A curve is (samples [n] responses consumed, values [n] held-out metric), one point per evaluation,
the warm start at samples = 0 included. Conventions (docs/design.md, "The study"):
- smoothing: trailing running mean over the last `window` evaluations (fewer at the start), so a
  smoothed value only uses evaluations already made;
- samples-to-target N*: linear interpolation of the smoothed curve between the two evaluations
  around its first crossing of the target; a curve that never reaches it is censored (its budget is
  a lower bound), never dropped;
- invariance score: mean absolute gap between a curve and the reference batch's curve on a common
  grid of sample counts.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np


class Crossing(NamedTuple):
  """Samples-to-target of one curve.

  Attributes:
    samples: responses consumed when the smoothed curve first reaches the target (float), or None
      when censored.
    censored: True when the curve never reaches the target within its budget.
    bound: `samples` when reached, else the budget (last sample count): a lower bound on N*.
  """
  samples: float | None
  censored: bool
  bound: float


def _check_curve(samples, values) -> tuple[np.ndarray, np.ndarray]:
  s = np.asarray(samples, np.float64)
  v = np.asarray(values, np.float64)
  if s.ndim != 1 or s.shape != v.shape or s.size == 0:
    raise ValueError(f"a curve needs samples and values of equal non-zero length [n], got shapes "
                     f"{s.shape} and {v.shape}")
  if np.any(np.diff(s) <= 0):
    raise ValueError("curve samples must be strictly increasing")
  return s, v


def running_mean(values: Sequence[float], window: int) -> np.ndarray:
  """Trailing mean: out[i] = mean(values[max(0, i - window + 1) : i + 1]); [n] float64.

  Raises ValueError for window < 1."""
  if window < 1:
    raise ValueError(f"smoothing window must be >= 1 evaluation, got {window}")
  v = np.asarray(values, np.float64)
  cumsum = np.concatenate([[0.0], np.cumsum(v)])
  idx = np.arange(v.size)
  start = np.maximum(idx - window + 1, 0)
  return (cumsum[idx + 1] - cumsum[start]) / (idx + 1 - start)


def samples_to_target(samples: Sequence[float], values: Sequence[float], target: float, *,
                      window: int = 1, higher_is_better: bool = True) -> Crossing:
  """Responses consumed until the smoothed curve first reaches `target`.

  Args:
    samples: [n] strictly increasing responses consumed at each evaluation.
    values: [n] held-out metric at those evaluations.
    target: the level to reach (>= when higher_is_better, else <=).
    window: running-mean window in evaluations (1 = no smoothing).
  Returns: a Crossing; when the first point already meets the target, samples = its sample count.
  """
  s, v = _check_curve(samples, values)
  m = running_mean(v, window)
  if not higher_is_better:
    m, target = -m, -target
  hit = np.flatnonzero(m >= target)
  if hit.size == 0:
    return Crossing(None, True, float(s[-1]))
  i = int(hit[0])
  if i == 0:
    return Crossing(float(s[0]), False, float(s[0]))
  frac = (target - m[i - 1]) / (m[i] - m[i - 1])  # m[i-1] < target <= m[i]
  crossed = float(s[i - 1] + frac * (s[i] - s[i - 1]))
  return Crossing(crossed, False, crossed)


def interpolate(samples: Sequence[float], values: Sequence[float], grid: Sequence[float]) -> np.ndarray:
  """Linear interpolation of a curve at `grid` (inside its sample range); [len(grid)] float64."""
  s, v = _check_curve(samples, values)
  return np.interp(np.asarray(grid, np.float64), s, v)


def common_grid(curves: Sequence[tuple[Sequence[float], Sequence[float]]]) -> np.ndarray:
  """Sample counts where every curve is defined: the union of their evaluation points inside the
  intersection of their ranges (the runs of a sweep evaluate at the same counts, so this is
  usually exactly those counts)."""
  lo = max(float(np.min(s)) for s, _ in curves)
  hi = min(float(np.max(s)) for s, _ in curves)
  points = np.unique(np.concatenate([np.asarray(s, np.float64) for s, _ in curves]))
  return points[(points >= lo) & (points <= hi)]


def curve_gap(curve, reference) -> float:
  """Mean absolute gap |curve - reference| over their common grid (both (samples, values)).

  Raises ValueError when the curves share no sample range."""
  grid = common_grid([curve, reference])
  if grid.size == 0:
    raise ValueError("curves share no range of sample counts")
  return float(np.mean(np.abs(interpolate(*curve, grid) - interpolate(*reference, grid))))


def invariance_score(curves_by_seed: dict, reference_by_seed: dict) -> float | None:
  """Mean over the seeds both have of `curve_gap(curve[seed], reference[seed])`.

  Args: {seed: (samples, values)} for the batch under test and for the reference batch (same LR
    rule). Pairing by seed compares runs that share a warm start and a task stream.
  Returns: the score (0 for identical curves), or None when no seed is common to both.
  """
  seeds = sorted(set(curves_by_seed) & set(reference_by_seed))
  if not seeds:
    return None
  return float(np.mean([curve_gap(curves_by_seed[s], reference_by_seed[s]) for s in seeds]))
