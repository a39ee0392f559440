"""DAPO's reward-side pieces (Yu et al. 2025): overlong reward shaping and the dynamic-sampling
filter that keeps only groups whose rewards vary.

The update-side pieces of DAPO (clip-higher, token-mean aggregation) are `losses.ppo_clip` with
clip_eps_high > clip_eps_low and `aggregation` "token-mean"; the preset sets all of them.
"""

from __future__ import annotations

import chex
import jax.numpy as jnp


def overlong_buffer_tokens(buffer_frac: float, max_new_tokens: int) -> int:
  """L_cache in tokens: round(buffer_frac * L_max). DAPO used L_cache = 4096 of L_max = 20480 (0.2).

  Raises ValueError unless 0 <= buffer_frac < 1."""
  if not 0.0 <= buffer_frac < 1.0:
    raise ValueError(f"rl.overlong_buffer_frac must be in [0, 1), got {buffer_frac}")
  return int(round(buffer_frac * max_new_tokens))


def overlong_penalty(lengths: chex.Array, *, max_len: int, buffer_len: int,
                     penalty_factor: float = 1.0) -> chex.Array:
  """DAPO soft overlong punishment, added to the outcome reward.

    0                                     if L <= L_max - L_cache
    ((L_max - L_cache) - L) / L_cache     if L_max - L_cache < L <= L_max   (falls linearly to -1)
    -1                                    if L > L_max
  all times `penalty_factor`.

  Args:
    lengths: [B] int response lengths L in tokens. max_len: L_max (the response length limit).
    buffer_len: L_cache in tokens; 0 turns shaping off (all zeros).
    penalty_factor: scale of the penalty (1.0 in DAPO).

  Returns: [B] float32, in [-penalty_factor, 0].
  Raises: ValueError unless 0 <= buffer_len <= max_len.
  """
  if not 0 <= buffer_len <= max_len:
    raise ValueError(f"overlong buffer length {buffer_len} must be in [0, max_len={max_len}]")
  lengths = jnp.asarray(lengths, jnp.float32)
  if buffer_len == 0:
    return jnp.zeros_like(lengths)
  penalty = jnp.clip(((max_len - buffer_len) - lengths) / buffer_len, -1.0, 0.0)
  return penalty_factor * penalty


def groups_with_signal(rewards: chex.Array, group_size: int) -> chex.Array:
  """DAPO dynamic sampling filter: which groups have rewards that are not all equal.

  A group whose G responses all scored the same has zero group-relative advantage and contributes
  no gradient; DAPO drops such groups and samples more prompts until the batch is full.

  Args: rewards [P * G] float, groups adjacent. group_size: G >= 1.
  Returns: [P] bool, True where max != min within the group.
  Raises: ValueError when rewards is not 1-D or P * G does not divide by G.
  """
  rewards = jnp.asarray(rewards)
  if rewards.ndim != 1 or rewards.shape[0] % group_size:
    raise ValueError(f"rewards of shape {rewards.shape} do not split into groups of "
                     f"rl.group_size={group_size}")
  groups = rewards.reshape(-1, group_size)
  return jnp.max(groups, axis=1) != jnp.min(groups, axis=1)
