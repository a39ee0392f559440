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
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


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
