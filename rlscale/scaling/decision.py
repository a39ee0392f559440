"""The decision rule, paired intervals over seeds, and three-valued verdicts.

A candidate batch reaches the target sooner than the base iff its time-to-target is smaller:
T = N* / q, so iff q_cand / q_base > N*_cand / N*_base (throughput ratio beats samples ratio), i.e.
iff the predicted time ratio T_cand / T_base = (N*_cand / N*_base) / (q_cand / q_base) is below 1.

Seeds. Runs that share a seed key (the warm start's seed and the RL seed) share the warm start and
the prompt stream (common random numbers), so a candidate and its base are compared seed by seed:
the interval is on the mean of the paired log ratios d_i = log(c_i / b_i),

  exp(mean(d) +- t_{n-1, (1+level)/2} * sd(d) / sqrt(n)),

a t interval. With the 3-10 seeds a study affords, a bootstrap would be the wrong tool: n seeds
give at most n^n resamples and the percentile bootstrap's coverage falls well below its level
(2 seeds: the two-value range, ~50%); the t interval is exact when the log ratios are normal and
close to it for the near-symmetric log ratios of samples-to-target. Below MIN_SEEDS paired seeds
no interval is given (None), and every verdict built on it is "unresolved".

Over a sweep's groups (the report's rows, `rlscale.scaling.rows`): `decisions` compares every
larger batch with the smallest per LR rule (and per warm start, `decisions_by_warm_start`);
`power` gives the seeds each decision needs for a +-15% interval, from the runs' own spread.
"""

from __future__ import annotations

import math
from typing import Hashable, Mapping, NamedTuple, Sequence

import numpy as np
from scipy import stats

from rlscale.scaling.groups import LR_RULES, TUNED, seed_key

MIN_SEEDS = 3  # below this, no interval is printed
LEVEL = 0.95
VERDICTS = ("faster", "slower", "unresolved")


def predicted_faster(throughput_ratio: float, samples_ratio: float) -> bool:
  """The decision rule: q_cand / q_base > N*_cand / N*_base."""
  return bool(throughput_ratio > samples_ratio)


def _check_level(level: float) -> None:
  if not 0 < level < 1:
    raise ValueError(f"confidence level must be in (0, 1), got {level}")


def t_quantile(dof: int, level: float = LEVEL) -> float:
  """The two-sided t quantile t_{dof, (1+level)/2} of a `level` interval."""
  return float(stats.t.ppf((1 + level) / 2, dof))


def t_interval(values: Sequence[float], *, level: float = LEVEL) -> tuple[float, float] | None:
  """t interval of the mean of `values` (mean +- t_{n-1} sd / sqrt(n)), or None for n < MIN_SEEDS.

  Raises ValueError for a level outside (0, 1) or a non-finite value."""
  _check_level(level)
  v = np.asarray(values, np.float64)
  if not np.all(np.isfinite(v)):
    raise ValueError(f"t interval needs finite values, got {v}")
  if v.size < MIN_SEEDS:
    return None
  half = t_quantile(v.size - 1, level) * v.std(ddof=1) / math.sqrt(v.size)
  return float(v.mean() - half), float(v.mean() + half)


class PairedRatio(NamedTuple):
  """Candidate over base, paired by seed key.

  Attributes:
    ratio: exp(mean of the paired log ratios): the geometric mean of c_i / b_i (float).
    ci: (low, high) t interval of that ratio at `level`, or None below MIN_SEEDS pairs.
    n: number of paired seed keys.
    seeds: the paired keys, sorted.
  """
  ratio: float
  ci: tuple[float, float] | None
  n: int
  seeds: list


