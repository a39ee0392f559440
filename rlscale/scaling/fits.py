"""Cost and sample-efficiency models of the batch-size study, fitted by least squares.

- Cost per RL step as a line in the batch: t(B) = a + b * B seconds. For generation, `a` is the
  batch-independent cost (every decode step reads all weights once: the bandwidth-bound regime)
  and `b` the cost per row; where b * B = a, i.e. B = a / b, half of the time is per-row work: the
  end of the bandwidth-bound regime. For training, t = c + d * tokens.
- Samples-to-target across batches (McCandlish et al. 2018): N*(B) = N_min (1 + B / B_noise),
  a line in B with intercept N_min and slope N_min / B_noise.
- Time-to-target T(B) = N*(B) / q(B) with q(B) = B / t(B) the end-to-end responses per second:
  T(B) = N_min (1 + B / B_noise)(a / B + b), minimised at B_opt = sqrt(a * B_noise / b).

`scaling_fit` fits N*(B) per LR rule over a sweep's groups (the report's rows,
`rlscale.scaling.rows`) and puts the predicted time-optimal batch beside the measured best.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

import numpy as np

from rlscale.scaling.decision import finite_or_none
from rlscale.scaling.groups import LR_RULES, TUNED


class Line(NamedTuple):
  """y = intercept + slope * x, with the coefficient of determination r2 of the fit and the number
  of distinct x values it was fitted to (None when not from a fit)."""
  intercept: float
  slope: float
  r2: float
  n_points: int | None = None

  def __call__(self, x):
    return self.intercept + self.slope * np.asarray(x, np.float64)


def fit_line(x: Sequence[float], y: Sequence[float]) -> Line:
  """Least-squares line through (x, y); raises ValueError for < 2 distinct x values."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.shape != y.shape or np.unique(x).size < 2:
    raise ValueError(f"a line fit needs >= 2 distinct x values and equal lengths, got x={x}, y={y}")
  slope, intercept = np.polyfit(x, y, 1)
  residual = np.sum((y - (intercept + slope * x)) ** 2)
  total = np.sum((y - y.mean()) ** 2)
  return Line(float(intercept), float(slope), float(1.0 - residual / total) if total > 0 else 1.0,
              int(np.unique(x).size))


MIN_FIT_POINTS = 3  # a line through 2 points always has R^2 = 1: no evidence of the model


def cost_line_text(fit, x: str = "B", slope_format: str = ".3g") -> str:
  """'3.13 s - 0.299 s x B' for a fitted cost line (a Line or its _asdict(); seconds), signs
  written as the algebra reads, or 'too few batch sizes to fit (n=2)' when the fit had fewer than
  MIN_FIT_POINTS distinct x values. A negative per-row cost (slope) or fixed cost (intercept) is
  flagged as not physical: step time cannot fall as work is added."""
  fit = fit._asdict() if isinstance(fit, Line) else fit
  n = fit.get("n_points")
  if n is not None and n < MIN_FIT_POINTS:
    return f"too few batch sizes to fit (n={n})"
  a, b = fit["intercept"], fit["slope"]
  text = f"{a:.3g} s {'-' if b < 0 else '+'} {abs(b):{slope_format}} s x {x}"
  if b < 0:
    text += " (negative per-row cost: not physical, noise dominates the measured times)"
  elif a < 0:
    text += " (negative fixed cost: not physical)"
  return text


def fit_is_usable(fit) -> bool:
  """True when the fit had at least MIN_FIT_POINTS distinct x values (see cost_line_text)."""
  fit = fit._asdict() if isinstance(fit, Line) else fit
  return bool(fit) and fit.get("n_points", MIN_FIT_POINTS) >= MIN_FIT_POINTS


def bandwidth_bound_until(line: Line) -> float | None:
  """The batch where the per-row cost equals the fixed cost (B = a / b), or None when the fit has
  no positive fixed cost and per-row cost."""
  if line.intercept <= 0 or line.slope <= 0:
    return None
  return line.intercept / line.slope


