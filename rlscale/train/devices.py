"""Moving host batches and train states onto the local devices for `jax.pmap`, and back."""

from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

# The pmap axis of every rlscale collective; it also names the mesh axis of pmapped outputs.
AXIS_NAME = "batch"


def shard_batch(batch: Mapping[str, Any], num_devices: int) -> dict[str, np.ndarray]:
  """Splits every array [B, ...] into [D, B / D, ...] (row i goes to device i // (B / D)).

  Raises: ValueError when the arrays disagree on B or B is not divisible by D (naming both).
  """
  arrays = {k: np.asarray(v) for k, v in batch.items()}
  sizes = {k: v.shape[0] if v.ndim else None for k, v in arrays.items()}
  if len(set(sizes.values())) != 1 or None in sizes.values():
    raise ValueError(f"every batch array needs the same leading batch size B, got {sizes}")
  b = next(iter(sizes.values()))
  if b % num_devices:
    raise ValueError(f"batch of {b} responses does not split evenly over {num_devices} devices "
                     "(rl.prompts_per_step * rl.group_size must be divisible by the device count)")
  return {k: v.reshape((num_devices, b // num_devices) + v.shape[1:]) for k, v in arrays.items()}


def replicate(tree, devices=None):
  """Copies every (numeric array) leaf of `tree` to each local device: [D, ...] with D = len(devices), or the local
  device count when devices is None (then the copies belong to a pmap over every process's
  devices, as the update step's default).

  The copies are made by a pmapped identity so they carry exactly the sharding that the pmapped
  update step returns: a state replicated here and a state returned by the step hit the same
  compiled executable (a different sharding would compile the step a second time)."""
  count = len(devices) if devices is not None else jax.local_device_count()
  stacked = jax.tree.map(lambda x: np.stack([np.asarray(x)] * count), tree)
  return jax.pmap(lambda x: x, axis_name=AXIS_NAME, devices=devices)(stacked)


def unreplicate(tree):
  """The copy on the first device of a replicated tree: [D, ...] -> [...]."""
  return jax.tree.map(lambda x: x[0], tree)


def replicate_key(rng: jax.Array, num_devices: int) -> jax.Array:
  """One PRNG key -> the same key stacked D times, [D] (the update step folds in the device index)."""
  return jnp.stack([rng] * num_devices)
