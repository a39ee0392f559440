"""Logical axis names -> PartitionSpecs, the regex table over parameter paths, the FSDP fallback
(abstract meshes: no devices needed)."""

import jax
import pytest
from jax.sharding import AbstractMesh, PartitionSpec as P

from rlscale.model.config import ModelConfig
from rlscale.model.transformer import PARAM_LOGICAL_AXES, init_params
from rlscale.parallel import rules

AXES = ("data", "fsdp", "tensor")


def mesh(data, fsdp, tensor):
  return AbstractMesh((data, fsdp, tensor), AXES)


@pytest.mark.parametrize("names, shape, sizes, expected", [
    (("embed", "heads"), (32, 32), (1, 2, 4), P("fsdp", "tensor")),
    (("embed", "heads"), (32, 32), (2, 4, 1), P("fsdp", None)),  # tensor of size 1 dropped
    (("embed", "heads"), (32, 6), (1, 2, 4), P("fsdp", None)),  # 4 does not divide 6 heads
    (("embed", "heads"), (6, 32), (1, 4, 2), P(None, "tensor")),  # nor fsdp = 4 the hidden 6
    (("batch", None), (16, 5), (2, 4, 1), P(("data", "fsdp"), None)),
    (("batch", None), (16, 5), (1, 4, 2), P("fsdp", None)),  # data of size 1 dropped
    (("norm",), (32,), (2, 2, 2), P(None)),
    ((None, "vocab"), (4, 48), (1, 1, 8), P(None, "tensor")),  # 48 / 8 = 6
])
def test_logical_to_spec(names, shape, sizes, expected):
  assert rules.logical_to_spec(names, shape, mesh(*sizes)) == expected


def test_a_mesh_axis_shards_one_dimension_only():
  both_fsdp = (("embed", "fsdp"), ("mlp", "fsdp"))
  assert rules.logical_to_spec(("embed", "mlp"), (8, 8), mesh(1, 2, 1), both_fsdp) == P("fsdp", None)


def test_logical_to_spec_errors():
  with pytest.raises(ValueError, match="2 logical names"):
    rules.logical_to_spec(("embed", "mlp"), (8,), mesh(1, 2, 1))
  with pytest.raises(ValueError, match="names mesh axes \\['model'\\] not in the mesh"):
    rules.logical_to_spec(("embed",), (8,), mesh(1, 2, 1), (("embed", "model"),))


@pytest.mark.parametrize("shape, fsdp, expected", [
    ((12, 8), 8, P(None, "fsdp")),  # 8 does not divide the larger 12
    ((10, 32, 7), 4, P(None, "fsdp", None)),
    ((3, 5), 2, P(None, None)),
    ((), 4, P()),
    ((16, 8), 1, P(None, None)),
])
def test_fsdp_fallback(shape, fsdp, expected):
  assert rules.fsdp_fallback_spec(shape, mesh(1, fsdp, 1)) == expected


def test_table_matches_optimizer_state_paths_and_checks_rank():
  table = PARAM_LOGICAL_AXES
  assert rules.match_logical_axes("layers_3/mlp/up_proj/kernel", 2, table) == ("embed", "mlp")
  assert rules.match_logical_axes("opt_state/1/0/mu/layers_3/mlp/up_proj/kernel", 2, table) == (
      "embed", "mlp")
  assert rules.match_logical_axes("layers_0/self_attn/q_norm/weight", 1, table) == ("head_dim",)
  assert rules.match_logical_axes("norm/weight", 1, table) == ("norm",)
  assert rules.match_logical_axes("opt_state/0/count", 0, table) is None
  with pytest.raises(ValueError, match="names 2 dimensions"):
    rules.match_logical_axes("lm_head/kernel", 3, table)


def test_every_parameter_of_every_architecture_option_is_named():
  config = ModelConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_layers=2,
                       num_heads=4, num_kv_heads=2, head_dim=8, qkv_bias=True, o_proj_bias=True,
                       qk_norm=True, tie_embeddings=False, value_head=True)
  shapes = jax.eval_shape(lambda: init_params(config, jax.random.key(0)))
  flat = jax.tree_util.tree_flatten_with_path(shapes)[0]
  unnamed = [rules.path_string(p) for p, leaf in flat
             if rules.match_logical_axes(rules.path_string(p), leaf.ndim, PARAM_LOGICAL_AXES) is None]
  assert not unnamed
  # Per layer: q, k, v, o kernels (4), q, k, v, o biases (4), q and k norms (2), the two layer
  # norms (2), gate, up, down (3) = 15; plus embedding, lm_head, final norm, value head kernel and
  # bias (5): 2 * 15 + 5 = 35.
  assert len(flat) == 35


def _lowered_forward_text(under_mesh: bool) -> str:
  import contextlib  # pylint: disable=g-import-not-at-top
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from rlscale.model.transformer import forward  # pylint: disable=g-import-not-at-top
  from rlscale.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  config = ModelConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_layers=1,
                       num_heads=2, num_kv_heads=1, head_dim=4)
  params = jax.eval_shape(lambda: init_params(config, jax.random.key(0)))
  tokens = jax.ShapeDtypeStruct((2, 3), jnp.int32)
  mesh = mesh_lib.make_mesh(mesh_lib.mesh_config())
  context = (jax.sharding.use_abstract_mesh(mesh.abstract_mesh) if under_mesh
             else contextlib.nullcontext())

  def fn(params, tokens, mask):
    with context, nn.logical_axis_rules(rules.DEFAULT_RULES):
      return forward(params, config, tokens, mask).logits

  return jax.jit(fn).lower(params, tokens, tokens).as_text()


def test_model_constrains_activations_only_under_a_mesh():
  # Embedding output, the layer's output and the final norm: 3 constraints under the mesh.
  assert _lowered_forward_text(True).count("sharding_constraint") == 3
  assert "sharding_constraint" not in _lowered_forward_text(False)
