"""The decision rule and its bootstrap confidence intervals.

A candidate batch reaches the target sooner than the base iff its time-to-target is smaller:
T = N* / q, so iff q_cand / q_base > N*_cand / N*_base (throughput ratio beats samples ratio).
Samples-to-target varies between seeds; intervals come from a bootstrap over seeds (each batch's
seeds resampled with replacement, independently), percentile method.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def predicted_faster(throughput_ratio: float, samples_ratio: float) -> bool:
  """The decision rule: q_cand / q_base > N*_cand / N*_base."""
  return bool(throughput_ratio > samples_ratio)


def bootstrap_ratio_ci(candidate: Sequence[float], base: Sequence[float], *, resamples: int = 2000,
                       level: float = 0.95, seed: int = 0) -> tuple[float, float]:
  """Percentile bootstrap interval of mean(candidate) / mean(base) over seeds.

  Args: per-seed values (e.g. samples-to-target) of the candidate and the base, >= 1 each.
  Returns: (low, high); with one value on each side the interval is that ratio twice.
  Raises ValueError for an empty side or a level outside (0, 1)."""
  c, b = np.asarray(candidate, np.float64), np.asarray(base, np.float64)
  if c.size == 0 or b.size == 0:
    raise ValueError("bootstrap needs at least one value for the candidate and the base")
  rng = np.random.default_rng(seed)
  return _interval(_resampled_means(c, rng, resamples) / _resampled_means(b, rng, resamples), level)


def bootstrap_mean_ci(values: Sequence[float], *, resamples: int = 2000, level: float = 0.95,
                      seed: int = 0) -> tuple[float, float]:
  """Percentile bootstrap interval of the mean over seeds; raises ValueError when empty."""
  v = np.asarray(values, np.float64)
  if v.size == 0:
    raise ValueError("bootstrap needs at least one value")
  return _interval(_resampled_means(v, np.random.default_rng(seed), resamples), level)


def _resampled_means(values: np.ndarray, rng, resamples: int) -> np.ndarray:
  """[resamples] means of `values` resampled with replacement."""
  return values[rng.integers(0, values.size, (resamples, values.size))].mean(axis=1)


def _interval(estimates: np.ndarray, level: float) -> tuple[float, float]:
  if not 0 < level < 1:
    raise ValueError(f"confidence level must be in (0, 1), got {level}")
  tail = (1 - level) / 2 * 100
  return float(np.percentile(estimates, tail)), float(np.percentile(estimates, 100 - tail))
