"""Held-out learning curves on the sample axis: smoothing, samples-to-target, invariance scores.

A curve is (samples [n] responses consumed, values [n] held-out metric), one point per evaluation,
the warm start at samples = 0 included. Conventions (docs/design.md, "The study"):
- smoothing: a centred running mean over `window` evaluations (`centred_mean`: the evaluation and
  (window - 1) / 2 on each side, fewer at the ends). It looks ahead, which is sound because the
  report runs on complete curves; a trailing mean would move every crossing later by
  (window - 1) / 2 evaluation intervals, so N* would carry a bias of that many responses;
- samples-to-target N* is the *sustained* crossing: the smoothed curve crosses the target for the
  last time from below and stays at or above it to the end of the run, interpolated linearly
  between the two evaluations around that crossing. A held-out metric inside its evaluation noise
  crosses and falls back; the first crossing (`Crossing.first`, reported beside it) counts such a
  lucky evaluation as reaching the target. A curve that ends below the target is censored (its
  budget is a lower bound), never dropped;
- invariance score: mean absolute gap between a curve and the reference batch's curve on a common
  grid of sample counts, the 0-sample point left out (runs on one warm start share it exactly,
  a structural zero that would dilute every score).

`invariance` scores a sweep's LR-rule groups (the report's rows, `rlscale.scaling.rows`) against
the reference batch, with the noise floor and the paired differences between rules.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

import numpy as np

from rlscale.scaling import decision as decision_lib
from rlscale.scaling.decision import finite_or_none
from rlscale.scaling.groups import LR_RULES, seed_key


class Crossing(NamedTuple):
  """Samples-to-target of one curve.

  Attributes:
    samples: responses consumed at the sustained crossing (float), or None when censored.
    censored: True when the smoothed curve ends below the target (no sustained crossing).
    bound: `samples` when reached, else the budget (last sample count): a lower bound on N*.
    first: responses consumed at the first crossing (float), or None when the curve never
      reaches the target.
  """
  samples: float | None
  censored: bool
  bound: float
  first: float | None = None


def _check_curve(samples, values) -> tuple[np.ndarray, np.ndarray]:
  s = np.asarray(samples, np.float64)
  v = np.asarray(values, np.float64)
  if s.ndim != 1 or s.shape != v.shape or s.size == 0:
    raise ValueError(f"a curve needs samples and values of equal non-zero length [n], got shapes "
                     f"{s.shape} and {v.shape}")
  if np.any(np.diff(s) <= 0):
    raise ValueError("curve samples must be strictly increasing")
  return s, v


def centred_mean(values: Sequence[float], window: int) -> np.ndarray:
  """Centred mean: out[i] = mean(values[i - h : i + h + 1]) clipped to the curve, h = window // 2
  (an even window is widened by one); [n] float64. Raises ValueError for window < 1."""
  if window < 1:
    raise ValueError(f"smoothing window must be >= 1 evaluation, got {window}")
  v = np.asarray(values, np.float64)
  h = window // 2
  cumsum = np.concatenate([[0.0], np.cumsum(v)])
  idx = np.arange(v.size)
  start, stop = np.maximum(idx - h, 0), np.minimum(idx + h + 1, v.size)
  return (cumsum[stop] - cumsum[start]) / (stop - start)


def _interpolated(s: np.ndarray, m: np.ndarray, target: float, i: int) -> float:
  """Samples where the segment (i - 1, i) meets the target, m[i-1] < target <= m[i]."""
  frac = (target - m[i - 1]) / (m[i] - m[i - 1])
  return float(s[i - 1] + frac * (s[i] - s[i - 1]))


def samples_to_target(samples: Sequence[float], values: Sequence[float], target: float, *,
                      window: int = 1, higher_is_better: bool = True) -> Crossing:
  """Responses consumed until the smoothed curve reaches `target` to stay (module docstring).

  Args:
    samples: [n] strictly increasing responses consumed at each evaluation.
    values: [n] held-out metric at those evaluations.
    target: the level to reach (>= when higher_is_better, else <=).
    window: centred running-mean window in evaluations (1 = no smoothing).
  Returns: a Crossing: `samples` at the sustained crossing, `first` at the first one; when the
  whole smoothed curve meets the target, both are the first sample count.
  Raises ValueError for curves of unequal or zero length or samples not increasing.
  """
  s, v = _check_curve(samples, values)
  m = centred_mean(v, window)
  if not higher_is_better:
    m, target = -m, -target
  met = m >= target
  if not met.any():
    return Crossing(None, True, float(s[-1]), None)
  i_first = int(np.flatnonzero(met)[0])
  first = float(s[0]) if i_first == 0 else _interpolated(s, m, target, i_first)
  if not met[-1]:
    return Crossing(None, True, float(s[-1]), first)
  below = np.flatnonzero(~met)
  if below.size == 0:
    return Crossing(float(s[0]), False, float(s[0]), first)
  sustained = _interpolated(s, m, target, int(below[-1]) + 1)
  return Crossing(sustained, False, sustained, first)


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


def curve_gap(curve, reference, *, skip_start: bool = True) -> float:
  """Mean absolute gap |curve - reference| over their common grid (both (samples, values)),
  without the 0-sample point when skip_start (module docstring).

  Raises ValueError when the curves share no sample range."""
  grid = common_grid([curve, reference])
  if skip_start:
    grid = grid[grid > 0]
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


def _smoothed_curves(rows, per_run, metric, window) -> dict:
  """{seed key: (samples, centred running mean)} of the rows' runs."""
  out = {}
  for row in rows:
    s, v = per_run[row["name"]].curve(metric)
    out.setdefault(seed_key(row), (s, centred_mean(v, window)))
  return out


