"""Shardings of a train state derived from its abstract shapes, the FSDP sufficiency check, and
placing a params tree on a mesh."""

import jax
import numpy as np
import optax
import pytest
from jax.sharding import AbstractMesh, PartitionSpec as P

from rlscale.model.transformer import init_params
from rlscale.parallel import mesh as mesh_lib
from rlscale.parallel import shardings
from tests.train.update_problem import MODEL

AXES = ("data", "fsdp", "tensor")


def specs(tree):
  return jax.tree.map(lambda s: s.spec, tree, is_leaf=lambda x: hasattr(x, "spec"))


def test_state_shardings_of_params_and_adam_moments():
  mesh = AbstractMesh((2, 2, 2), AXES)
  abstract, sh = shardings.state_shardings(MODEL, optax.adam(1e-3), mesh)
  attn = specs(sh.params)["layers_0"]["self_attn"]
  assert attn["q_proj"]["kernel"] == P("fsdp", "tensor")
  assert attn["o_proj"]["kernel"] == P("tensor", "fsdp")
  assert attn["q_norm"]["weight"] == P(None)
  assert specs(sh.params)["embed_tokens"]["embedding"] == P("tensor", "fsdp")
  adam = specs(sh.opt_state)[0]
  assert adam.mu == specs(sh.params) and adam.nu == specs(sh.params)
  assert adam.count == P() and specs(sh).step == P()
  assert jax.tree.structure(abstract) == jax.tree.structure(sh, is_leaf=lambda x: hasattr(x, "spec"))


def test_replicated_fraction_by_hand():
  tree = {"a": jax.ShapeDtypeStruct((8, 4), np.float32), "b": jax.ShapeDtypeStruct((3,), np.float32)}
  mesh = AbstractMesh((1, 4, 1), AXES)
  sh = shardings.tree_shardings(tree, mesh, table=((r"a", ("embed", "mlp")),))
  # a [8, 4] -> (fsdp, None); b [3] falls back and 4 divides nothing: replicated.
  # 3 * 4 bytes of 8 * 4 * 4 + 3 * 4 = 140 bytes.
  fraction, replicated = shardings.replicated_fraction(tree, sh)
  assert fraction == pytest.approx(12 / 140)
  assert replicated == [("b", (3,), 12)]


def test_fsdp_mesh_that_shards_nothing_is_refused():
  # fsdp = 3 divides none of hidden 32, kv 16, mlp 64: nearly every byte stays replicated.
  with pytest.raises(ValueError, match=r"leaves \d+\.\d% of the state's bytes replicated along "
                                       r"fsdp") as error:
    shardings.state_shardings(MODEL, optax.adam(1e-3), AbstractMesh((1, 3, 1), AXES))
  assert "\n" not in str(error.value)
  # fsdp = 2 shards all but the norm weights (about 1% of the bytes).
  shardings.state_shardings(MODEL, optax.adam(1e-3), AbstractMesh((1, 2, 1), AXES))
  # Without fsdp nothing is checked.
  shardings.state_shardings(MODEL, optax.adam(1e-3), AbstractMesh((3, 1, 1), AXES))


def test_put_on_mesh_places_a_host_params_tree_and_checks_its_structure():
  mesh = mesh_lib.make_mesh(mesh_lib.mesh_config())
  host = jax.device_get(init_params(MODEL, jax.random.key(0)))
  abstract = jax.eval_shape(lambda: init_params(MODEL, jax.random.key(1)))
  sh = shardings.tree_shardings(abstract, mesh)
  placed = shardings.put_on_mesh(host, sh)
  np.testing.assert_array_equal(placed["norm"]["weight"], host["norm"]["weight"])
  assert placed["norm"]["weight"].sharding == sh["norm"]["weight"]
  del host["norm"]
  with pytest.raises(ValueError, match="does not match the shardings"):
    shardings.put_on_mesh(host, sh)