def paired_log_ratio(candidate: Mapping[Hashable, float], base: Mapping[Hashable, float], *,
                     level: float = LEVEL) -> PairedRatio:
  """Paired ratio candidate / base over the seed keys both have (module docstring).

  Args:
    candidate, base: {seed key: positive value}, e.g. samples-to-target in responses or
      time-to-target in seconds per seed.
    level: confidence level of the interval.
  Returns: a PairedRatio. Raises ValueError when no key is common to both, for a value <= 0 or
  non-finite (a ratio of it is undefined), or a level outside (0, 1)."""
  seeds = sorted(set(candidate) & set(base), key=repr)
  if not seeds:
    raise ValueError(f"no seed in common between candidate {sorted(candidate, key=repr)} and base "
                     f"{sorted(base, key=repr)}: a paired ratio needs runs that share a seed")
  c = np.asarray([candidate[s] for s in seeds], np.float64)
  b = np.asarray([base[s] for s in seeds], np.float64)
  if np.any(~np.isfinite(c) | ~np.isfinite(b) | (c <= 0) | (b <= 0)):
    raise ValueError(f"paired ratio needs positive finite values, got candidate {c}, base {b}")
  d = np.log(c) - np.log(b)
  ci = t_interval(d, level=level)
  return PairedRatio(float(math.exp(d.mean())), None if ci is None else
                     (float(math.exp(ci[0])), float(math.exp(ci[1]))), len(seeds), seeds)


def verdict(time_ratio_ci: Sequence[float] | None, *, censored: bool = False) -> str:
  """"faster" when the whole interval of T_cand / T_base lies below 1, "slower" when above 1,
  else "unresolved": also without an interval (fewer than MIN_SEEDS seeds) and whenever a side
  is censored (a lower bound on N* gives no ratio)."""
  if censored or time_ratio_ci is None:
    return "unresolved"
  low, high = time_ratio_ci
  if high < 1.0:
    return "faster"
  if low > 1.0:
    return "slower"
  return "unresolved"


def time_ratio_interval(samples_ci: Sequence[float] | None, throughput_ratio: float,
                        throughput_ci: Sequence[float] | None = None) -> tuple[float, float] | None:
  """Interval of the predicted time ratio (N*_c / N*_b) / (q_c / q_b) from the samples ratio's
  interval and the throughput ratio (with its interval, the conservative combination: the low end
  over the highest q ratio, the high end over the lowest). None when samples_ci is None."""
  if samples_ci is None:
    return None
  q_low, q_high = throughput_ci if throughput_ci else (throughput_ratio, throughput_ratio)
  return float(samples_ci[0] / q_high), float(samples_ci[1] / q_low)


def seeds_needed(sd: float, half_width: float, *, level: float = LEVEL, max_seeds: int = 1000) -> int:
  """Smallest n >= MIN_SEEDS with t_{n-1, (1+level)/2} sd / sqrt(n) <= half_width: the seeds a
  paired t interval needs for that half width, given the per-seed spread `sd` (e.g. of paired log
  ratios measured in a pilot; half_width log(1.15) gives a ratio interval of about +-15%).

  Returns max_seeds when even that many do not reach it. Raises ValueError for sd < 0 or
  half_width <= 0."""
  if sd < 0 or half_width <= 0:
    raise ValueError(f"seeds_needed needs sd >= 0 and half_width > 0, got {sd}, {half_width}")
  _check_level(level)
  for n in range(MIN_SEEDS, max_seeds + 1):
    if t_quantile(n - 1, level) * sd / math.sqrt(n) <= half_width:
      return n
  return max_seeds


def finite_or_none(x):
  """x as the report holds it: a float, or None for None and a non-finite x (JSON has no inf)."""
  return None if x is None or not math.isfinite(x) else float(x)


