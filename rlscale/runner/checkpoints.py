"""Atomic, topology-free checkpoints with orbax.

On a mesh (`layout.MeshLayout`) the state's global arrays are saved as they are, sharded: orbax
writes each shard (no gather to one host), and restoring into ShapeDtypeStructs that carry
another mesh's shardings reads each device's part straight into place, so a run saved on
{data: 4} resumes on {fsdp: 2, tensor: 2} (or on the pmap path, restoring into host arrays).

On the pmap path we save host numpy arrays (the first replica of a pmapped TrainState, `jax.device_get`), never the
device arrays: a pmapped array carries the saving topology and would not restore on another device
count. Restored trees are numpy; the runner replicates them for pmap, so a run saved on N devices
resumes on M. Orbax writes each step into a temporary directory and renames it when complete, so a
crash mid-write leaves the previous checkpoint as the latest good one.

Several processes (orbax's multi-process convention): every process constructs the Checkpointer
on the same directory (a file system all of them see) and calls `save` and `restore` at the same
steps; orbax synchronises them, writes the host arrays and metadata from process 0 (the primary
host), and every process reads them back on restore. The runner's metadata holds global counters.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp


def _spans_devices(x) -> bool:
  """Whether x is a jax.Array laid out over more than one device (a mesh's global array)."""
  return isinstance(x, jax.Array) and len(x.sharding.device_set) > 1


def savable(tree: Any) -> Any:
  """What `Checkpointer.save` writes of `tree`: global arrays spanning several devices as they
  are (orbax saves them sharded), every other leaf as host numpy (`to_host`)."""
  return jax.tree.map(lambda x: x if _spans_devices(x) else to_host(x), tree)


def to_host(tree: Any) -> Any:
  """Device pytree -> numpy pytree (typed PRNG keys become their uint32 key data)."""
  def convert(x):
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      x = jax.random.key_data(x)
    return np.asarray(jax.device_get(x))
  return jax.tree.map(convert, tree)


def _restore_target(target: Any) -> Any:
  """ShapeDtypeStruct leaves (with their shardings) kept, anything else as host numpy."""
  return jax.tree.map(lambda x: x if isinstance(x, jax.ShapeDtypeStruct) else to_host(x), target)


class Checkpointer:
  """Keeps the last `keep` checkpoints of (train state, JSON metadata) under `directory`.

  Args:
    directory: where step folders live (created if missing).
    keep: how many checkpoints to keep (older ones are deleted after a successful save).
  """

  def __init__(self, directory: str, *, keep: int = 2):
    if keep < 1:
      raise ValueError(f"train.keep_checkpoints must be >= 1, got {keep}")
    self.directory = os.path.abspath(directory)
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                             enable_async_checkpointing=False),
        item_names=("state", "meta"))

  def latest_step(self) -> int | None:
    """Step of the newest complete checkpoint, or None."""
    return self._manager.latest_step()

  def save(self, step: int, state: Any, meta: dict) -> None:
    """Writes `state` and `meta` (JSON-able) for `step`. state: a host or single-device pytree
    (written as numpy), or a mesh's global arrays (written sharded, see `savable`)."""
    self._manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(savable(state)), meta=ocp.args.JsonSave(meta)), force=True)
    self._manager.wait_until_finished()

  def restore(self, step: int, target: Any) -> tuple[Any, dict]:
    """Reads checkpoint `step` into the structure of `target`: a host pytree (returns numpy
    arrays), or `jax.ShapeDtypeStruct`s with shardings (returns global arrays so placed, whatever
    layout saved the checkpoint).

    Raises FileNotFoundError when no such step exists."""
    if step not in self._manager.all_steps():
      raise FileNotFoundError(f"no checkpoint for step {step} in {self.directory} "
                              f"(have {sorted(self._manager.all_steps())})")
    restored = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(_restore_target(target)), meta=ocp.args.JsonRestore()))
    state = jax.tree.map(lambda x: x if _spans_devices(x) else np.asarray(x), restored["state"])
    return state, dict(restored["meta"])

  def close(self) -> None:
    self._manager.close()
