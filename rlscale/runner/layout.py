"""Where the runner's arrays live: a `jax.sharding.Mesh` (one device is the mesh {data: 1}).

Batches and states are global arrays: the state placed by its NamedShardings
(`parallel.shardings`), a batch's rows over the mesh's batch axes (`parallel.data`), one PRNG key
for the whole step. The loop, the update batch and the checkpoints go through a `MeshLayout`, so
the rest of the runner never handles device axes.

Several processes (`rlscale.runner.hosts`): each process passes its own rows, which become the
global arrays' rows in process order (`parallel.data.global_batch`).
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import numpy as np

from rlscale.parallel import mesh as mesh_lib
from rlscale.parallel.data import global_batch
from rlscale.parallel.shardings import put_on_mesh


class MeshLayout:
  """A mesh and the train state's shardings on it.

  Args: mesh (a `parallel.mesh.make_mesh` Mesh), state_shardings (NamedShardings of the
  TrainState, `fn.state_shardings` of `train.update_fn.make_update_fn`).

  Attributes: mesh, state_shardings, num_devices (how many parts a batch's rows are split into:
  the mesh's batch axes, `parallel.mesh.batch_parallelism`)."""

  def __init__(self, mesh, state_shardings):
    self.mesh = mesh
    self.state_shardings = state_shardings
    self.num_devices = mesh_lib.batch_parallelism(mesh)

  def place_batch(self, rows: Mapping[str, Any]) -> dict:
    """This process's host rows {name: [b, ...]} -> global arrays [B, ...], rows over the batch
    axes (`data.global_batch`; B = b x processes).

    Raises: ValueError when the arrays disagree on b or B does not split over the batch axes."""
    return global_batch(rows, self.mesh)

  def place_state(self, host_state):
    """A host (or differently placed) TrainState -> on the mesh by `state_shardings`. The result
    is donated to the update step, so it is placed from a host copy: `jax.device_put` of a device
    array may reuse its buffer for that device's shard, and the arrays the caller still holds
    (the warm start's params, the reference, a critic sharing the policy's trunk) would be deleted
    by the first step ("Buffer has been deleted or donated" at step 2)."""
    return put_on_mesh(_host_copy(host_state), self.state_shardings)

  def copy_of(self, params):
    """`params` on the mesh (by the state's params shardings) in buffers of their own, from a
    host copy (see `place_state`): the frozen reference must not share memory with the state,
    which the update step donates."""
    return put_on_mesh(_host_copy(params), self.state_shardings.params)

  def restore_target(self, state):
    """ShapeDtypeStructs of `state` carrying this mesh's shardings: orbax reads each device's
    shard straight into place, whatever mesh saved the checkpoint (or the replicated layout of
    rlscale before the mesh, which saved host arrays: tests/runner/test_old_checkpoints.py)."""
    return jax.tree.map(lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                        state, self.state_shardings)

  def host_params(self, params):
    """The whole params on the host (numpy) in every process, for export and checks."""
    return jax.tree.map(whole_array, params)


def whole_array(x) -> np.ndarray:
  """A global array's every element on the host (numpy), in every process: a copy of the local
  data when this process holds all of it, else gathered from the processes."""
  if not isinstance(x, jax.Array):
    return np.asarray(x)
  if x.is_fully_replicated:  # every process holds a copy
    return np.asarray(x.addressable_data(0))
  if x.is_fully_addressable:
    return np.asarray(jax.device_get(x))
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def _host_copy(tree):
  """Every leaf as a numpy array of its own (a copy even of numpy leaves; None leaves kept)."""
  return jax.tree.map(lambda x: np.array(jax.device_get(x)), tree)
