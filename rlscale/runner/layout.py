"""Where the runner's arrays live: the pmap layout (a leading device axis, parameters replicated on
every local device; today's default path) or a mesh (global arrays sharded by
`rlscale.parallel`). The loop, the update batch and the checkpoints go through one of these two
objects, so the rest of the runner is the same on both.

`builders.build_run` picks the mesh when config.mesh asks for more than data parallelism
(`uses_mesh`: mesh.fsdp or mesh.tensor not 1); data-only meshes keep the pmap path, which computes
what the mesh {data: N} would (tests/parallel/test_sharded_update.py), so the default job is
unchanged.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import numpy as np

from rlscale.parallel import mesh as mesh_lib
from rlscale.parallel.data import global_batch
from rlscale.parallel.shardings import put_on_mesh
from rlscale.train import devices as devices_lib


class PmapLayout:
  """The pmap layout over the D local devices: batches [D, B / D, ...], states replicated
  [D, ...], one key per device.

  Attributes: params_replicated (True: the sampler receives replicated params), num_devices (D),
  mesh (None)."""

  params_replicated = True
  mesh = None

  def __init__(self, num_devices: int):
    self.num_devices = num_devices

  def place_batch(self, rows: Mapping[str, Any]) -> dict:
    """Host rows {name: [B, ...]} -> {name: [D, B / D, ...]} (`devices.shard_batch`)."""
    return devices_lib.shard_batch(rows, self.num_devices)

  def host_rows(self, x) -> np.ndarray:
    """A per-device output [D, B / D, ...] -> host rows [B, ...]."""
    x = np.asarray(x)
    return x.reshape((-1,) + x.shape[2:])

  def update_key(self, key: jax.Array) -> jax.Array:
    """The update step's key argument: `key` stacked D times."""
    return devices_lib.replicate_key(key, self.num_devices)

  def place_state(self, host_state):
    """A host TrainState (a checkpoint, a fresh one) -> replicated on the local devices."""
    return devices_lib.replicate(host_state)

  def saved_state(self, state):
    """What a checkpoint holds of the (replicated) state: its first copy."""
    return devices_lib.unreplicate(state)

  def restore_target(self, state):
    """The tree a checkpoint is restored into (host numpy arrays: `Checkpointer.restore`)."""
    return devices_lib.unreplicate(state)

  def from_checkpoint(self, restored):
    """The restored host state replicated for the pmapped step."""
    return devices_lib.replicate(restored)

  def host_params(self, params):
    """One copy of the params, for export and evaluation on the host."""
    return devices_lib.unreplicate(params)


class MeshLayout:
  """A mesh: batches and states are global arrays, placed by the state's NamedShardings
  (`parallel.shardings`) and the batch sharding (`parallel.data`); one key for the whole step.

  Args: mesh (a `parallel.mesh.make_mesh` Mesh), state_shardings (NamedShardings of the
  TrainState, `fn.state_shardings` of `parallel.update.make_sharded_update_fn`)."""

  params_replicated = False

  def __init__(self, mesh, state_shardings):
    self.mesh = mesh
    self.state_shardings = state_shardings
    self.num_devices = mesh_lib.batch_parallelism(mesh)

  def place_batch(self, rows: Mapping[str, Any]) -> dict:
    """Host rows {name: [B, ...]} -> global arrays, rows over data x fsdp (`data.global_batch`)."""
    return global_batch(rows, self.mesh)

  def host_rows(self, x) -> np.ndarray:
    """A global output [B, ...] -> host rows [B, ...]."""
    return np.asarray(jax.device_get(x))

  def update_key(self, key: jax.Array) -> jax.Array:
    """The update step's key argument: the key itself (one global key)."""
    return key

  def place_state(self, host_state):
    """A host (or differently placed) TrainState -> on the mesh by `state_shardings`. The result
    is donated to the update step, so it is placed from a host copy: `jax.device_put` of a device
    array may reuse its buffer for that device's shard, and the arrays the caller still holds
    (the warm start's params, the reference, a critic sharing the policy's trunk) would be deleted
    by the first step (measured: "Buffer has been deleted or donated" at step 2)."""
    return put_on_mesh(_host_copy(host_state), self.state_shardings)

  def copy_of(self, params):
    """`params` on the mesh (by the state's params shardings) in buffers of their own, from a
    host copy (see `place_state`): the frozen reference must not share memory with the state,
    which the update step donates."""
    return put_on_mesh(_host_copy(params), self.state_shardings.params)

  def saved_state(self, state):
    """What a checkpoint holds: the sharded state itself (orbax writes each shard)."""
    return state

  def restore_target(self, state):
    """ShapeDtypeStructs of `state` carrying this mesh's shardings: orbax reads each device's
    shard straight into place, whatever mesh (or pmap run) saved the checkpoint."""
    return jax.tree.map(lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                        state, self.state_shardings)

  def from_checkpoint(self, restored):
    """The restored state as it is: orbax placed each shard by `restore_target`, in buffers of
    its own (no gather to the host)."""
    return restored

  def host_params(self, params):
    """The params gathered to the host (numpy), for export."""
    return jax.tree.map(lambda x: np.asarray(jax.device_get(x)), params)


def _host_copy(tree):
  """Every leaf as a numpy array of its own (a copy even of numpy leaves; None leaves kept)."""
  return jax.tree.map(lambda x: np.array(jax.device_get(x)), tree)


def uses_mesh(mesh_cfg) -> bool:
  """Whether the `mesh` config section asks for more than data parallelism: mesh.fsdp,
  mesh.tensor or (where the section has it) mesh.expert not 1 (-1, the rest of the devices,
  counts). False for None (a config without the section). The sizes themselves are checked by
  `mesh.make_mesh`."""
  if mesh_cfg is None:
    return False
  axes = ("fsdp", "tensor") + (("expert",) if "expert" in mesh_cfg else ())
  return any(mesh_cfg[axis] != 1 for axis in axes)


def layout_of(run):
  """The layout of a `builders.Run` (`run.layout`), or for a run object without one (tests build
  partial runs) the pmap layout over `run.num_devices` (the local devices when it has none)."""
  layout = getattr(run, "layout", None)
  if layout is not None:
    return layout
  return PmapLayout(getattr(run, "num_devices", None) or jax.local_device_count())
