"""How a step's sequences are packed: rows per microbatch from the token budget, the minibatches
of each optimizer update, and the plans of the update step and of the forward passes (host side).

Microbatch size (r packed rows of W = train.max_tokens_per_row tokens each), in this order:
- train.max_tokens_per_microbatch = budget: r = budget // W, K = as many as the rows need;
- rl.microbatches = K: r = the rows of the fullest minibatch / K, rounded up;
- neither: on CPU r = ceil(update.CPU_MICROBATCH_TOKENS / W) (the padded step's rule: slices of
  at least that many tokens), elsewhere one microbatch of every row; with
  train.measure_noise_scale at least two microbatches when the rows allow it.
r is rounded up to a multiple of the mesh's batch parallelism (every microbatch splits over it).
K and r are exact, not bucketed: a step compiles once per distinct (K, r, W, B, T).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import numpy as np

from rlscale.packing.plan import PackingPlan, pack_rows, packed_row_count, stack_plans
from rlscale.train.update import CPU_MICROBATCH_TOKENS


class Packing(NamedTuple):
  """A run's packing settings: width = train.max_tokens_per_row (tokens per packed row),
  max_tokens_per_microbatch = train.max_tokens_per_microbatch (None: the rules above)."""
  width: int
  max_tokens_per_microbatch: Optional[int] = None


def _ceil_div(a: int, b: int) -> int:
  return -(-a // b)


def minibatch_rows(rng: Optional[jax.Array], rows: int, epochs: int,
                   minibatches: int) -> np.ndarray:
  """The padded rows of each optimizer update, [epochs x minibatches, rows / minibatches] int32,
  epoch-major: `update.update_step`'s minibatches (epoch e permutes the rows by
  `jax.random.permutation(fold_in(rng, e), rows)` when minibatches > 1, and minibatch m holds the
  permuted rows m, m + M, ...)."""
  updates = []
  for epoch in range(epochs):
    order = np.arange(rows)
    if minibatches > 1:
      order = np.asarray(jax.random.permutation(jax.random.fold_in(rng, epoch), rows))
    updates.extend(order[m::minibatches] for m in range(minibatches))
  return np.stack(updates).astype(np.int32)


def microbatch_shape(packed_rows: int, width: int, *, max_tokens_per_microbatch: Optional[int],
                     microbatches: Optional[int], platform: str, measure_noise_scale: bool = False,
                     parts: int = 1) -> tuple[int, int]:
  """(K microbatches, r rows each) for minibatches of at most `packed_rows` packed rows of `width`
  tokens, by the rules of the module docstring. Raises: ValueError for a budget below one row."""
  if max_tokens_per_microbatch is not None:
    if max_tokens_per_microbatch < width:
      raise ValueError(f"train.max_tokens_per_microbatch={max_tokens_per_microbatch} must be >= "
                       f"train.max_tokens_per_row={width} (one packed row)")
    rows = max_tokens_per_microbatch // width
  elif microbatches is not None:
    rows = _ceil_div(packed_rows, microbatches)
  elif platform == "cpu":  # the padded step's rule (`update.microbatch_count`)
    rows = _ceil_div(CPU_MICROBATCH_TOKENS, width)
  else:
    rows = packed_rows
  rows = max(1, min(rows, packed_rows))  # no microbatch larger than the rows need
  if (measure_noise_scale and microbatches is None and max_tokens_per_microbatch is None
      and packed_rows >= 2 and _ceil_div(packed_rows, rows) < 2):
    rows = _ceil_div(packed_rows, 2)
  rows = _ceil_div(rows, parts) * parts
  fixed = microbatches is not None and max_tokens_per_microbatch is None
  count = microbatches if fixed else max(1, _ceil_div(packed_rows, rows))
  return count, rows


def update_plan(input_mask: np.ndarray, response_len: int, rng: Optional[jax.Array], rl, *,
                width: int, max_tokens_per_microbatch: Optional[int] = None,
                platform: Optional[str] = None, measure_noise_scale: bool = False,
                parts: int = 1) -> PackingPlan:
  """The update step's packing plan (`train.packed_update.packed_update_step`).

  Args:
    input_mask: [B, T] {0,1} of the padded batch (host). response_len: Tr.
    rng: the update step's PRNG key (its minibatch permutations; unused with one minibatch).
    rl: a resolved rl section (epochs, minibatches, microbatches).
    width: train.max_tokens_per_row. max_tokens_per_microbatch: the token budget or None.
    platform: "cpu", "gpu", "tpu" (default jax.default_backend()).
    measure_noise_scale: train.measure_noise_scale. parts: the mesh's batch parallelism.
  Returns: PackingPlan with rows [U, B / M] and arrays [U, K, r, W] / [U, K, r, W - 1].
  Raises: ValueError for a sequence longer than width or a budget below one row."""
  input_mask = np.asarray(input_mask)
  rows = minibatch_rows(rng, input_mask.shape[0], rl.epochs, rl.minibatches)
  packed = max(packed_row_count(input_mask, update_rows, width) for update_rows in rows)
  count, per_micro = microbatch_shape(
      packed, width, max_tokens_per_microbatch=max_tokens_per_microbatch,
      microbatches=rl.microbatches, platform=platform or jax.default_backend(),
      measure_noise_scale=measure_noise_scale, parts=parts)
  return stack_plans([pack_rows(input_mask, response_len, update_rows, width=width,
                                rows_per_microbatch=per_micro, microbatches=count)
                      for update_rows in rows], rows)


def pass_plan(input_mask: np.ndarray, response_len: int, *, width: int,
              max_tokens_per_microbatch: Optional[int] = None, platform: Optional[str] = None,
              parts: int = 1) -> PackingPlan:
  """The plan of a forward pass over the whole batch (reference, behaviour or value pass:
  `train.passes`): every row packed, microbatches sized as the update's (no rl.microbatches:
  a pass has no minibatches). Arrays [K, r, W] / [K, r, W - 1]. Raises as `update_plan`."""
  input_mask = np.asarray(input_mask)
  sequences = range(input_mask.shape[0])
  packed = packed_row_count(input_mask, sequences, width)
  count, per_micro = microbatch_shape(
      packed, width, max_tokens_per_microbatch=max_tokens_per_microbatch, microbatches=None,
      platform=platform or jax.default_backend(), parts=parts)
  return pack_rows(input_mask, response_len, sequences, width=width,
                   rows_per_microbatch=per_micro, microbatches=count)


def packed_update_fn(update: Callable, packing: Packing, rl, *, parts: int,
                     measure_noise_scale: bool = False) -> Callable:
  """`update` (`update_fn.make_update_fn`'s fn) with each batch packed: fn(state, batch, rng)
  makes the step's plan on the host from the batch's input_mask and rng
  (`packing.layout.update_plan`) and runs the packed step; `jitted` and `state_shardings` as
  `update`'s."""

  def fn(state, batch, rng):
    plan = update_plan(jax.device_get(batch["input_mask"]), batch["response_mask"].shape[1], rng,
                       rl, width=packing.width,
                       max_tokens_per_microbatch=packing.max_tokens_per_microbatch,
                       measure_noise_scale=measure_noise_scale, parts=parts)
    return update(state, batch, rng, plan.arrays())

  fn.jitted, fn.state_shardings = update.jitted, update.state_shardings
  fn.compiler_options = update.compiler_options
  return fn
