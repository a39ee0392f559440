"""Subprocess worker of tests/parallel/test_sharded_update.py (needs 8 host devices, set before JAX
starts: XLA_FLAGS=--xla_force_host_platform_device_count=8).

  python -m tests.parallel.sharded_update_worker
  python -m tests.parallel.sharded_update_worker process ID PORT OUT
      (with 2 host devices per process): one of two processes joined by jax.distributed on
      localhost, the step on a {data: 2, fsdp: 2} mesh over both processes' 4 devices, each
      process passing only its own half of the rows; saves the parameters after two steps and the
      last loss to OUT (.npz).

Runs two update steps of the shared tiny problem (tests/train/update_problem.py) with the update
step jitted over each mesh and over the one-device mesh {data: 1}, and prints one JSON line: per
case the relative differences of loss, gradients (recorded by the optimizer) and metrics after the
first step, the largest parameter difference after the second, whether every state leaf kept its
sharding, and the rows each device holds of the batch.
"""

import json
import sys
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import multihost_utils

from rlscale.parallel import data as data_lib
from rlscale.parallel import mesh as mesh_lib
from rlscale.train import update_fn
from tests.timeouts import hang_timeout
from tests.train import update_problem as problem

CASES = {  # name: (algorithm, rl fields, (data, fsdp, tensor))
    **{f"data{n}": ("grpo", {"kl_coef": 0.1}, (n, 1, 1)) for n in (1, 2, 4, 8)},
    **{f"mesh{d}{f}{t}": ("grpo", {"kl_coef": 0.1}, (d, f, t))
       for d, f, t in ((2, 4, 1), (2, 2, 2), (1, 1, 8), (1, 8, 1))},
    "mesh122_minibatches2_micro2": ("grpo", {"kl_coef": 0.1, "minibatches": 2, "microbatches": 2},
                                    (1, 2, 2)),
    "ppo_mesh222": ("ppo", {}, (2, 2, 2)),
}
# Cases whose policy is rematerialised (model fields), against the one-device step without remat:
# recomputing each layer in the backward on a mesh must give the same numbers, under both remat
# implementations.
REMAT_CASES = {  # name: (algorithm, rl fields, (data, fsdp, tensor), model fields)
    "mesh241_remat": ("grpo", {"kl_coef": 0.1}, (2, 4, 1), {"remat": True}),
    "mesh122_remat_checkpoint": ("grpo", {"kl_coef": 0.1}, (1, 2, 2),
                                 {"remat": True, "remat_impl": "checkpoint"}),
}


LOSS_FLOOR = 0.01  # see "loss" in `compare`


class Recorded(NamedTuple):
  """The gradient the optimizer received last."""
  grads: Any


def recording(inner: optax.GradientTransformation) -> optax.GradientTransformation:
  """`inner` (a make_optimizer chain) whose state tuple starts with the incoming gradient, so a
  step's gradient can be read from its state (the chain stays flat for current_learning_rate)."""

  def init(params):
    return (Recorded(jax.tree.map(jnp.zeros_like, params)),) + tuple(inner.init(params))

  def update(grads, state, params=None):
    updates, inner_state = inner.update(grads, tuple(state[1:]), params)
    return updates, (Recorded(grads),) + tuple(inner_state)

  return optax.GradientTransformation(init, update)


def _host(tree):
  return jax.tree.map(np.asarray, jax.device_get(tree))


def _reference(rl, tx, params, critic, host, model):
  """Per step (state after it on the host, metrics) of the step jitted on one device."""
  fn = update_fn.make_update_fn(model, rl, tx, problem.one_device_mesh())
  state = problem.placed_state(fn, params, tx, critic)
  out = []
  for i in range(2):
    state, metrics = fn(state, host, jax.random.key(100 + i))
    out.append((_host(state), {k: float(v) for k, v in _host(metrics).items()}))
  return out


def _sharded(rl, tx, params, critic, host, shape, model):
  """Per step (state on the host, metrics) of the jitted step on a mesh of `shape`, whether the
  state kept its shardings, and the batch rows per device."""
  devices = jax.devices()[:int(np.prod(shape))]
  mesh = mesh_lib.make_mesh(mesh_lib.mesh_config(*shape), devices)
  fn = update_fn.make_update_fn(model, rl, tx, mesh)
  state = problem.placed_state(fn, params, tx, critic)
  batch = data_lib.global_batch(host, mesh)
  out, kept = [], True
  for i in range(2):
    state, metrics = fn(state, batch, jax.random.key(100 + i))
    kept &= all(leaf.sharding.is_equivalent_to(sharding, leaf.ndim) for leaf, sharding in zip(
        jax.tree.leaves(state), jax.tree.leaves(fn.state_shardings)))
    out.append((_host(state), {k: float(v) for k, v in _host(metrics).items()}))
  rows = sorted({s.data.shape[0] for s in batch["tokens"].addressable_shards})
  q_shard = state.params["layers_0"]["self_attn"]["q_proj"]["kernel"].addressable_shards[0].data.shape
  return out, kept, rows, list(q_shard)