class NoiseFit(NamedTuple):
  """N*(B) = n_min (1 + B / b_noise); b_noise = inf when N* does not grow with B."""
  n_min: float
  b_noise: float
  r2: float

  def __call__(self, batch):
    return self.n_min * (1.0 + np.asarray(batch, np.float64) / self.b_noise)


def fit_samples_to_target(batches: Sequence[float], samples: Sequence[float]) -> NoiseFit:
  """Fits N*(B) = N_min (1 + B / B_noise) as the line N_min + (N_min / B_noise) B.

  A non-positive slope (no samples penalty across the batches tried) gives B_noise = inf; a
  non-positive intercept (N* grows faster than linearly) gives B_noise = 0 and N_min = 0.
  Raises ValueError for < 2 distinct batch sizes."""
  line = fit_line(batches, samples)
  if line.slope <= 0:
    return NoiseFit(float(np.mean(samples)), math.inf, line.r2)
  if line.intercept <= 0:
    return NoiseFit(0.0, 0.0, line.r2)
  return NoiseFit(line.intercept, line.intercept / line.slope, line.r2)


def time_optimal_batch(step_cost: Line, noise: NoiseFit) -> float | None:
  """argmin_B T(B) = N*(B) t(B) / B = sqrt(a B_noise / b) for t(B) = a + b B (see module doc).

  Returns inf when B_noise is inf (larger is always faster), None when the cost line has no
  positive a and b (no trade-off to optimise)."""
  a, b = step_cost.intercept, step_cost.slope
  if a <= 0 or b <= 0:
    return None
  if math.isinf(noise.b_noise):
    return math.inf
  return math.sqrt(a * noise.b_noise / b)


def scaling_fit(group_stats, throughput) -> dict:
  """Per rule: N*(B) = N_min (1 + B / B_noise) over the uncensored groups when there are at least
  MIN_FIT_POINTS batch sizes (a line through 2 points always has R^2 = 1), the censored ones
  counted out in words; with the step-cost line, the predicted time-optimal batch beside the
  measured best (lowest T = N*/q among uncensored groups)."""
  out = {}
  for rule in LR_RULES + (TUNED,):
    rows = [g for g in group_stats if g["rule"] == rule]
    if len(rows) < 2:
      continue
    usable = [g for g in rows if not g["censored"]]
    left_out = [g["batch_size"] for g in rows if g["censored"]]
    entry: dict[str, Any] = {"batches": [g["batch_size"] for g in usable], "n": len(usable),
                             "censored_left_out": left_out}
    timed = [g for g in usable if g["time_to_target_s"] is not None]
    entry["measured_best_batch"] = (min(timed, key=lambda g: g["time_to_target_s"])["batch_size"]
                                    if timed else None)
    if len({g["batch_size"] for g in usable}) >= MIN_FIT_POINTS:
      fit = fit_samples_to_target([g["batch_size"] for g in usable],
                                  [g["samples_to_target_mean"] for g in usable])
      entry.update(n_min=fit.n_min, b_noise=finite_or_none(fit.b_noise), r2=fit.r2)
      if throughput.step_line is not None:
        best = time_optimal_batch(throughput.step_line, fit)
        entry["predicted_time_optimal_batch"] = describe_optimal_batch(best)
    else:
      entry["note"] = (f"no fit: {len(usable)} uncensored batch size(s), {MIN_FIT_POINTS} "
                       "needed" + (f"; censored (lower bounds) left out: B = "
                                   f"{', '.join(map(str, left_out))}" if left_out else ""))
    out[rule] = entry
  return out


def describe_optimal_batch(best: float | None) -> float | str | None:
  """The fitted time-optimal batch, or words where the fit has no interior optimum: inf when N*
  does not grow with B, 0 when it grows faster than linearly (`fit_samples_to_target`)."""
  if best is None or (math.isfinite(best) and best > 0):
    return best
  if math.isinf(best):
    return "larger than any tried (no samples penalty)"
  return "smaller than any tried (N* grows faster than linearly in B)"
