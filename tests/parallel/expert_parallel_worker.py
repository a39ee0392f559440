"""Subprocess worker of tests/parallel/test_expert_parallel.py (needs 8 host devices, set before
JAX starts: XLA_FLAGS=--xla_force_host_platform_device_count=8).

  python -m tests.parallel.expert_parallel_worker

For a tiny MoE policy (E = 8, top-2) on meshes with an `expert` axis: the forward's logits and
the gradients of a loss with the load-balancing term, jitted over the mesh with the parameters
sharded by `rules.EXPERT_RULES`, against one device; and one update step jitted over the mesh
(`update_fn.make_update_fn`) against the step jitted on one device. Prints one JSON line: per case the
largest absolute and relative differences and the expert kernels' per-device shard shape.
"""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rlscale.model import moe
from rlscale.model.config import ModelConfig
from rlscale.model.transformer import PARAM_LOGICAL_AXES, forward, init_params
from rlscale.parallel import data as data_lib
from rlscale.parallel import mesh as mesh_lib
from rlscale.parallel import rules as rules_lib
from rlscale.parallel import shardings as shardings_lib
from rlscale.rl.advantages import compute_batch_advantages
from rlscale.train import passes
from rlscale.train import update_fn
from tests.train import update_problem as problem

MODEL = ModelConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_layers=2,
                    num_heads=4, num_kv_heads=2, head_dim=8, num_experts=8,
                    num_experts_per_tok=2, moe_intermediate_size=16, mlp_only_layers=(0,),
                    router_aux_loss_coef=0.1)
# Three meshes, both dispatches: ragged runs `moe.expert_parallel_dispatch`'s explicit exchange
# (with and without a tensor split of the experts' width), dense the exchange XLA derives from
# the shardings (each case compiles three programs: ~45 s on the loaded 2-core CPU; {expert: 8}
# alone and the other pairings also agreed within 1e-6).
CASES = {  # name: ((data, fsdp, tensor, expert), dispatch)
    "fsdp2_expert4_ragged": ((1, 2, 1, 4), "ragged"),
    "tensor2_expert4_ragged": ((1, 1, 2, 4), "ragged"),
    "data2_tensor2_expert2_dense": ((2, 1, 2, 2), "dense"),
}


def _host_batch(rl, model, params):
  host = problem.rollout_batch(rl.prompts_per_step * rl.group_size)
  rewards = host.pop("rewards")
  logp_fn = passes.make_logp_fn(model, rl.temperature, problem.one_device_mesh(), None)
  host["old_logp"] = np.asarray(logp_fn(params, host))
  host.update({k: np.asarray(v) for k, v in compute_batch_advantages(
      rl, rewards, host["response_mask"], old_logp=host["old_logp"]).items()})
  return host


def _loss(model):
  def loss(params, tokens, mask):
    out = forward(params, model, tokens, mask)
    real = mask[..., None].astype(jnp.float32)
    return (jnp.sum(jnp.sin(out.logits) * real) / jnp.sum(real)
            + model.router_aux_loss_coef * moe.load_balancing_loss(out.moe, model.num_experts))
  return loss


def _diffs(a, b):
  a, b = jax.tree.leaves(jax.device_get(a)), jax.tree.leaves(jax.device_get(b))
  abs_diff = max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))
  rel = max(float(np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-30)) for x, y in zip(a, b))
  return abs_diff, rel


def compare() -> dict:
  results = {}
  for name, (shape, dispatch) in CASES.items():
    model = MODEL.replace(moe_dispatch=dispatch)
    params = init_params(model, jax.random.key(0))
    rl = problem.rl_config("grpo", kl_coef=0.0)
    host = _host_batch(rl, model, params)
    tokens, mask = host["tokens"], host["input_mask"]
    loss = _loss(model)
    ref_logits = jax.jit(lambda p, t, m: forward(p, model, t, m).logits)(params, tokens, mask)
    ref_grads = jax.jit(jax.grad(loss))(params, tokens, mask)

    devices = jax.devices()[:int(np.prod(shape))]
    mesh = mesh_lib.make_mesh(mesh_lib.mesh_config(*shape), devices)
    rules = rules_lib.rules_for_mesh(mesh)
    param_shardings = shardings_lib.tree_shardings(params, mesh, table=PARAM_LOGICAL_AXES,
                                                   rules=rules)
    sharded_params = jax.device_put(params, param_shardings)
    batch = data_lib.global_batch({"tokens": tokens, "input_mask": mask}, mesh)

    def in_mesh(fn):
      def wrapped(*args):
        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(rules):
          return fn(*args)
      return jax.jit(wrapped)

    logits_fn = in_mesh(lambda p, t, m: forward(p, model, t, m).logits)
    logits = logits_fn(sharded_params, batch["tokens"], batch["input_mask"])
    jaxpr = str(logits_fn.trace(sharded_params, batch["tokens"], batch["input_mask"]).jaxpr)
    grads = in_mesh(jax.grad(loss))(sharded_params, batch["tokens"], batch["input_mask"])
    kernel = sharded_params["layers_1"]["mlp"]["experts"]["gate_proj"]

    # The update step on the mesh against the step on one device.
    tx = problem.make_optimizer(rl)
    ref_fn = update_fn.make_update_fn(model, rl, tx, problem.one_device_mesh())
    _, ref_metrics = ref_fn(problem.placed_state(ref_fn, params, tx), host, jax.random.key(1))
    fn = update_fn.make_update_fn(model, rl, tx, mesh)
    state = problem.placed_state(fn, params, tx)
    _, metrics = fn(state, data_lib.global_batch(host, mesh), jax.random.key(1))
    metric_rel = {k: abs(float(metrics[k]) - float(ref_metrics[k])) / max(abs(float(ref_metrics[k])), 1e-30)
                  for k in ("loss", "grad_norm", "moe/aux_loss", "moe/expert_load_max")}
    state_kernel = fn.state_shardings.params["layers_1"]["mlp"]["experts"]["gate_proj"]
    results[name] = {
        "logits_abs": _diffs(logits, ref_logits)[0],
        "logits_max": float(np.max(np.abs(np.asarray(ref_logits)))),
        "grads_abs": _diffs(grads, ref_grads)[0], "grads_rel": _diffs(grads, ref_grads)[1],
        "update_metrics_rel": metric_rel,
        "expert_shard": list(kernel.addressable_shards[0].data.shape),
        "explicit_exchange": "shard_map" in jaxpr and "reduce_scatter" in jaxpr,
        "state_expert_spec": [str(a) for a in state_kernel.spec],
    }
  return results


if __name__ == "__main__":
  assert jax.device_count() == 8, jax.device_count()
  print(json.dumps(compare()))