def _rel_norm(a, b) -> float:
  """Largest over leaves of |a - b| / |b| (Frobenius norms)."""
  return max(float(np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-30))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _max_diff(a, b) -> float:
  return max(float(np.max(np.abs(x - y))) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def compare() -> dict:
  results = {}
  references = {}
  cases = {**{k: v + ({},) for k, v in CASES.items()}, **REMAT_CASES}
  for name, (algorithm, fields, shape, model_fields) in cases.items():
    rl = problem.rl_config(algorithm, **fields)
    tx = recording(problem.make_optimizer(rl))
    params, critic = problem.initial_params(rl)
    host = problem.host_batch(rl, params, critic)
    key = (algorithm, tuple(sorted(fields.items())))
    if key not in references:
      references[key] = _reference(rl, tx, params, critic, host, problem.MODEL)
    reference = references[key]
    run, kept, rows, q_shard = _sharded(rl, tx, params, critic, host, shape,
                                        problem.MODEL.replace(**model_fields))
    (ref1, ref_m1), (ref2, _) = reference
    (run1, run_m1), (run2, _) = run
    results[name] = {
        "mesh": list(shape),
        # Relative to max(|loss|, 0.01): the loss sums per-token terms of order 1 that nearly
        # cancel (group-centred advantages; a shuffled minibatch's loss is about -0.002), so
        # float32 rounding leaves an absolute error of about 1e-7, whatever the loss's size.
        "loss": abs(run_m1["loss"] - ref_m1["loss"]) / max(abs(ref_m1["loss"]), LOSS_FLOOR),
        "grads": _rel_norm(run1.opt_state[0].grads, ref1.opt_state[0].grads),
        "metrics": max(abs(run_m1[k] - ref_m1[k]) / max(abs(ref_m1[k]), 1.0) for k in ref_m1),
        "metric_keys_equal": sorted(run_m1) == sorted(ref_m1),
        "params": _max_diff(run2.params, ref2.params),
        "critic_params": 0.0 if critic is None else _max_diff(run2.critic_params, ref2.critic_params),
        "shardings_kept": bool(kept), "rows_per_device": rows, "q_proj_shard": q_shard,
    }
  return results


TWO_PROCESS_MESH = (2, 2, 1)  # data, fsdp, tensor over 2 processes x 2 devices


def run_process(process_id: int, port: int, out: str) -> None:
  """One process of the two-process test: the step on TWO_PROCESS_MESH, this process's
  rows only (`data_lib.global_batch`); params (gathered from both processes) and loss to `out`."""
  jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                             process_id=process_id, initialization_timeout=int(hang_timeout(30)))
  rl = problem.rl_config("grpo", kl_coef=0.1)
  tx = problem.make_optimizer(rl)
  params, critic = problem.initial_params(rl)
  host = problem.host_batch(rl, params, critic, mesh=mesh_lib.make_mesh(
      mesh_lib.mesh_config(), jax.local_devices()[:1]))
  half = len(host["tokens"]) // 2
  mine = {k: v[process_id * half:(process_id + 1) * half] for k, v in host.items()}
  mesh = mesh_lib.make_mesh(mesh_lib.mesh_config(*TWO_PROCESS_MESH), jax.devices())
  fn = update_fn.make_update_fn(problem.MODEL, rl, tx, mesh)
  state = problem.placed_state(fn, params, tx, critic)
  batch = data_lib.global_batch(mine, mesh)
  for i in range(2):
    state, metrics = fn(state, batch, jax.random.key(100 + i))
  gathered = multihost_utils.process_allgather(state.params, tiled=True)
  flat = {jax.tree_util.keystr(path): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_flatten_with_path(gathered)[0]}
  flat["__loss__"] = np.asarray(multihost_utils.process_allgather(metrics["loss"], tiled=True))
  flat["__rows_per_device__"] = np.asarray(sorted(
      {s.data.shape[0] for s in batch["tokens"].addressable_shards}))
  np.savez(out, **flat)
  jax.distributed.shutdown()


if __name__ == "__main__":
  if len(sys.argv) > 1 and sys.argv[1] == "process":
    run_process(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
  else:
    assert jax.device_count() == 8, jax.devices()
    print(json.dumps(compare()))
