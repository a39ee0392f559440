"""Applying a packing plan on the device: padded arrays -> packed microbatches, and packed
per-token outputs -> padded [B, Tr] arrays (`rlscale.packing.plan` has the layout).

Pure `jnp` gathers and scatters in the global view (run under `jit`): the padded batch stays the
canonical input, and only the small int32 plan travels from the host.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# Per-token response arrays [B, Tr] of an update batch that packing moves with the tokens.
TOKEN_KEYS = ("response_mask", "old_logp", "ref_logp", "old_values", "returns", "behaviour_logp")


def take(x: jax.Array, src: jax.Array) -> jax.Array:
  """x [B, N] (any dtype) at flat indices src [...] int32 (b * N + n) -> [...], 0 where src < 0."""
  flat = x.reshape(-1)
  return jnp.where(src >= 0, flat[jnp.maximum(src, 0)], jnp.zeros((), x.dtype))


def per_token(advantages: jax.Array, response_len: int) -> jax.Array:
  """Advantages [B] (one per response) or [B, Tr] -> [B, Tr] float32."""
  if advantages.ndim == 1:
    return jnp.broadcast_to(advantages[:, None], (advantages.shape[0], response_len))
  return advantages


def pack_batch(batch: dict, plan: dict) -> dict:
  """Packed microbatches of a padded batch.

  Args:
    batch: the update step's padded batch (tokens [B, T] int32, input_mask, response_mask [B, Tr],
      advantages [B] or [B, Tr], and the other `TOKEN_KEYS` it has); extra [B, Tr] arrays such as
      "loss_weights" are packed too.
    plan: token_src, segment_ids [..., width] and target_src [..., width - 1] int32
      (`plan.PackingPlan.arrays`).
  Returns: dict with tokens [..., width] int32, input_mask = segment_ids, and every per-token
    array [..., width - 1] at the output positions that predict it (0 elsewhere; advantages per
    token, float32). Keys the packed update cannot use (routing, sampler_experts) are left out.
  """
  response_len = batch["response_mask"].shape[1]
  src = plan["target_src"]
  packed = {"tokens": take(batch["tokens"], plan["token_src"]),
            "input_mask": plan["segment_ids"],
            "advantages": take(per_token(batch["advantages"], response_len), src)}
  for key in TOKEN_KEYS + ("loss_weights",):
    if key in batch:
      packed[key] = take(batch[key], src)
  return packed


def unpack_targets(values: jax.Array, target_src: jax.Array, rows: int,
                   response_len: int) -> jax.Array:
  """Packed per-token outputs back to the padded layout.

  Args: values [..., width - 1] float32 (at the positions predicting each token, as
    `pack_batch`'s arrays); target_src of the same shape (-1: no response token); rows B and
    response_len Tr of the padded batch.
  Returns: [B, Tr] float32, 0 at response tokens no packed position predicts (e.g. padding)."""
  size = rows * response_len
  index = jnp.where(target_src >= 0, target_src, size).reshape(-1)
  out = jnp.zeros((size + 1,), values.dtype).at[index].set(values.reshape(-1), mode="drop")
  return out[:size].reshape(rows, response_len)


def sequences_in(target_src: jax.Array, response_mask: jax.Array, rows: int,
                 response_len: int) -> jax.Array:
  """Sequences with at least one loss token in a packed microbatch: float32 scalar.

  Args: target_src [..., width - 1] int32 and the packed response_mask of the same shape; B and Tr
    of the padded batch."""
  row = jnp.where(target_src >= 0, target_src // response_len, rows).reshape(-1)
  seen = jnp.zeros((rows + 1,), jnp.float32).at[row].max(
      (response_mask > 0).astype(jnp.float32).reshape(-1), mode="drop")
  return jnp.sum(seen[:rows])
