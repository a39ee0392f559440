"""The tuned learning rate against batch size: where the optimum lies between grid points, and
how it grows with the batch (the exponent alpha in lr*(B) ~ B^alpha: 0 = none, 0.5 = sqrt,
1 = linear).

Why interpolate. On a factor-2 grid the best grid point moves in steps of log 2, so the slope of
the best grid LRs over three batches is one of a few values and, when the three lie on a line, has
zero residual: a least-squares interval around it is [alpha, alpha], however noisy the N* behind
it. Here each batch's optimum is the vertex of the parabola through the best grid point and its
two neighbours, in log LR against log mean N* (the mean over seed keys of the samples to target,
censored runs at their budget, a lower bound): log N* is near quadratic around its minimum (the usual
reading of an LR sweep in log LR). A flat or concave triple keeps the grid point; the vertex is kept inside
the triple.

The interval is a jackknife over seed keys (Efron and Stein 1981): the exponent is refitted with
each seed key left out of every batch's mean, se^2 = (n - 1)/n sum_i (alpha_(i) - mean)^2, and the
95% interval is alpha +- t_{n-1} se. It carries the seed-to-seed noise of N* into the exponent,
which a residual-based interval over three batches cannot.

Rows are the report's run rows of the tuned grid (`groups.grid_rows`): dicts with batch_size,
learning_rate, seed_key and samples_lower_bound.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from rlscale.scaling import decision as decision_lib
from rlscale.scaling import groups as groups_lib

MIN_BATCHES = 3  # a slope over two batches has no residual and no check


def parabola_vertex(log_lrs: Sequence[float], log_costs: Sequence[float]) -> float | None:
  """The log LR minimising the parabola through the best point and its two neighbours.

  Args:
    log_lrs: [L] float, log learning rates in increasing order (any spacing).
    log_costs: [L] float, log mean N* (responses) at each LR.
  Returns the vertex's log LR, clipped to the triple's range; the best grid point itself when the
  triple is flat or concave; None when the best point is the first or last (not bracketed).
  Raises ValueError when the lengths differ or fewer than 3 LRs are given.
  """
  x, y = np.asarray(log_lrs, float), np.asarray(log_costs, float)
  if x.shape != y.shape or x.size < groups_lib.MIN_GRID:
    raise ValueError(f"need {groups_lib.MIN_GRID}+ LRs with one cost each, got {x.size} LRs and "
                     f"{y.size} costs")
  i = int(np.argmin(y))
  if i in (0, x.size - 1):
    return None
  xs, ys = x[i - 1:i + 2], y[i - 1:i + 2]
  curvature, slope, _ = np.polyfit(xs, ys, 2)
  if curvature <= 0:
    return float(xs[1])
  return float(np.clip(-slope / (2 * curvature), xs[0], xs[2]))


def _mean_costs(rows: Sequence[dict], exclude=None) -> tuple[list[float], list[float]]:
  """(sorted LRs, log mean N* at each) over the rows' seed keys other than `exclude`."""
  by_lr = groups_lib.by_learning_rate(rows)
  lrs, costs = [], []
  for lr in sorted(by_lr):
    bounds = [r["samples_lower_bound"] for k, r in by_lr[lr].items() if k != exclude]
    if bounds:
      lrs.append(lr)
      costs.append(math.log(max(float(np.mean(bounds)), 1.0)))
  return lrs, costs


def interpolated_optimum(rows: Sequence[dict], exclude=None, *, edge: bool = False
                         ) -> float | None:
  """The tuned LR at one batch, between grid points (module docstring), or None when fewer than
  3 LRs were tried or the best is at the grid's edge (then the edge LR itself when `edge`).
  `exclude`: a seed key (tuple) left out."""
  lrs, costs = _mean_costs(rows, exclude)
  if len(lrs) < groups_lib.MIN_GRID:
    return None
  vertex = parabola_vertex(np.log(lrs), costs)
  if vertex is None:
    return float(lrs[int(np.argmin(costs))]) if edge else None
  return float(math.exp(vertex))


def _slope(batches: Sequence[int], optima: Sequence[float], reference_batch: int) -> float:
  x = np.log(np.asarray(batches, float) / reference_batch)
  return float(np.polyfit(x, np.log(optima), 1)[0])


def lr_exponent(rows: Sequence[dict], reference_batch: int) -> dict:
  """The exponent of the tuned LR against batch (module docstring).

  Args:
    rows: run rows of the tuned grid at every batch.
    reference_batch: B0 in responses per step (only the intercept depends on it).
  Returns {"method", "batches", "n", "unbracketed_batches", "optima" {batch: lr*}, "exponent",
  "ci" (None with fewer than 3 seed keys), "n_seed_keys", "replicates_at_grid_edge", "note" (why
  there is no exponent or interval, or what weakens it)}; exponent None below 3 bracketed batches.
  """
  by_batch = {b: [r for r in rows if r["batch_size"] == b]
              for b in sorted({r["batch_size"] for r in rows})}
  optima = {b: interpolated_optimum(rs) for b, rs in by_batch.items()}
  batches = [b for b, lr in optima.items() if lr is not None]
  keys = sorted({tuple(r["seed_key"]) for r in rows})
  entry = {"method": "parabola through the best grid LR and its neighbours (log LR vs log mean "
                     "N*), slope of log lr* on log B; jackknife over seed keys",
           "batches": batches, "n": len(batches),
           "unbracketed_batches": [b for b, lr in optima.items() if lr is None],
           "optima": {str(b): optima[b] for b in batches}, "n_seed_keys": len(keys),
           "exponent": None, "ci": None}
  if len(batches) < MIN_BATCHES:
    entry["note"] = (f"{len(batches)} batch(es) with a bracketed best LR: {MIN_BATCHES} needed "
                     "for a slope")
    return entry
  entry["exponent"] = _slope(batches, [optima[b] for b in batches], reference_batch)
  if len(keys) < decision_lib.MIN_SEEDS:
    entry["note"] = f"{len(keys)} seed key(s): no interval below {decision_lib.MIN_SEEDS}"
    return entry
  replicates, at_edge = [], 0
  for key in keys:
    left_out = [interpolated_optimum(by_batch[b], exclude=key) for b in batches]
    if any(lr is None for lr in left_out):
      # Without this seed key some batch's best LR sits at the grid's edge: the replicate takes
      # the edge LR, a bound on the optimum, so the interval is if anything too narrow (said).
      at_edge += 1
      left_out = [interpolated_optimum(by_batch[b], exclude=key, edge=True) for b in batches]
    replicates.append(_slope(batches, left_out, reference_batch))
  entry["replicates_at_grid_edge"] = at_edge
  if at_edge:
    entry["note"] = (f"{at_edge} of {len(keys)} jackknife replicates had a batch's best LR at the "
                     "grid's edge and used that edge LR: the interval may be too narrow")
  n = len(replicates)
  se = math.sqrt((n - 1) / n * float(np.sum((np.asarray(replicates) - np.mean(replicates)) ** 2)))
  half = decision_lib.t_quantile(n - 1) * se
  entry["ci"] = [entry["exponent"] - half, entry["exponent"] + half]
  return entry
