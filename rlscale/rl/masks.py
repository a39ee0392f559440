"""Response masks and masked reductions.

A response mask is 1 for real response tokens: every generated token up to and including the first
EOS, and 0 for everything after it (padding, or tokens produced after the row finished). It is found
from the position of the first EOS rather than from the pad id, so it stays right when the pad id
equals the EOS id.
"""

from __future__ import annotations

from typing import Sequence, Union

import chex
import jax.numpy as jnp


def response_mask_from_tokens(response_tokens: chex.Array,
                              eos_ids: Union[int, Sequence[int]]) -> chex.Array:
  """Mask of real response tokens: up to and including the first EOS of each row.

  Args:
    response_tokens: [B, Tr] int32, the response part of each sequence (labels).
    eos_ids: one EOS id or several (any of them ends a response).

  Returns:
    [B, Tr] int32: 1 where no EOS occurs strictly before the position. A row without EOS
    (truncated at the length limit) is all ones. E.g. [5, 7, EOS, EOS(pad), EOS(pad)] ->
    [1, 1, 1, 0, 0].

  Raises:
    ValueError: when response_tokens is not rank 2 or eos_ids is empty.
  """
  chex.assert_rank(response_tokens, 2)
  eos = jnp.atleast_1d(jnp.asarray(eos_ids, jnp.int32))
  if eos.size == 0:
    raise ValueError("eos_ids must name at least one token id")
  is_eos = jnp.isin(response_tokens, eos).astype(jnp.int32)
  # EOS tokens seen strictly before each position: an exclusive cumulative sum.
  eos_before = jnp.cumsum(is_eos, axis=-1) - is_eos
  return (eos_before == 0).astype(jnp.int32)


def truncated_rows(response_tokens: chex.Array, response_mask: chex.Array,
                   eos_ids: Union[int, Sequence[int]]) -> chex.Array:
  """Responses that hit the length limit without an EOS (DAPO's "truncated samples").

  Args:
    response_tokens: [B, Tr] int32. response_mask: [B, Tr] {0,1}, 1 for generated tokens up to
      and including the first EOS. eos_ids: one EOS id or several; () means EOS is disabled, so
      every response is truncated.

  Returns: [B] bool, True where no real token of the row is an EOS.
  Raises: ValueError when the arrays are not rank 2 or their shapes differ.
  """
  if response_tokens.ndim != 2 or response_tokens.shape != response_mask.shape:
    raise ValueError(f"response_tokens {response_tokens.shape} and response_mask "
                     f"{response_mask.shape} must both be [B, Tr]")
  eos = jnp.atleast_1d(jnp.asarray(eos_ids, jnp.int32))
  ended = jnp.isin(response_tokens, eos) & response_mask.astype(bool)
  return ~jnp.any(ended, axis=-1)


def mask_rows(response_mask: chex.Array, keep_rows: chex.Array) -> chex.Array:
  """The loss mask: response_mask with every token of the rows where keep_rows is False set to 0.

  The one mechanism that takes whole responses out of the loss (overlong filtering,
  `rl.mask_truncated`; DAPO filler groups): the update step's aggregation counts only real tokens
  and sequences with a real token, so a masked row changes neither the numerator nor the
  denominator, and the loss and gradient equal those of the batch without the row. The row still
  counts as a sample consumed, and in the advantages' statistics.

  Args: response_mask [B, Tr] {0,1}; keep_rows [B] bool (or {0,1}).
  Returns: [B, Tr] of response_mask's dtype.
  Raises: ValueError when response_mask is not rank 2 or keep_rows is not [B].
  """
  if response_mask.ndim != 2 or jnp.shape(keep_rows) != response_mask.shape[:1]:
    raise ValueError(f"keep_rows {jnp.shape(keep_rows)} must be [B] for response_mask "
                     f"{response_mask.shape} [B, Tr]")
  return jnp.where(jnp.asarray(keep_rows, bool)[:, None], response_mask, 0).astype(response_mask.dtype)


def masked_sum(x: chex.Array, mask: chex.Array, axis=None) -> chex.Array:
  """sum(x * mask) over `axis` (all axes by default); x and mask have equal shapes.

  Uses `where` rather than a product so NaN/Inf in masked-out slots never leak into the sum."""
  chex.assert_equal_shape([x, mask])
  return jnp.sum(jnp.where(mask.astype(bool), x, 0.0), axis=axis)


def masked_mean(x: chex.Array, mask: chex.Array, axis=None) -> chex.Array:
  """sum(x * mask) / max(sum(mask), 1) over `axis`: the mean over real entries, 0 when none."""
  count = jnp.sum(mask.astype(jnp.float32), axis=axis)
  return masked_sum(x, mask, axis) / jnp.maximum(count, 1.0)
