"""Subprocess worker for the device-count and multi-process tests of the update step.

  python -m tests.train.update_worker devices
      (with XLA_FLAGS=--xla_force_host_platform_device_count=8): runs the same updates with the
      step jitted over meshes {data: 1, 2, 4, 8} and prints a JSON line of the largest
      differences from the one-device mesh.
  python -m tests.train.update_worker process ID PORT OUT
      (with 2 simulated devices per process): one of two processes joined by jax.distributed on
      localhost, the step on the mesh {data: 4} over both processes' devices, each process passing
      only its own half of the rows; saves the parameters after the updates, the last loss and
      this process's rows of the mesh's log-prob pass to OUT (.npz).
"""

import json
import sys

import jax
import numpy as np
from jax.experimental import multihost_utils

from rlscale.parallel import data as data_lib
from rlscale.parallel import mesh as mesh_lib
from rlscale.train import passes
from rlscale.train import update_fn
from tests.train import update_problem as problem
from tests.timeouts import hang_timeout

# Metrics of the noise scale's small batches: the microbatches, so they change with
# rl.microbatches (not with the device count).
MICRO_DEPENDENT = ("gns_grad_sq_small", "gns_batch_small")


def _max_diff(a, b) -> float:
  return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _compare(reference: problem.Run, run: problem.Run, skip=()) -> dict:
  # Metric differences relative to max(|reference|, 1), after the last step.
  last, ref = run.metrics[-1], reference.metrics[-1]
  metrics = {k: _max_diff(ref[k], last[k]) / max(abs(float(ref[k])), 1.0)
             for k in ref if k not in skip}
  out = {"params": _max_diff(reference.params, run.params), "metrics": metrics,
         "metric_keys_equal": sorted(ref) == sorted(last),
         "gns_batch_small": float(last["gns_batch_small"])}
  if reference.critic_params is not None:
    out["critic_params"] = _max_diff(reference.critic_params, run.critic_params)
  return out


def compare_device_counts() -> dict:
  results = {}
  cases = [("grpo", dict(kl_coef=0.1), (2, 4, 8)), ("ppo", {}, (4,)),
           # Shuffled minibatches and noise-scale microbatches: the same permutation and the
           # same small batches on 4 devices as on 1.
           ("grpo", dict(kl_coef=0.1, minibatches=2, microbatches=2), (4,))]
  for algorithm, fields, counts in cases:
    rl = problem.rl_config(algorithm, **fields)
    reference = problem.run_updates(rl, mesh=problem.data_mesh(1))
    suffix = "_mini2_micro2" if "minibatches" in fields else ""
    for count in counts:
      run = problem.run_updates(rl, mesh=problem.data_mesh(count))
      results[f"{algorithm}_D{count}{suffix}"] = _compare(reference, run)
    if algorithm == "grpo" and not suffix:
      run = problem.run_updates(problem.rl_config(algorithm, microbatches=4, **fields),
                                mesh=problem.data_mesh(2))
      results["grpo_D2_micro4"] = _compare(reference, run, skip=MICRO_DEPENDENT)
  return results


def run_process(process_id: int, port: int, out: str) -> None:
  jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                             process_id=process_id,
                             initialization_timeout=int(hang_timeout(30)))
  rl = problem.rl_config("grpo", kl_coef=0.1)
  params, critic = problem.initial_params(rl)
  # The whole batch on this process's first device, then this process's half of the rows.
  own_device = mesh_lib.make_mesh(mesh_lib.mesh_config(), jax.local_devices()[:1])
  host = problem.host_batch(rl, params, critic, mesh=own_device)
  half = len(host["tokens"]) // 2
  mine = {k: v[process_id * half:(process_id + 1) * half] for k, v in host.items()}
  mesh = mesh_lib.make_mesh(mesh_lib.mesh_config(), jax.devices())
  tx = problem.make_optimizer(rl)
  fn = update_fn.make_update_fn(problem.MODEL, rl, tx, mesh)
  state = problem.placed_state(fn, params, tx, critic)
  batch = data_lib.global_batch(mine, mesh)
  for i in range(2):
    state, metrics = fn(state, batch, jax.random.key(100 + i))
  gathered = multihost_utils.process_allgather(state.params, tiled=True)
  flat = {jax.tree_util.keystr(path): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_flatten_with_path(gathered)[0]}
  flat["__loss__"] = np.asarray(multihost_utils.process_allgather(metrics["loss"], tiled=True))
  # The log-prob pass over the two processes' mesh, read back as this process's rows.
  logp = passes.make_logp_fn(problem.MODEL, rl.temperature, mesh, fn.state_shardings.params)(
      problem.placed_state(fn, params, tx, critic).params, batch)
  flat["__own_logp__"] = data_lib.local_rows(logp)
  flat["__expected_logp__"] = mine["old_logp"]
  np.savez(out, **flat)
  jax.distributed.shutdown()


if __name__ == "__main__":
  if sys.argv[1] == "devices":
    print(json.dumps(compare_device_counts()))
  else:
    run_process(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
