"""Host batch rows -> global arrays on the mesh and back (one process; several: the two-process
tests of tests/train/test_update_distributed.py and tests/parallel/test_sharded_update.py)."""

import numpy as np
import pytest
from jax.sharding import AbstractMesh, PartitionSpec as P

from rlscale.parallel import data, mesh as mesh_lib


def test_global_batch_keeps_the_rows_and_shards_them():
  mesh = mesh_lib.make_mesh(mesh_lib.mesh_config())
  rows = {"tokens": np.arange(12, dtype=np.int32).reshape(4, 3), "advantages": np.ones(4, np.float32)}
  out = data.global_batch(rows, mesh)
  np.testing.assert_array_equal(out["tokens"], rows["tokens"])
  assert out["tokens"].sharding.spec == P(("data", "fsdp"), None)
  assert out["advantages"].sharding.spec == P(("data", "fsdp"))


def test_global_batch_errors():
  mesh = AbstractMesh((2, 4, 1), ("data", "fsdp", "tensor"))
  with pytest.raises(ValueError, match="batch of 12 rows does not split over mesh data x fsdp = 8"):
    data.global_batch({"tokens": np.zeros((12, 3))}, mesh)
  with pytest.raises(ValueError, match="same leading row count"):
    data.global_batch({"tokens": np.zeros((8, 3)), "advantages": np.zeros(4)}, mesh)


def test_local_rows_and_processes_in_one_process():
  mesh = mesh_lib.make_mesh(mesh_lib.mesh_config())
  assert data.mesh_processes(mesh) == 1
  assert data.mesh_processes(AbstractMesh((2, 4, 1), ("data", "fsdp", "tensor"))) == 1
  rows = {"tokens": np.arange(12, dtype=np.int32).reshape(4, 3)}
  np.testing.assert_array_equal(data.local_rows(data.global_batch(rows, mesh)["tokens"]),
                                rows["tokens"])
