"""Gradient noise scale B_simple (McCandlish et al. 2018, "An Empirical Model of Large-Batch
Training", appendix A.1) from squared gradient norms measured at two batch sizes.

With E|g_B|^2 = |G|^2 + tr(Sigma) / B for the mean gradient g_B of B examples, two batch sizes
B_small < B_big give unbiased estimates
  |G|^2    ~ (B_big |g_big|^2 - B_small |g_small|^2) / (B_big - B_small)
  tr(Sigma) ~ (|g_small|^2 - |g_big|^2) / (1 / B_small - 1 / B_big)
each noisy, so both are smoothed by an exponential moving average before dividing:
B_simple = EMA[tr(Sigma)] / EMA[|G|^2]. Batch sizes are in responses (rows of the update).
On one device the small batch is a microbatch (rl.microbatches >= 2), on several devices one
device's share; the update step logs both norms (rlscale/train/update.py).

`gns_report` reads those norms from a sweep's runs (`rlscale.scaling.run_data`) and pools
B_simple per training phase over them, in tokens or responses as the loss aggregation says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Sequence

import numpy as np

from rlscale.scaling.decision import finite_or_none

if TYPE_CHECKING:
  from rlscale.scaling.run_data import RunData

# (|g_small|^2, |g_big|^2, B_small, B_big) metric keys logged by the update step, newest first:
# small = a microbatch on one device, a device's part on several (rlscale/train/update.py); the
# older per-device names carry no information on one device (B_small = B_big).
GNS_KEYS = (
    ("train/gns_grad_sq_small", "train/gns_grad_sq_big", "train/gns_batch_small",
     "train/gns_batch_big"),
    ("train/grad_sq_norm_local", "train/grad_sq_norm_global", "train/gns_batch_local",
     "train/gns_batch_global"),
)
# Loss aggregations whose gradient is a mean over tokens: the noise scale's examples are tokens.
TOKEN_MEAN_AGGREGATIONS = ("token-mean",)


def unbiased_estimates(g_small_sq, g_big_sq, b_small, b_big) -> tuple[np.ndarray, np.ndarray]:
  """Per-step (|G|^2, tr(Sigma)) estimates; arrays [n] float64 (or scalars).

  Raises ValueError unless 0 < b_small < b_big everywhere (equal sizes carry no information)."""
  gs, gb = np.asarray(g_small_sq, np.float64), np.asarray(g_big_sq, np.float64)
  bs, bb = np.asarray(b_small, np.float64), np.asarray(b_big, np.float64)
  if np.any(bs <= 0) or np.any(bb <= bs):
    raise ValueError(f"noise scale needs 0 < B_small < B_big, got B_small={bs}, B_big={bb} "
                     "(with one device set rl.microbatches >= 2)")
  grad_sq = (bb * gb - bs * gs) / (bb - bs)
  trace = (gs - gb) / (1.0 / bs - 1.0 / bb)
  return grad_sq, trace


def ema(values: Sequence[float], decay: float) -> np.ndarray:
  """Bias-corrected exponential moving average (Adam style): [n] float64.

  out[t] = m_t / (1 - decay^(t+1)), m_t = decay m_{t-1} + (1 - decay) x_t, m_{-1} = 0; so a
  constant series gives itself from the first step. Raises ValueError unless 0 <= decay < 1."""
  if not 0.0 <= decay < 1.0:
    raise ValueError(f"EMA decay must be in [0, 1), got {decay}")
  out, m = [], 0.0
  for t, x in enumerate(np.asarray(values, np.float64)):
    m = decay * m + (1.0 - decay) * x
    out.append(m / (1.0 - decay ** (t + 1)))
  return np.asarray(out)


def b_simple(g_small_sq, g_big_sq, b_small, b_big, *, decay: float = 0.9) -> np.ndarray:
  """Smoothed B_simple per step: EMA[tr(Sigma)] / EMA[|G|^2]; [n] float64 (responses).

  A non-positive smoothed |G|^2 (noise dominates the estimate) gives inf."""
  grad_sq, trace = unbiased_estimates(g_small_sq, g_big_sq, b_small, b_big)
  g = ema(np.atleast_1d(grad_sq), decay)
  s = ema(np.atleast_1d(trace), decay)
  with np.errstate(divide="ignore", invalid="ignore"):
    return np.where(g > 0, s / np.where(g > 0, g, 1.0), np.inf)


class Pooled(NamedTuple):
  """A pooled B_simple over a window of steps.

  Attributes:
    b_simple: sum(tr(Sigma)) / sum(|G|^2) over the steps (responses, or the unit the caller
      converts to); inf when the summed |G|^2 is not positive (noise dominates the window).
    ci: (low, high) percentile interval over steps resampled with replacement (inf where a
      resample's |G|^2 sum is not positive), or None for fewer than 2 steps.
    steps: steps pooled.
  """
  b_simple: float
  ci: tuple[float, float] | None
  steps: int


def _ratio(trace_sum, grad_sq_sum):
  with np.errstate(divide="ignore", invalid="ignore"):
    return np.where(grad_sq_sum > 0, trace_sum / np.where(grad_sq_sum > 0, grad_sq_sum, 1.0), np.inf)


def pooled_b_simple(g_small_sq, g_big_sq, b_small, b_big, *, level: float = 0.95,
                    resamples: int = 2000, seed: int = 0) -> Pooled:
  """B_simple pooled over steps: sum of the unbiased tr(Sigma) estimates over the sum of the
  unbiased |G|^2 estimates (a ratio of means, McCandlish et al. 2018 A.1), nothing dropped: a
  window where noise dominates gives inf instead of vanishing from a median. The interval
  resamples steps independently (successive steps are correlated, so it is somewhat narrow).

  Args: [n] per-step squared norms and batch sizes (as `unbiased_estimates`).
  Raises ValueError as `unbiased_estimates`, for n = 0, or a level outside (0, 1)."""
  if not 0 < level < 1:
    raise ValueError(f"confidence level must be in (0, 1), got {level}")
  grad_sq, trace = unbiased_estimates(g_small_sq, g_big_sq, b_small, b_big)
  grad_sq, trace = np.atleast_1d(grad_sq), np.atleast_1d(trace)
  if grad_sq.size == 0:
    raise ValueError("pooled noise scale needs at least one step")
  estimate = float(_ratio(trace.sum(), grad_sq.sum()))
  if grad_sq.size < 2:
    return Pooled(estimate, None, 1)
  idx = np.random.default_rng(seed).integers(0, grad_sq.size, (resamples, grad_sq.size))
  draws = _ratio(trace[idx].sum(axis=1), grad_sq[idx].sum(axis=1))
  tail = (1 - level) / 2 * 100
  low, high = (float(np.percentile(draws, q, method="nearest")) for q in (tail, 100 - tail))
  return Pooled(estimate, (low, high), int(grad_sq.size))


def gns_report(runs: Sequence[RunData]) -> dict:
  """B_simple pooled per training phase (first and second half of each run's steps) over every
  run that logged the noise-scale norms at two batch sizes, with an interval over steps; per run
  the pooled value per phase too. Nothing is dropped: a noise-dominated phase gives inf (null in
  JSON) with its interval. The unit follows the loss aggregation: with token-mean the gradient is a
  mean over tokens and B_simple is converted to tokens (responses x mean response tokens)."""
  per_run, parts_by_phase, used = {}, {"first_half": [], "second_half": []}, None
  aggregations = set()
  for run in runs:
    records = [r for r in run.records if r.get("step", 0) > 0]
    for keys in GNS_KEYS:
      if not records or not all(k in records[0] for k in keys):
        continue
      parts = np.asarray([[r.get(k, np.nan) for k in keys] for r in records], np.float64)
      parts = parts[np.all(np.isfinite(parts), axis=1)]
      if parts.size == 0 or np.any(parts[:, 3] <= parts[:, 2]):
        continue  # equal batch sizes (one device, one microbatch): no information
      used = keys
      aggregations.add(run.get("rl.loss_agg_mode"))
      half = len(parts) // 2
      phases = {"first_half": parts[:half], "second_half": parts[half:]}
      entry = {"batch_size": run.batch_size, "b_small": float(parts[0, 2]),
               "b_big": float(parts[0, 3]), "tokens_per_response": run.mean_response_tokens()}
      for phase, rows in phases.items():
        if len(rows):
          pooled = pooled_b_simple(*rows.T)
          entry[phase] = _pooled_dict(pooled)
          parts_by_phase[phase].append(rows)
      series = b_simple(*parts.T)
      entry["intervals"] = [{"samples": r["samples"], "b_simple": finite_or_none(float(b))}
                            for r, b in zip(records, series) if any(k.startswith("eval/") for k in r)]
      per_run[run.name] = entry
      break
  if not per_run:
    return {"available": False, "per_run": {}, "pooled": None, "note": _gns_missing_note(runs)}
  token_mean = aggregations <= set(TOKEN_MEAN_AGGREGATIONS) and None not in aggregations
  tokens = [e["tokens_per_response"] for e in per_run.values() if e["tokens_per_response"]]
  scale = float(np.mean(tokens)) if token_mean and tokens else 1.0
  pooled = {}
  for phase, chunks in parts_by_phase.items():
    if chunks:
      p = pooled_b_simple(*np.concatenate(chunks).T)
      pooled[phase] = _pooled_dict(p, scale)
  return {"available": True, "keys": list(used), "per_run": per_run, "pooled": pooled,
          "unit": "tokens" if token_mean and tokens else "responses",
          "loss_agg_modes": sorted(a for a in aggregations if a),
          "note": ("pooled over every run's steps per phase: sum tr(Sigma) / sum |G|^2, "
                   "interval over steps resampled; inf = noise-dominated")}


def _pooled_dict(pooled, scale: float = 1.0) -> dict:
  return {"b_simple": finite_or_none(pooled.b_simple * scale),
          "ci": [finite_or_none(c * scale) for c in pooled.ci] if pooled.ci else None,
          "steps": pooled.steps}


def _gns_missing_note(runs: Sequence[RunData]) -> str:
  """Why no run gives B_simple, in words: no run logged the microbatch GNS metrics (runs that
  predate them log at most the per-device norms, one batch size on one device), or they were
  logged at one batch size (rl.microbatches = 1 on one device)."""
  first = [next((r for r in run.records if r.get("step", 0) > 0), {}) for run in runs]
  small, big = GNS_KEYS[0][2], GNS_KEYS[0][3]
  logged = [rec for rec in first if all(k in rec for k in GNS_KEYS[0])]
  if logged:
    sizes = sorted({int(rec[small]) for rec in logged if rec[small] >= rec[big]})
    return (f"the runs logged the GNS metrics at one batch size only (B_small = B_big = "
            f"{', '.join(map(str, sizes))} responses: rl.microbatches = 1 on one device); rerun "
            "with rl.microbatches >= 2 to estimate B_simple")
  older = any(all(k in rec for k in GNS_KEYS[1]) for rec in first)
  return ("no run logged GNS metrics (" + ", ".join(GNS_KEYS[0]) + "); "
          + ("the runs predate them: they log only the per-device norms (train/grad_sq_norm_local, "
             "train/grad_sq_norm_global), one batch size on one device; runs made since with "
             "rl.microbatches >= 2 log them" if older else "runs with rl.microbatches >= 2 log them"))
