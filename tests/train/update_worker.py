"""Subprocess worker for the device-count and multi-process tests of the update step.

  python -m tests.train.update_worker devices
      (with XLA_FLAGS=--xla_force_host_platform_device_count=8): runs the same updates on 1, 2, 4
      and 8 simulated devices and prints a JSON line of the largest differences from 1 device.
  python -m tests.train.update_worker process ID PORT OUT
      (with 2 simulated devices per process): one of two processes joined by jax.distributed on
      localhost; saves the parameters after the updates to OUT (.npz).
"""

import json
import sys

import jax
import numpy as np

from rlscale.train import state as state_lib
from rlscale.train import update as update_lib
from tests.train import update_problem as problem
from tests.timeouts import hang_timeout

# Per-device quantities that legitimately depend on the split.
SPLIT_DEPENDENT = ("gns_grad_sq_small", "gns_batch_small")


def _max_diff(a, b) -> float:
  return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _compare(reference: problem.Run, run: problem.Run) -> dict:
  # Metric differences relative to max(|reference|, 1).
  metrics = {k: _max_diff(reference.metrics[-1][k][0], run.metrics[-1][k])
             / max(abs(float(reference.metrics[-1][k][0])), 1.0)
             for k in reference.metrics[-1] if k not in SPLIT_DEPENDENT}
  out = {"params": _max_diff(reference.params, run.params), "metrics": metrics,
         "gns_batch_small": float(run.metrics[-1]["gns_batch_small"][0])}
  if reference.critic_params is not None:
    out["critic_params"] = _max_diff(reference.critic_params, run.critic_params)
  return out


def compare_device_counts() -> dict:
  devices = jax.devices()
  results = {}
  cases = [("grpo", dict(kl_coef=0.1), (2, 4, 8)), ("ppo", {}, (4,))]
  for algorithm, fields, counts in cases:
    reference = problem.run_updates(problem.rl_config(algorithm, **fields), devices=devices[:1])
    for count in counts:
      run = problem.run_updates(problem.rl_config(algorithm, **fields), devices=devices[:count])
      results[f"{algorithm}_D{count}"] = _compare(reference, run)
    if algorithm == "grpo":
      run = problem.run_updates(problem.rl_config(algorithm, microbatches=4, **fields),
                                devices=devices[:2])
      results["grpo_D2_micro4"] = _compare(reference, run)
  return results


def run_process(process_id: int, port: int, out: str) -> None:
  jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                             process_id=process_id,
                             initialization_timeout=int(hang_timeout(30)))
  rl = problem.rl_config("grpo", kl_coef=0.1)
  params, critic = problem.initial_params(rl)
  # The whole batch on one local device (no collectives), then this process's quarter-rows.
  host = problem.host_batch(rl, params, critic, devices=jax.local_devices()[:1])
  num_global = jax.device_count()
  local = jax.local_device_count()
  sharded = update_lib.shard_batch(host, num_global)
  mine = {k: v[process_id * local:(process_id + 1) * local] for k, v in sharded.items()}
  tx = problem.make_optimizer(rl)
  state = update_lib.replicate(state_lib.create_train_state(params, tx, critic_params=critic))
  fn = update_lib.make_update_fn(problem.MODEL, rl, tx)
  for i in range(2):
    state, metrics = fn(state, mine, jax.random.key(100 + i))
  host_params = jax.device_get(update_lib.unreplicate(state.params))
  flat = {jax.tree_util.keystr(path): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_flatten_with_path(host_params)[0]}
  flat["__loss__"] = np.asarray(jax.device_get(metrics["loss"]))
  np.savez(out, **flat)
  jax.distributed.shutdown()


if __name__ == "__main__":
  if sys.argv[1] == "devices":
    print(json.dumps(compare_device_counts()))
  else:
    run_process(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
