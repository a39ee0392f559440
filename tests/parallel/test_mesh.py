"""The mesh from the config's `mesh` section: sizes, the -1, one-line errors naming the field."""

import jax
import pytest
from jax.sharding import AxisType

from rlscale.parallel import mesh as mesh_lib


@pytest.mark.parametrize("cfg, devices, expected", [
    ({"data": -1, "fsdp": 1, "tensor": 1}, 8, (8, 1, 1)),
    ({"data": 2, "fsdp": -1, "tensor": 2}, 8, (2, 2, 2)),  # 8 / (2 * 2) = 2
    ({"data": 1, "fsdp": 8, "tensor": 4}, 32, (1, 8, 4)),
    ({"data": 1, "fsdp": 1, "tensor": -1}, 1, (1, 1, 1)),
])
def test_mesh_shape(cfg, devices, expected):
  assert mesh_lib.mesh_shape(cfg, devices) == expected


@pytest.mark.parametrize("cfg, devices, message", [
    ({"data": 2, "fsdp": 2, "tensor": 1}, 8,
     "mesh sizes mesh.data=2, mesh.fsdp=2, mesh.tensor=1 multiply to 4, not to the 8 devices"),
    ({"data": -1, "fsdp": 3, "tensor": 1}, 8, "mesh.data=-1: the other sizes"),
    ({"data": -1, "fsdp": -1, "tensor": 1}, 8, "only one mesh size may be -1"),
    ({"data": 0, "fsdp": 1, "tensor": 1}, 8, "mesh.data must be an int >= 1 or -1"),
    ({"data": 1, "fsdp": 2.0, "tensor": 1}, 2, "mesh.fsdp must be an int"),
    ({"data": 1, "fsdp": 1, "model": 1}, 1, "mesh needs exactly the fields"),
])
def test_mesh_shape_errors(cfg, devices, message):
  with pytest.raises(ValueError, match=message) as error:
    mesh_lib.mesh_shape(cfg, devices)
  assert "\n" not in str(error.value)


def test_make_mesh_on_the_local_devices():
  mesh = mesh_lib.make_mesh(mesh_lib.mesh_config())
  assert mesh.axis_names == ("data", "fsdp", "tensor")
  assert tuple(mesh.shape.values()) == (jax.device_count(), 1, 1)
  assert mesh.axis_types == (AxisType.Auto,) * 3
  assert mesh_lib.batch_parallelism(mesh) == jax.device_count()