def decisions(groups, throughput) -> list[dict]:
  """Every larger batch vs the smallest, per rule: the samples ratio paired over seed keys, the
  throughput ratio, the predicted time ratio with its interval and a three-valued verdict."""
  out = []
  for rule in LR_RULES + (TUNED,):
    batches = sorted(b for (r, b) in groups if r == rule)
    if len(batches) < 2:
      continue
    base = batches[0]
    for cand in batches[1:]:
      base_rows, cand_rows = groups[(rule, base)], groups[(rule, cand)]
      paired, dropped = paired_positive({seed_key(r): r["samples_lower_bound"] for r in cand_rows},
                                        {seed_key(r): r["samples_lower_bound"] for r in base_rows})
      if paired is None:
        continue
      censored = any(r["censored"] for r in base_rows + cand_rows if seed_key(r) in paired.seeds)
      q_b, q_c = throughput.q(base), throughput.q(cand)
      q_ratio = q_c / q_b if q_b and q_c else None
      q_ci = throughput.ratio_ci(base, cand)
      time_ci = (time_ratio_interval(paired.ci, q_ratio, q_ci) if q_ratio else None)
      out.append({
          "base": base, "candidate": cand, "lr_rule": rule, "n_seeds": paired.n,
          "seeds_at_target_at_warm_start": dropped,
          "throughput_ratio": q_ratio, "throughput_ratio_ci": q_ci,
          "samples_ratio": paired.ratio, "samples_ratio_ci": list(paired.ci) if paired.ci else None,
          "censored": bool(censored),
          "predicted_time_ratio": paired.ratio / q_ratio if q_ratio else None,
          "time_ratio_ci": list(time_ci) if time_ci else None,
          "verdict": verdict(time_ci, censored=censored),
          "why": _why_unresolved(paired.n, censored, time_ci),
      })
  return out


def decisions_by_warm_start(groups, throughput) -> dict[str, list[dict]]:
  """{warm start's seed: the decisions on its seed keys alone} when the runs come from more than
  one warm start, else {}. A robustness warm start run under fewer rules or seeds than the first
  would otherwise set the pooled decision (e.g. censor it) by itself; split, each warm start says
  whether the answer holds from another starting point."""
  warm_starts = sorted({seed_key(r)[0] for rows in groups.values() for r in rows})
  if len(warm_starts) < 2:
    return {}
  out = {}
  for w in warm_starts:
    mine = {k: [r for r in rows if seed_key(r)[0] == w] for k, rows in groups.items()}
    out[str(w)] = decisions({k: rows for k, rows in mine.items() if rows}, throughput)
  return out


def paired_positive(candidate: dict, base: dict):
  """(`paired_log_ratio` over the common seed keys where both values are > 0, or None when
  there is none; how many common keys were left out). A run that met the target at its warm start
  (N* = 0) has no ratio: it is left out and counted, not divided by."""
  common = set(candidate) & set(base)
  usable = {k for k in common if candidate[k] > 0 and base[k] > 0}
  if not usable:
    return None, len(common)
  return (paired_log_ratio({k: candidate[k] for k in usable}, {k: base[k] for k in usable}),
          len(common - usable))


def _why_unresolved(n: int, censored: bool, ci) -> str | None:
  if censored:
    return "a side is censored (some seed never reached the target): N* is a lower bound"
  if n < MIN_SEEDS:
    return f"{n} paired seed(s): no interval below {MIN_SEEDS}"
  if ci is None:
    return "no throughput ratio"
  if ci[0] <= 1.0 <= ci[1]:
    return "the 95% interval of the time ratio contains 1"
  return None


POWER_HALF_WIDTH = math.log(1.15)  # a paired N* ratio known to about +-15%


def power(groups, decisions) -> list[dict]:
  """Per decision with >= 2 paired, uncensored seeds: the spread (sd) of the paired log N* ratios
  and the seeds a 95% t interval needs for a half width of log(1.15), about +-15% on the ratio
  (`seeds_needed`): the study's power calculation, repeated from its own runs."""
  out = []
  for d in decisions:
    base = {seed_key(r): r for r in groups[(d["lr_rule"], d["base"])]}
    cand = {seed_key(r): r for r in groups[(d["lr_rule"], d["candidate"])]}
    logs = [math.log(cand[k]["samples_lower_bound"] / base[k]["samples_lower_bound"])
            for k in sorted(set(base) & set(cand))
            if not cand[k]["censored"] and not base[k]["censored"]
            and cand[k]["samples_lower_bound"] > 0 and base[k]["samples_lower_bound"] > 0]
    if len(logs) < 2:
      continue
    sd = float(np.std(logs, ddof=1))
    out.append({"lr_rule": d["lr_rule"], "base": d["base"], "candidate": d["candidate"],
                "n": len(logs), "sd_log_ratio": sd,
                "seeds_for_15_percent": seeds_needed(sd, POWER_HALF_WIDTH)})
  return out
