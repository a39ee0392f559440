"""Host batch rows -> global arrays on the mesh, rows split over the `data` x `fsdp` axes.

Each process passes its own rows (multi-host: process i holds rows i * B/P .. of the global batch,
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


def global_batch(rows: Mapping[str, Any], mesh) -> dict[str, jax.Array]:
  """This process's batch rows {name: [b, ...]} -> global arrays [b * processes, ...] sharded by
  `batch_sharding` (`jax.make_array_from_process_local_data`).

  Raises: ValueError when the arrays disagree on b, or the global row count is not divisible by
  data x fsdp (naming both)."""
  arrays = {k: np.asarray(v) for k, v in rows.items()}
  sizes = {k: v.shape[0] if v.ndim else None for k, v in arrays.items()}
  if len(set(sizes.values())) != 1 or None in sizes.values():
    raise ValueError(f"every batch array needs the same leading row count, got {sizes}")
  rows_global = next(iter(sizes.values())) * jax.process_count()
  parts = batch_parallelism(mesh)
  if rows_global % parts:
    raise ValueError(f"batch of {rows_global} rows does not split over mesh data x fsdp = {parts} "
                     "(rl.prompts_per_step * rl.group_size must be divisible by it)")
  return {k: jax.make_array_from_process_local_data(batch_sharding(mesh, v.ndim), v,
                                                    (rows_global,) + v.shape[1:])
          for k, v in arrays.items()}
