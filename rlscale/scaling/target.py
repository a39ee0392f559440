"""The study's target: stated before the runs, checked against the evaluation's noise.

A target is a held-out metric and a value. A sweep file states it up front (`get_target(arg)`
returning {"metric": ..., "value": ...}, recorded in sweep.json when the sweep runs); the report
uses that one, or one given on its command line. Without either it proposes one from the runs
(`propose_target`), labelled as chosen after the fact.

A target inside the evaluation noise of the warm start measures luck, not learning: the report
refuses one less than MIN_STANDARD_ERRORS binomial standard errors above the warm start,
SE = sqrt(p (1 - p) / n) at the warm start's level p for n evaluation prompts (for a metric in
[0, 1] that is not a proportion, e.g. a mean partial-credit reward, p (1 - p) bounds the variance,
so the SE is an upper bound). Where several warm starts exist, the highest counts (the target
must be that far above every one).

For a sweep's runs (`rlscale.scaling.run_data`): `resolve_target` picks the target (command line,
sweep file, else proposed) and `check_target_on_runs` checks it against their warm starts.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from rlscale.scaling import curves as curves_lib

if TYPE_CHECKING:
  from rlscale.scaling.run_data import RunData

MIN_STANDARD_ERRORS = 3.0


class WeakTargetError(ValueError):
  """The target sits fewer than MIN_STANDARD_ERRORS standard errors above the warm start."""


def binomial_standard_error(p: float, n: int) -> float:
  """sqrt(p (1 - p) / n) of a proportion p measured on n prompts; raises ValueError for n < 1 or
  p outside [0, 1]."""
  if n < 1:
    raise ValueError(f"evaluation size must be >= 1 prompt, got {n}")
  if not 0.0 <= p <= 1.0:
    raise ValueError(f"a binomial standard error needs p in [0, 1], got {p}")
  return math.sqrt(p * (1.0 - p) / n)


def standard_errors_above(target: float, warm_start: float, eval_size: int) -> float | None:
  """(target - warm_start) / SE(warm_start, eval_size); None when the SE is 0 (p = 0 or 1) or the
  warm start lies outside [0, 1] (the binomial model does not apply)."""
  if not 0.0 <= warm_start <= 1.0:
    return None
  se = binomial_standard_error(warm_start, eval_size)
  return (target - warm_start) / se if se > 0 else None


def check_target(value: float, warm_start: float, eval_size: int, *, metric: str,
                 allow_weak: bool = False) -> dict:
  """{"standard_errors_above_warm_start", "warm_start", "eval_size", "weak"} for a target.

  Raises WeakTargetError (one line: the numbers and how to proceed) when the target is fewer
  than MIN_STANDARD_ERRORS standard errors above the warm start, unless allow_weak."""
  z = standard_errors_above(value, warm_start, eval_size)
  weak = z is None or z < MIN_STANDARD_ERRORS
  if weak and not allow_weak:
    shown = "an undefined number of" if z is None else f"{z:.2f}"
    raise WeakTargetError(
        f"target {metric} >= {value:g} is {shown} standard errors above the warm start "
        f"({warm_start:.3f} on {eval_size} prompts, SE {binomial_standard_error(min(max(warm_start, 0), 1), eval_size):.3f});"
        f" at least {MIN_STANDARD_ERRORS:g} are needed to tell learning from evaluation noise: "
        f"state a higher target (the sweep file's get_target, or --target), or pass "
        f"--allow_weak_target to report anyway")
  return {"standard_errors_above_warm_start": z, "warm_start": warm_start,
          "eval_size": int(eval_size), "weak": bool(weak)}


def propose_target(warm_starts: Sequence[float], best_values: Sequence[float]) -> tuple[float, str]:
  """A target proposed after the runs: halfway from the highest warm start to the median best
  smoothed value; when the median run does not beat the highest warm start, the lowest best value
  that does; when none does, just above the highest warm start. Returns (target, how chosen)."""
  w, b = max(warm_starts), float(np.median(best_values))
  if b > w:
    return round(w + 0.5 * (b - w), 4), (
        f"proposed after the runs, not pre-registered: halfway from the highest warm start "
        f"({w:.3f}) to the median best smoothed value over runs ({b:.3f})")
  above = [x for x in best_values if x > w]
  if above:
    return min(above), (f"proposed after the runs, not pre-registered: the median run does not "
                        f"beat the highest warm start ({w:.3f}); the lowest best value above it")
  return w + 1e-6, (f"proposed after the runs: no run beats the highest warm start ({w:.3f}), "
                    "every run censored")


def best_smoothed(values: Sequence[float], window: int) -> float:
  """The highest value of the centred running mean of a curve (curves.centred_mean)."""
  return float(np.max(curves_lib.centred_mean(values, window)))


def resolve_target(runs: Sequence[RunData], meta: dict, *, metric: str, value: float | None,
                   window: int) -> dict:
  """The target on `metric`: `value` (--target) when given, else the one the sweep file states
  (sweep.json "target", when it names the same metric), else one proposed from the runs
  (labelled so). The runs must log the metric."""
  stated = meta.get("target") or {}
  if value is not None:
    how = "given on the command line (--target)"
  elif stated.get("value") is not None and stated.get("metric", metric) == metric:
    value, how = float(stated["value"]), "pre-registered in the sweep file (get_target)"
  else:
    value, how = propose_target(
        [float(r.curve(metric)[1][0]) for r in runs],
        [best_smoothed(r.curve(metric)[1], window) for r in runs])
  return {"metric": metric, "value": float(value), "chosen": how}


def check_target_on_runs(target: dict, runs: Sequence[RunData], allow_weak: bool) -> dict:
  """`check_target` of a resolved target against the runs: the highest warm start, the smallest
  evaluation size; weak with a note where no run knows its evaluation size."""
  warm = max(float(r.curve(target["metric"])[1][0]) for r in runs)
  sizes = [r.eval_size for r in runs if r.eval_size]
  if not sizes:
    return {"standard_errors_above_warm_start": None, "warm_start": warm, "eval_size": None,
            "weak": True, "note": "evaluation size unknown (no task.eval_size): not checked"}
  return check_target(target["value"], warm, min(sizes), metric=target["metric"],
                      allow_weak=allow_weak)
