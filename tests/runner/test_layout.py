"""The mesh a config gets (`validate.mesh_from_config`), the layout's array moves, and a bad mesh's
one-line refusal (one CPU device here; several devices: tests/runner/test_mesh_runner.py)."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from rlscale.runner import validate
from rlscale.parallel.data import local_rows
from rlscale.runner import layout as layout_lib
from tests.runner.runner_configs import tiny_config


def test_the_default_config_is_data_parallel_over_every_device():
  mesh = validate.mesh_from_config(tiny_config())
  assert dict(mesh.shape) == {"data": jax.device_count(), "fsdp": 1, "tensor": 1}


def test_a_config_without_a_mesh_section_gets_the_default_mesh():
  config = tiny_config()
  del config["mesh"]
  assert dict(validate.mesh_from_config(config).shape) == {"data": jax.device_count(), "fsdp": 1,
                                                           "tensor": 1}


def test_a_mesh_needing_more_devices_is_refused_in_one_line():
  config = tiny_config(mesh__data=1, mesh__fsdp=2)
  with pytest.raises(ValueError, match=r"^mesh sizes mesh.data=1, mesh.fsdp=2, mesh.tensor=1 "
                                       r"multiply to 2, not to the 1 devices"):
    validate.mesh_from_config(config)


def _layout():
  mesh = validate.mesh_from_config(tiny_config())
  replicated = NamedSharding(mesh, PartitionSpec())
  return layout_lib.MeshLayout(mesh, {"w": replicated, "b": replicated})


def test_rows_placed_and_read_back():
  layout = _layout()
  rows = {"a": np.arange(6).reshape(3, 2), "b": np.arange(3)}
  placed = layout.place_batch(rows)
  assert placed["a"].shape == (3, 2) and isinstance(placed["a"], jax.Array)
  assert placed["a"].sharding.spec == PartitionSpec(("data", "fsdp"), None)
  for key, value in rows.items():
    np.testing.assert_array_equal(local_rows(placed[key]), value)


def test_a_placed_state_owns_its_buffers_and_restores_by_its_shardings():
  layout = _layout()
  host = {"w": np.ones((2, 3), np.float32), "b": np.zeros(3, np.float32)}
  placed = layout.place_state(host)
  host["w"][0, 0] = 5.0  # the placed copy is the caller's no more
  assert float(placed["w"][0, 0]) == 1.0
  target = layout.restore_target(placed)
  assert target["w"].shape == (2, 3) and target["w"].sharding == layout.state_shardings["w"]
  np.testing.assert_array_equal(layout.host_params(placed)["w"], np.ones((2, 3)))
