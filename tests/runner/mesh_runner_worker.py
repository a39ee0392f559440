"""Subprocess worker of tests/runner/test_mesh_runner.py (needs 4 host devices, set before
JAX starts: XLA_FLAGS=--xla_force_host_platform_device_count=4).

  python -m tests.runner.mesh_runner_worker SFT_CACHE WORKDIR

1. `Checkpointer` alone: a TrainState sharded on {data: 2, fsdp: 2} saved, restored onto
   {fsdp: 2, tensor: 2}: whether every leaf equals the saved one and carries the target sharding.
2. The runner: an uninterrupted 4-step run on {fsdp: 2, tensor: 2} (the reference); runs stopped
   after 2 steps on {data: 4} and on {data: 2, fsdp: 2} (sharded saves), each resumed on
   {fsdp: 2, tensor: 2} to step 4. Per resumed run: the step-2
   checkpoint read onto {fsdp: 2, tensor: 2} (`restored_step2`), the largest differences of the
   resumed steps' metrics (non-time fields) from the reference's, whether their integer fields
   (tokens, lengths, widths, counters) are equal, and the largest difference of the final
   policy's parameters.
Prints one JSON line.
"""

import json
import os
import sys

import jax
import numpy as np

from rlscale.model import load_hf_checkpoint
from rlscale.model.transformer import param_shardings
from rlscale.parallel import mesh as mesh_lib
from rlscale.parallel import shardings as shardings_lib
from rlscale.runner.checkpoints import Checkpointer, savable
from rlscale.runner.loop import train_and_evaluate
from rlscale.runner.metrics_log import read_metrics
from rlscale.train.optimizer import make_optimizer
from rlscale.train import state as state_lib
from rlscale.train.state import create_train_state
from tests.runner.runner_configs import comparable, multihost_config


def mesh_of(data, fsdp, tensor):
  return mesh_lib.make_mesh({"data": data, "fsdp": fsdp, "tensor": tensor})


def checkpointer_case(workdir):
  """Save on {data: 2, fsdp: 2}, restore onto {fsdp: 2, tensor: 2}."""
  from rlscale.model import ModelConfig, init_params  # pylint: disable=g-import-not-at-top
  config = ModelConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_layers=1,
                       num_heads=4, num_kv_heads=2, head_dim=8)
  optimizer = make_optimizer(multihost_config("", 1).optim, batch_size=8, total_steps=4,
                             updates_per_step=1, step_samples=8, budget_samples=32)
  host = create_train_state(init_params(config, jax.random.key(3)), optimizer)
  # Moments that are not zero, so a misplaced shard would show.
  host = jax.tree.map(lambda x: x + 0.5 if np.issubdtype(np.asarray(x).dtype, np.floating) else x, host)
  saving, loading = mesh_of(2, 2, 1), mesh_of(1, 2, 2)
  _, save_shardings = state_lib.state_shardings(config, optimizer, saving)
  _, load_shardings = state_lib.state_shardings(config, optimizer, loading)
  placed = shardings_lib.put_on_mesh(host, save_shardings)
  checkpointer = Checkpointer(os.path.join(workdir, "ckpt"), keep=1)
  checkpointer.save(1, placed, {"step": 1})
  target = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                        placed, load_shardings)
  restored, meta = checkpointer.restore(1, target)
  checkpointer.close()
  equal = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
              zip(jax.tree.leaves(restored), jax.tree.leaves(host)))
  placed_as_target = all(a.sharding == s for a, s in
                         zip(jax.tree.leaves(restored), jax.tree.leaves(load_shardings)))
  q = restored.params["layers_0"]["self_attn"]["q_proj"]["kernel"]
  return {"equal": equal, "placed_as_target": placed_as_target, "meta": meta,
          "q_proj_shard": list(q.addressable_shards[0].data.shape),
          # What orbax was handed: the global arrays themselves (written shard by shard).
          "saved_as_global_arrays": all(isinstance(x, jax.Array) and len(x.sharding.device_set) == 4
                                        for x in jax.tree.leaves(savable(placed)) if x.ndim)}


