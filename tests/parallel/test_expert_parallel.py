"""Expert parallelism: a MoE policy on meshes with an `expert` axis (8 simulated CPU devices, in
a subprocess: the device count must be set before JAX starts) gives the logits, gradients and
update-step metrics of one device, with each device holding E / expert of the experts."""

import json
import os
import subprocess
import sys

import jax
import pytest
from jax.sharding import AbstractMesh, PartitionSpec as P

from rlscale.model import moe
from rlscale.parallel import mesh as mesh_lib
from rlscale.parallel import rules

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def results():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
             PYTHONPATH=ROOT)
  out = subprocess.run([sys.executable, "-m", "tests.parallel.expert_parallel_worker"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=1200, check=False)
  assert out.returncode == 0, out.stderr[-4000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_logits_and_gradients_equal_one_device(results):
  for name, r in results.items():
    assert r["logits_abs"] <= 1e-5, (name, r)
    assert r["grads_abs"] <= 1e-5 and r["grads_rel"] <= 1e-5, (name, r)
    assert r["logits_max"] > 0.1  # logits large enough for 1e-5 to be a check


def test_update_step_metrics_equal_one_device(results):
  for name, r in results.items():
    for key, rel in r["update_metrics_rel"].items():
      assert rel <= 1e-5, (name, key, rel)


def test_ragged_dispatch_exchanges_tokens_explicitly(results):
  # ragged runs moe.expert_parallel_dispatch (shard_map: all-gather, reduce-scatter); dense
  # keeps the exchange XLA derives.
  assert results["fsdp2_expert4_ragged"]["explicit_exchange"]
  assert results["tensor2_expert4_ragged"]["explicit_exchange"]
  assert not results["data2_tensor2_expert2_dense"]["explicit_exchange"]


def test_expert_parallel_needs_an_expert_axis_dividing_the_rows():
  mesh = AbstractMesh((1, 2, 1, 4), ("data", "fsdp", "tensor", "expert"))
  assert moe.expert_parallel(mesh, 16)
  assert not moe.expert_parallel(mesh, 12)  # 12 rows over 2 x 4 devices
  assert not moe.expert_parallel(AbstractMesh((2, 2, 2), ("data", "fsdp", "tensor")), 16)
  assert not moe.expert_parallel(AbstractMesh((8, 1, 1, 1), ("data", "fsdp", "tensor", "expert")), 16)
  assert not moe.expert_parallel(jax.sharding.get_abstract_mesh(), 16)  # no mesh in effect


def test_expert_kernels_are_split_over_the_expert_axis(results):
  # [E = 8, hidden 32, I 16] over expert (and fsdp on hidden, tensor on I).
  assert results["fsdp2_expert4_ragged"]["expert_shard"] == [2, 16, 16]
  assert results["data2_tensor2_expert2_dense"]["expert_shard"] == [4, 32, 8]
  assert results["tensor2_expert4_ragged"]["expert_shard"] == [2, 32, 8]
  assert results["fsdp2_expert4_ragged"]["state_expert_spec"] == ["expert", "fsdp", "None"]


def test_expert_rules_and_mesh_axes():
  mesh = AbstractMesh((1, 2, 1, 4), ("data", "fsdp", "tensor", "expert"))
  assert rules.rules_for_mesh(mesh) is rules.EXPERT_RULES
  assert rules.logical_to_spec(("expert", "embed", "moe_mlp"), (8, 32, 16), mesh,
                               rules.EXPERT_RULES) == P("expert", "fsdp", None)
  assert rules.logical_to_spec(("batch", None), (16, 5), mesh, rules.EXPERT_RULES) == P(
      ("fsdp", "expert"), None)
  dense = AbstractMesh((2, 2, 2), ("data", "fsdp", "tensor"))
  assert rules.rules_for_mesh(dense) is rules.DEFAULT_RULES
  assert mesh_lib.mesh_shape({"data": 1, "fsdp": 2, "tensor": 1, "expert": -1}, 8) == (1, 2, 1, 4)
  assert mesh_lib.mesh_axes(mesh_lib.mesh_config(expert=4)) == ("data", "fsdp", "tensor", "expert")
  assert mesh_lib.batch_axes(mesh) == ("data", "fsdp", "expert")


def test_every_moe_parameter_is_named():
  from rlscale.model.config import ModelConfig  # pylint: disable=g-import-not-at-top
  from rlscale.model.transformer import PARAM_LOGICAL_AXES, init_params  # pylint: disable=g-import-not-at-top
  config = ModelConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_layers=2,
                       num_heads=4, num_kv_heads=2, head_dim=8, num_experts=4,
                       moe_intermediate_size=16, mlp_only_layers=(0,))
  shapes = jax.eval_shape(lambda: init_params(config, jax.random.key(0)))
  named = {rules.path_string(p): rules.match_logical_axes(rules.path_string(p), leaf.ndim,
                                                          PARAM_LOGICAL_AXES)
           for p, leaf in jax.tree_util.tree_flatten_with_path(shapes)[0]}
  assert all(v is not None for v in named.values()), named
  assert named["layers_1/mlp/experts/down_proj"] == ("expert", "moe_mlp", "embed")
  assert named["layers_1/mlp/gate/kernel"] == ("embed", None)
  assert named["layers_0/mlp/up_proj/kernel"] == ("embed", "mlp")
