"""Host batch rows -> global arrays on the mesh, rows split over the mesh's batch axes (data x
fsdp, x expert), and back.

Each process passes its own rows (several processes: process i holds its devices' rows of the
global batch, rows i * b .. (i + 1) * b - 1 when the mesh lists the processes' devices in order,
as `jax.make_array_from_process_local_data` expects); in one process its rows are the batch.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from rlscale.parallel.mesh import batch_axes, batch_parallelism


def batch_sharding(mesh, ndim: int) -> NamedSharding:
  """Rows (dimension 0) over `mesh.batch_axes(mesh)`, the other `ndim` - 1 dimensions replicated."""
  return NamedSharding(mesh, PartitionSpec(batch_axes(mesh), *([None] * (ndim - 1))))


def mesh_processes(mesh) -> int:
  """How many processes own devices of `mesh` (an AbstractMesh has none: every process,
  `jax.process_count()`)."""
  try:
    devices = mesh.devices
  except ValueError:  # AbstractMesh
    return jax.process_count()
  return len({d.process_index for d in devices.flat})


def global_batch(rows: Mapping[str, Any], mesh) -> dict[str, jax.Array]:
  """This process's batch rows {name: [b, ...]} -> global arrays [b x P, ...] (P: the processes
  owning the mesh's devices, `mesh_processes`) sharded by `batch_sharding`
  (`jax.make_array_from_process_local_data`: each process passes the same b, and its rows become
  the rows its devices hold).

  Args: rows: numpy (or array-like) arrays with one leading row count b; mesh: a Mesh.
  Returns: {name: jax.Array} with the same keys and dtypes.
  Raises: ValueError when the arrays disagree on b (or one is a scalar), or the global row count
    b x P is not divisible by the mesh's batch parallelism (naming both)."""
  arrays = {k: np.asarray(v) for k, v in rows.items()}
  sizes = {k: v.shape[0] if v.ndim else None for k, v in arrays.items()}
  if len(set(sizes.values())) != 1 or None in sizes.values():
    raise ValueError(f"every batch array needs the same leading row count, got {sizes}")
  rows_global = next(iter(sizes.values())) * mesh_processes(mesh)
  parts = batch_parallelism(mesh)
  if rows_global % parts:
    raise ValueError(f"batch of {rows_global} rows does not split over mesh data x fsdp = {parts} "
                     "(rl.prompts_per_step * rl.group_size must be divisible by it)")
  return {k: jax.make_array_from_process_local_data(batch_sharding(mesh, v.ndim), v,
                                                    (rows_global,) + v.shape[1:])
          for k, v in arrays.items()}


def local_rows(x: jax.Array) -> np.ndarray:
  """This process's rows of a row-sharded global array [B, ...] (e.g. a pass's output, sharded by
  `batch_sharding`) as host numpy [b, ...]: the rows its devices hold, each once, in row order;
  all B rows when this process holds the whole array (one process)."""
  if x.is_fully_addressable:
    return np.asarray(x)
  by_start = {}
  for shard in x.addressable_shards:
    rows = shard.index[0] if shard.index else slice(None)
    by_start.setdefault(rows.start or 0, shard.data)
  return np.concatenate([np.asarray(by_start[start]) for start in sorted(by_start)])