def forward_case():
  """The log-prob and value passes (`train.passes`) on {fsdp: 2, tensor: 2} and {data: 4}
  against the same passes on one device ({data: 1}), on the shared tiny update problem (16 rows),
  microbatches 1 and 2: the largest |difference| of each."""
  from rlscale.parallel import data as data_lib  # pylint: disable=g-import-not-at-top
  from rlscale.train import passes  # pylint: disable=g-import-not-at-top
  from tests.train import update_problem as problem  # pylint: disable=g-import-not-at-top
  rl = problem.rl_config("ppo")
  params, critic = problem.initial_params(rl)
  rows = problem.rollout_batch(16, 0)
  rows.pop("rewards")
  one = problem.one_device_mesh()
  out = {}
  for microbatches in (1, 2):
    reference_logp = np.asarray(passes.make_logp_fn(
        problem.MODEL, 0.7, one, None, microbatches=microbatches)(params, rows))
    reference_values = np.asarray(passes.make_value_fn(
        problem.MODEL, one, None, microbatches=microbatches)(critic, rows))
    for name, shape in (("fsdp2_tensor2", (1, 2, 2)), ("data4", (4, 1, 1))):
      mesh = mesh_of(*shape)
      policy_shardings = param_shardings(params, mesh)
      critic_shardings = param_shardings(critic, mesh)
      batch = data_lib.global_batch(rows, mesh)
      logp = passes.make_logp_fn(problem.MODEL, 0.7, mesh, policy_shardings,
                                 microbatches=microbatches)(params, batch)
      values = passes.make_value_fn(problem.MODEL, mesh, critic_shardings,
                                    microbatches=microbatches)(critic, batch)
      out[f"{name}/micro{microbatches}"] = {
          "logp_max_abs": float(np.max(np.abs(np.asarray(logp) - reference_logp))),
          "values_max_abs": float(np.max(np.abs(np.asarray(values) - reference_values))),
          "logp_nonzero": bool(np.abs(reference_logp).max() > 0.1),
          "values_nonzero": bool(np.abs(reference_values).max() > 0.01),
          "rows_per_device": int(logp.addressable_shards[0].data.shape[0])}
  return out


def config_on(cache, mesh, **overrides):
  config = multihost_config(cache, 4)
  config.train.checkpoint_every = 2
  for axis, size in zip(("data", "fsdp", "tensor"), mesh):
    config.mesh[axis] = size
  for key, value in overrides.items():
    config.train[key] = value
  return config


def restored_step2(run_dir, cache):
  """The step-2 checkpoint of `run_dir` (saved sharded on the first mesh) restored onto {fsdp: 2, tensor: 2} (the layout's ShapeDtypeStructs with
  that mesh's shardings) and as host arrays: whether every leaf is equal, whether each is placed
  as asked, and the step the metadata names."""
  from rlscale.runner import builders  # pylint: disable=g-import-not-at-top
  run = builders.build_run(config_on(cache, (1, 2, 2)), run_dir,
                           log=lambda _: None)
  abstract, shardings = run.state, run.layout.state_shardings
  checkpointer = Checkpointer(os.path.join(run_dir, "checkpoints"))
  host, _ = checkpointer.restore(2, jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), abstract))
  placed, meta = checkpointer.restore(2, run.layout.restore_target(run.state))
  checkpointer.close()
  return {"restored_equal": all(np.array_equal(np.asarray(a), b) for a, b in
                                zip(jax.tree.leaves(placed), jax.tree.leaves(host))),
          "restored_placed": all(a.sharding == s for a, s in
                                 zip(jax.tree.leaves(placed), jax.tree.leaves(shardings))),
          "restored_step": meta["step"]}


def integer_fields(record):
  return {k: v for k, v in record.items() if isinstance(v, int) and not isinstance(v, bool)}


def relative(a, b):
  return abs(a - b) / max(abs(a), abs(b))


def main():
  cache, workdir = sys.argv[1], sys.argv[2]
  results = {"checkpointer": checkpointer_case(workdir), "forward": forward_case()}
  reference_dir = os.path.join(workdir, "reference")
  train_and_evaluate(config_on(cache, (1, 2, 2)), reference_dir)
  reference = comparable(read_metrics(os.path.join(reference_dir, "metrics.jsonl")))
  _, reference_params = load_hf_checkpoint(os.path.join(reference_dir, "policy"))
  for name, first_mesh in (("from_data4", (4, 1, 1)), ("from_data2_fsdp2", (2, 2, 1))):
    run_dir = os.path.join(workdir, name)
    stopped = train_and_evaluate(config_on(cache, first_mesh), run_dir, stop_after_steps=2)
    saved = restored_step2(run_dir, cache)
    summary = train_and_evaluate(config_on(cache, (1, 2, 2)), run_dir)
    records = comparable(read_metrics(os.path.join(run_dir, "metrics.jsonl")))
    _, params = load_hf_checkpoint(os.path.join(run_dir, "policy"))
    resumed = [r for r in records if r["step"] > 2]
    expected = [r for r in reference if r["step"] > 2]
    pairs = [(a[k], b[k]) for a, b in zip(resumed, expected) for k in a if isinstance(a[k], float)]
    results[name] = {
        "stopped_at": stopped["steps"], "steps": summary["steps"], **saved,
        "same_keys": [sorted(a) for a in resumed] == [sorted(b) for b in expected],
        "resumed_steps": [r["step"] for r in resumed],
        "integers_equal": [integer_fields(a) for a in resumed] == [integer_fields(b) for b in expected],
        # Relative differences of the values above 1e-3 (a loss of 0 against 1.5e-8 is rounding).
        "metrics_max_rel": max(relative(x, y) for x, y in pairs if max(abs(x), abs(y)) > 1e-3),
        "metrics_max_abs": max(abs(x - y) for x, y in pairs),
        "params_max_abs": max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in
                              zip(jax.tree.leaves(params), jax.tree.leaves(reference_params))),
    }
  print(json.dumps(results))


if __name__ == "__main__":
  main()
