"""Shardings of a tree derived from its abstract shapes, the FSDP sufficiency check, and placing
a params tree on a mesh (a TrainState's shardings: tests/train/test_state.py)."""

import jax
import numpy as np
import pytest
from jax.sharding import AbstractMesh

from rlscale.model.transformer import init_params, param_shardings
from rlscale.parallel import mesh as mesh_lib
from rlscale.parallel import shardings
from tests.train.update_problem import MODEL

AXES = ("data", "fsdp", "tensor")


def specs(tree):
  return jax.tree.map(lambda s: s.spec, tree, is_leaf=lambda x: hasattr(x, "spec"))


def test_replicated_fraction_by_hand():
  tree = {"a": jax.ShapeDtypeStruct((8, 4), np.float32), "b": jax.ShapeDtypeStruct((3,), np.float32)}
  mesh = AbstractMesh((1, 4, 1), AXES)
  sh = shardings.tree_shardings(tree, mesh, table=((r"a", ("embed", "mlp")),))
  # a [8, 4] -> (fsdp, None); b [3] falls back and 4 divides nothing: replicated.
  # 3 * 4 bytes of 8 * 4 * 4 + 3 * 4 = 140 bytes.
  fraction, replicated = shardings.replicated_fraction(tree, sh)
  assert fraction == pytest.approx(12 / 140)
  assert replicated == [("b", (3,), 12)]


def test_check_sufficiently_sharded_by_hand():
  tree = {"a": jax.ShapeDtypeStruct((8, 4), np.float32), "b": jax.ShapeDtypeStruct((3,), np.float32)}
  table = ((r"a", ("embed", "mlp")),)
  # fsdp = 4: b (12 of 140 bytes, 8.6%) stays replicated: refused at 2%, allowed at 10%.
  mesh = AbstractMesh((1, 4, 1), AXES)
  sh = shardings.tree_shardings(tree, mesh, table=table)
  with pytest.raises(ValueError, match=r"leaves 8\.6% of the state's bytes replicated along fsdp"):
    shardings.check_sufficiently_sharded(tree, sh, mesh)
  shardings.check_sufficiently_sharded(tree, sh, mesh, tolerance=0.1)
  # fsdp = 3 divides nothing: all replicated, but without fsdp > 1 nothing is checked.
  shardings.check_sufficiently_sharded(tree, sh, AbstractMesh((4, 1, 1), AXES))


def test_put_on_mesh_places_a_host_params_tree_and_checks_its_structure():
  mesh = mesh_lib.make_mesh(mesh_lib.mesh_config())
  host = jax.device_get(init_params(MODEL, jax.random.key(0)))
  abstract = jax.eval_shape(lambda: init_params(MODEL, jax.random.key(1)))
  sh = param_shardings(abstract, mesh)
  placed = shardings.put_on_mesh(host, sh)
  np.testing.assert_array_equal(placed["norm"]["weight"], host["norm"]["weight"])
  assert placed["norm"]["weight"].sharding == sh["norm"]["weight"]
  del host["norm"]
  with pytest.raises(ValueError, match="does not match the shardings"):
    shardings.put_on_mesh(host, sh)
