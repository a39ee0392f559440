"""Loss aggregation: how per-token losses [B, Tr] become one scalar (`rl.loss_agg_mode`).

With per-token losses l_it, response mask m_it, sequence lengths n_i = sum_t m_it, N = sum_i n_i
real tokens and S the number of sequences with n_i > 0:

- "token-mean"              sum_it m l / N            (DAPO, Yu et al. 2025: long responses count
                                                        per token, no length bias per sequence)
- "seq-mean-token-mean"     (1/S) sum_i (sum_t m l / n_i)   (the original GRPO)
- "seq-mean-token-sum"      (1/S) sum_i sum_t m l
- "seq-mean-token-sum-norm" (1/S) sum_i sum_t m l / C      (Dr. GRPO, Liu et al. 2025: a constant
                                                        C, e.g. the response length limit)

E.g. sequences A = [1, 1] and B = [2, 2, 2, 2]: 10/6, 1.5, 5.0 and (C = 4) 1.25.

Every mode is linear in the losses: aggregate = sum_it w_it l_it with weights from
`aggregation_weights`. The weights use the batch totals N and S, which may be passed in, so a batch
split over devices and microbatches (each shard summing w * l with the global N and S, and the
shards' sums added by psum) gives exactly the full-batch value.
"""

from __future__ import annotations

from typing import Optional

import chex
import jax.numpy as jnp

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                  "seq-mean-token-sum-norm")


def check_mode(mode: str, norm_constant: Optional[float] = None) -> None:
  """Raises ValueError for an unknown mode, or seq-mean-token-sum-norm without a constant > 0."""
  if mode not in LOSS_AGG_MODES:
    raise ValueError(f"rl.loss_agg_mode={mode!r} is not one of {list(LOSS_AGG_MODES)}")
  if mode == "seq-mean-token-sum-norm" and not (norm_constant and norm_constant > 0):
    raise ValueError("rl.loss_agg_mode='seq-mean-token-sum-norm' needs rl.loss_agg_norm > 0 "
                     f"(Dr. GRPO's constant, e.g. the response length limit), got {norm_constant!r}")


def aggregation_counts(response_mask: chex.Array) -> dict[str, chex.Array]:
  """The totals the modes divide by: {"tokens": N, "sequences": S}, float32 scalars, for
  response_mask [B, Tr] {0,1}. psum them over devices to aggregate a sharded batch."""
  chex.assert_rank(response_mask, 2)
  lengths = jnp.sum(response_mask.astype(jnp.float32), axis=1)
  return {"tokens": jnp.sum(lengths), "sequences": jnp.sum((lengths > 0).astype(jnp.float32))}


def denominator(mode: str, counts: dict[str, chex.Array]) -> chex.Array:
  """The batch-level divisor of `mode`: N for token-mean, S for the seq-mean modes (never < 1)."""
  return jnp.maximum(counts["tokens"] if mode == "token-mean" else counts["sequences"], 1.0)


def aggregation_weights(response_mask: chex.Array, mode: str, *,
                        norm_constant: Optional[float] = None,
                        counts: Optional[dict[str, chex.Array]] = None) -> chex.Array:
  """Per-token weights w [B, Tr] float32 with aggregate = sum(w * loss).

  Args:
    response_mask: [B, Tr] {0,1}.
    mode: one of LOSS_AGG_MODES.
    norm_constant: C for seq-mean-token-sum-norm.
    counts: batch totals {"tokens", "sequences"} (see `aggregation_counts`); default those of
      response_mask itself. Pass the totals of the whole (global) batch when response_mask is a
      shard of it.

  Raises:
    ValueError: for an unknown mode or a missing/invalid constant.
  """
  check_mode(mode, norm_constant)
  chex.assert_rank(response_mask, 2)
  mask = response_mask.astype(jnp.float32)
  counts = aggregation_counts(response_mask) if counts is None else counts
  weights = mask / denominator(mode, counts)
  if mode == "seq-mean-token-mean":
    weights = weights / jnp.maximum(jnp.sum(mask, axis=1, keepdims=True), 1.0)
  elif mode == "seq-mean-token-sum-norm":
    weights = weights / norm_constant
  return weights


def aggregate_loss(token_loss: chex.Array, response_mask: chex.Array, mode: str, *,
                   norm_constant: Optional[float] = None,
                   counts: Optional[dict[str, chex.Array]] = None) -> chex.Array:
  """Aggregates per-token losses [B, Tr] float32 into a float32 scalar by `mode`.

  Masked-out tokens never contribute (even NaN/Inf there). Args as `aggregation_weights`.
  Raises: ValueError for an unknown mode, a missing constant, or token_loss and response_mask of
  different shapes.
  """
  if token_loss.shape != response_mask.shape:
    raise ValueError(f"token_loss shape {token_loss.shape} must equal response_mask shape "
                     f"{response_mask.shape}")
  weights = aggregation_weights(response_mask, mode, norm_constant=norm_constant, counts=counts)
  return jnp.sum(jnp.where(weights > 0, token_loss * weights, 0.0))