def invariance(groups, per_run, metric, window, reference_batch) -> dict:
  """Per rule: the invariance score of each batch against the reference batch's curve (paired by
  seed key, 0-sample point left out, `curve_gap`), per seed and averaged; the noise
  floor (the gap between runs at the reference batch on the *same* warm start and different RL
  seeds: what identical settings differ by); and, between rules, the paired difference of the
  per-seed mean scores with its t interval (`comparisons`)."""
  out: dict[str, Any] = {}
  per_seed_means = {}
  for rule in LR_RULES:
    batches = sorted(b for (r, b) in groups if r == rule)
    if len(batches) < 2:
      continue
    ref = min(batches, key=lambda b: (abs(math.log(b / reference_batch)), b))
    ref_curves = _smoothed_curves(groups[(rule, ref)], per_run, metric, window)
    per_seed = {}
    for b in batches:
      if b == ref:
        continue
      cand = _smoothed_curves(groups[(rule, b)], per_run, metric, window)
      per_seed[str(b)] = {k: curve_gap(cand[k], ref_curves[k])
                          for k in sorted(set(cand) & set(ref_curves))}
    scores = {b: (float(np.mean(list(v.values()))) if v else None) for b, v in per_seed.items()}
    keys = sorted({k for v in per_seed.values() for k in v})
    per_seed_means[rule] = {k: float(np.mean([v[k] for v in per_seed.values() if k in v]))
                            for k in keys}
    pairs = [curve_gap(ref_curves[a], ref_curves[b])
             for i, a in enumerate(sorted(ref_curves)) for b in sorted(ref_curves)[i + 1:]
             if a[0] == b[0]]  # same warm start, different RL seed
    out[rule] = {"reference_batch": ref, "scores": scores,
                 "per_seed": {b: {repr(k): g for k, g in v.items()} for b, v in per_seed.items()},
                 "mean_score": finite_or_none(float(np.mean(
                     [v for v in scores.values() if v is not None] or [np.nan]))),
                 "noise_floor": float(np.mean(pairs)) if pairs else None,
                 "noise_floor_pairs": len(pairs)}
  comparisons = {}
  for a, b in (("sqrt", "none"), ("sqrt_adam", "none"), ("sqrt_adam", "sqrt")):
    if a in per_seed_means and b in per_seed_means:
      keys = sorted(set(per_seed_means[a]) & set(per_seed_means[b]))
      diffs = [per_seed_means[a][k] - per_seed_means[b][k] for k in keys]
      if diffs:
        ci = decision_lib.t_interval(diffs)
        comparisons[f"{a}_minus_{b}"] = {
            "difference": float(np.mean(diffs)), "ci": list(ci) if ci else None, "n": len(diffs),
            "resolved": bool(ci and (ci[1] < 0 or ci[0] > 0))}
  if out:
    out["comparisons"] = comparisons
  return out
