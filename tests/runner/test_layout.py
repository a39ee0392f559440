"""Which layout a config gets (`layout.uses_mesh`, `builders.mesh_from_config`), the pmap layout's
array moves, and the mesh path's one-line refusals (one CPU device: no mesh is built)."""

import jax
import ml_collections
import numpy as np
import pytest

from rlscale.runner import builders
from rlscale.runner import layout as layout_lib
from tests.runner.runner_configs import tiny_config


@pytest.mark.parametrize("data, fsdp, tensor, expected", [
    (-1, 1, 1, False), (4, 1, 1, False), (1, 2, 1, True), (1, 1, 2, True), (2, -1, 1, True),
    (1, 1, -1, True)])
def test_uses_mesh_beyond_data_parallelism(data, fsdp, tensor, expected):
  cfg = ml_collections.ConfigDict({"data": data, "fsdp": fsdp, "tensor": tensor})
  assert layout_lib.uses_mesh(cfg) is expected
  assert layout_lib.uses_mesh(None) is False  # a config without a mesh section


def test_default_config_keeps_the_pmap_path():
  assert builders.mesh_from_config(tiny_config()) is None


def test_a_mesh_needing_more_devices_is_refused_in_one_line():
  config = tiny_config(mesh__data=1, mesh__fsdp=2)
  with pytest.raises(ValueError, match=r"^mesh sizes mesh.data=1, mesh.fsdp=2, mesh.tensor=1 "
                                       r"multiply to 2, not to the 1 devices"):
    builders.mesh_from_config(config)


def test_host_threads_refused_on_a_mesh():
  config = tiny_config(mesh__data=1, mesh__fsdp=-1)  # fsdp = the one device: still the mesh path
  config.rollout.host_threads = 2
  with pytest.raises(ValueError, match=r"^rollout.host_threads=2 splits the pmapped sampler's "
                                       r"batch; with mesh.fsdp or mesh.tensor > 1 it must be 1$"):
    builders.mesh_from_config(config)


def test_pmap_layout_moves():
  layout = layout_lib.PmapLayout(1)
  rows = {"a": np.arange(6).reshape(3, 2)}
  placed = layout.place_batch(rows)
  assert placed["a"].shape == (1, 3, 2)
  np.testing.assert_array_equal(layout.host_rows(placed["a"]), rows["a"])
  assert layout.update_key(jax.random.key(0)).shape == (1,)
  assert layout.params_replicated and layout.mesh is None
  # A partial run object without a layout gets the pmap layout over its devices.
  assert isinstance(layout_lib.layout_of(type("Run", (), {"num_devices": 1})()),
                    layout_lib.PmapLayout)
