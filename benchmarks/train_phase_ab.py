"""The runner's training phase on the main job's shapes, variants interleaved in one process.

  python benchmarks/train_phase_ab.py --out DIR [--quick] [--variants baseline,no_ynn,...]
      [--config experiments/configs/default.py[:smoke]] [--rounds 30] [--batches 8] [--sft_cache DIR]

Builds the main job's Run exactly as `rlscale.main` does (`builders.build_run`: config, SFT warm
start, cached in --sft_cache, the update step as the runner compiles it), samples --batches real
rollout batches from the warm start with the runner's own `_collect_rollouts` (so the batch size,
prompt bucket and bucketed response widths are the main job's), then times the runner's training
phase (`rl_step.train_phase`: trimming, sharding, advantages, loss mask, update step, metrics to the
host) for every variant, interleaved: each round runs every variant once on the same rollout
batch (the variant order rotates each round), after a warm-up that compiles every width met.
Each variant trains its own copy of the warm-start state. On a shared machine absolute seconds
mean little; the ratios of per-variant medians measured this way are the evidence.

Variants (each a Run that differs from the runner's in one thing):
  baseline     the runner's Run as built.
  no_ynn       update step compiled with XLA's default options (no YNNPACK dot fusions).
  remat        model.remat = True (per-layer rematerialisation) in the update step.
  step_only    the update step alone on a batch already on the device (no host work): what the
               rest of the phase costs is baseline - step_only.
  full_prompt  the prompt's all-padding leading columns kept (the sampler's prompt bucket), as
               the runner did before it trimmed them (`update_batch.train_widths` patched).
  full_last_layer  the last layer computed at every position, then the response positions
               sliced, as the update step did before `forward(outputs=...)` (`objective.forward`
               patched while the variant's step is traced).
  before       full_prompt and full_last_layer together: the training phase as it was before
               these two changes.
  microbatches_K  rl.microbatches = K: the same gradient accumulated over K row slices.

Before timing, every variant's first update from the same state on the same batch is compared
with the baseline's (train/loss, train/grad_norm and the new parameters, allclose): a variant
that changes the numbers is reported as such.

With --profile V1,V2, each of those variants then runs --profile_steps more phases under
`jax.profiler.trace`, and the XLA op time of its update step is summed by category as in
`profile_update.py` (matmul, layout, reduce, elementwise, collective, other), next to the phase's
wall time (the rest is host work and time between ops).

Writes DIR/train_phase_ab.json: the workload (P, G, B, model, prompt width, response widths met,
real-token fraction), per variant the median seconds per phase and its ratio to the baseline,
every round's seconds, the numerical check, JAX compiles after warm-up (0 expected), load
averages and the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time

import jax
import ml_collections
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=g-import-not-at-top,wrong-import-position (after the sys.path line)
from benchmarks.common import load_average, machine_info
from benchmarks.profile_update import category, op_times
from rlscale.runner import builders, rl_step, rollouts, update_batch
from rlscale.runner.batching import train_widths
from rlscale.runner.config_files import load_config_file
from rlscale.runner.timing import RunClock
from rlscale.train import objective
from rlscale.train import update as update_lib
from rlscale.train import update_fn as update_fn_lib
from rlscale.train.optimizer import make_optimizer

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
VARIANTS = ("baseline", "no_ynn", "remat", "step_only", "full_prompt", "full_last_layer", "before",
            "microbatches_2", "microbatches_4", "microbatches_8")


def _optimizer(config, run):
  return make_optimizer(config.optim,
                        **update_lib.optimizer_args(run.rl_config, run.total_steps))


def _update_fn(run, model_config, rl_config, optimizer, **kwargs):
  """The update step jitted over the run's mesh, with the run's state shardings."""
  return update_fn_lib.make_update_fn(model_config, rl_config, optimizer, run.layout.mesh,
                                      state_shardings=run.layout.state_shardings, **kwargs)


def _with_update(run, update, **changes):
  """`run` with its trainer's update step replaced (and the other Run fields in `changes`)."""
  return dataclasses.replace(run, trainer=dataclasses.replace(run.trainer, update=update),
                             **changes)


def variant_run(name: str, config, run):
  """The Run of variant `name` (see the module docstring) built from the runner's `run`."""
  if name in ("baseline", "step_only"):
    return run
  if name == "no_ynn":
    return _with_update(run, _update_fn(
        run, run.model_config, run.rl_config, _optimizer(config, run), cpu_compiler_options={}))
  if name == "remat":
    model_config = run.model_config.replace(remat=True)
    return _with_update(run, _update_fn(run, model_config, run.rl_config, _optimizer(config, run)),
                        model_config=model_config)
  if name in ("full_last_layer", "before"):
    return _with_update(run, _update_fn(
        run, run.model_config, run.rl_config, _optimizer(config, run)))
  if name == "full_prompt":
    return run
  if name.startswith("microbatches_"):
    rl_config = ml_collections.ConfigDict(run.rl_config.to_dict())
    rl_config.microbatches = int(name.split("_")[1])
    return _with_update(run, _update_fn(run, run.model_config, rl_config, _optimizer(config, run)),
                        rl_config=rl_config)
  raise ValueError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")


def _full_prompt_widths(rollout):
  """`update_batch.train_widths` without the prompt trim: the sampler's prompt bucket."""
  return np.asarray(rollout.prompt_mask).shape[1], train_widths(rollout)[1]


def _full_last_layer_forward(params, config, tokens, input_mask, *, head=True, outputs=None):
  """`transformer.forward` computing every position, then slicing [start, stop)."""
  out = _FORWARD(params, config, tokens, input_mask, head=head)
  if outputs is None:
    return out
  cut = lambda x: None if x is None else x[:, outputs[0]:outputs[1]]  # noqa: E731
  return out._replace(logits=cut(out.logits), values=cut(out.values), hidden=cut(out.hidden))


_FORWARD = objective.forward
# Module attributes a variant replaces while it runs (the update step's objective reads
# `objective.forward` when it is traced, on the variant's first call per shape; the runner reads
# `update_batch.train_widths`).
PATCHES = {"full_prompt": [(update_batch, "train_widths", _full_prompt_widths)],
           "full_last_layer": [(objective, "forward", _full_last_layer_forward)]}
PATCHES["before"] = PATCHES["full_prompt"] + PATCHES["full_last_layer"]


@contextlib.contextmanager
def patched(name: str):
  """The module attributes of variant `name` replaced (PATCHES), restored on exit."""
  saved = [(module, attr, getattr(module, attr)) for module, attr, _ in PATCHES.get(name, ())]
  try:
    for module, attr, value in PATCHES.get(name, ()):
      setattr(module, attr, value)
    yield
  finally:
    for module, attr, value in saved:
      setattr(module, attr, value)


def _copy_state(state):
  """A fresh device copy (the update step donates its state)."""
  return jax.tree.map(lambda x: x.copy(), state)


class StepOnly:
  """The update step alone: the batch `update_batch.make_update_batch` makes (global arrays on
  the run's mesh), made once per rollout batch."""

  def __init__(self, run):
    self.run = run
    self.batches = {}

  def __call__(self, state, index, generated, key):
    if index not in self.batches:
      batch, _ = update_batch.make_update_batch(self.run, state, generated)
      self.batches[index] = batch.arrays()
    state, metrics = self.run.trainer.update(state, self.batches[index], key)
    jax.block_until_ready(metrics)
    return {f"train/{k}": v for k, v in metrics.items()}, state


def numerical_check(runs: dict, base_state, generated, key) -> dict:
  """Each variant's first update (same state, same batch) against the baseline's: differences of
  train/loss, train/grad_norm, train/entropy (allclose: rtol 1e-5, atol 1e-7) and the largest
  parameter difference after the update (Adam's first step moves every parameter by about
  +-lr whatever the gradient's size, so a gradient entry near 0 may flip sign under float
  rounding: parameters are reported, not judged)."""
  keys = ("train/loss", "train/grad_norm", "train/entropy")
  out, ref = {}, None
  for name, fn in runs.items():
    record, state = fn(_copy_state(base_state), -1, generated, key)
    values = {k: float(record[k]) for k in keys}
    params = jax.tree.leaves(jax.device_get(state.params))
    if ref is None:
      ref = (values, params)
      continue
    diffs = {k: abs(values[k] - ref[0][k]) for k in keys}
    out[name] = {**{f"{k}_diff": v for k, v in diffs.items()},
                 "max_abs_param_diff": max(float(np.max(np.abs(a - b)))
                                           for a, b in zip(params, ref[1])),
                 "allclose": all(diffs[k] <= 1e-7 + 1e-5 * abs(ref[0][k]) for k in keys)}
  return out


def profile_variant(fn, state, batches, key, steps: int) -> dict:
  """`steps` training phases of one variant under `jax.profiler.trace`: wall seconds per phase,
  XLA op seconds per phase (summed over threads) by category and the top ops, and the state."""
  with tempfile.TemporaryDirectory() as trace_dir:
    start = time.perf_counter()
    with jax.profiler.trace(trace_dir):
      for i in range(steps):
        _, state = fn(state, i % len(batches), batches[i % len(batches)],
                      jax.random.fold_in(key, 10_000 + i))
    wall = (time.perf_counter() - start) / steps
    ops = op_times(trace_dir)
  by_category = {}
  for name, secs in ops.items():
    by_category[category(name)] = by_category.get(category(name), 0.0) + secs / steps
  total = sum(by_category.values())
  top = sorted(ops.items(), key=lambda kv: -kv[1])[:20]
  return {"wall_seconds_per_phase": wall, "op_seconds_per_phase": total,
          "categories": {k: {"seconds": v, "share": v / total}
                         for k, v in sorted(by_category.items(), key=lambda kv: -kv[1])},
          "top_ops": {k: v / steps for k, v in top}, "state": state}


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", required=True)
  parser.add_argument("--config", default="experiments/configs/default.py")
  parser.add_argument("--variants", default=",".join(VARIANTS))
  parser.add_argument("--rounds", type=int, default=30)
  parser.add_argument("--batches", type=int, default=8)
  parser.add_argument("--sft_cache", default=None,
                      help="SFT warm-start cache folder (default: a temporary folder)")
  parser.add_argument("--quick", action="store_true", help="8 rounds on 4 batches")
  parser.add_argument("--profile", default="", help="variants to profile after the timing")
  parser.add_argument("--profile_steps", type=int, default=5)
  args = parser.parse_args(argv)
  if args.quick:
    args.rounds, args.batches = 8, 4
  names = args.variants.split(",")
  if names[0] != "baseline":
    names = ["baseline"] + [n for n in names if n != "baseline"]
  compiles: list = []
  jax.monitoring.register_event_duration_secs_listener(
      lambda event, duration, **kw: compiles.append(duration) if event == COMPILE_EVENT else None)

  path, _, config_arg = args.config.partition(":")  # "file.py:smoke" as rlscale.main takes it
  config = load_config_file(path, config_arg or None)
  with tempfile.TemporaryDirectory() as workdir:
    if args.sft_cache:
      config.sft.cache_dir = args.sft_cache
    t0 = time.perf_counter()
    run = builders.build_run(config, workdir, log=lambda line: print(line, flush=True))
    setup_seconds = time.perf_counter() - t0

  clock, counters = RunClock(), {"samples": 0, "prompts": 0}
  key = jax.random.key(config.seed)
  batches = []
  for i in range(args.batches):
    generated, _ = rollouts.collect_rollouts(
        run, run.state, jax.random.fold_in(key, i), counters, clock)
    batches.append(generated)
  widths = [train_widths(g.rollout) for g in batches]

  def phase(name, variant):
    def fn(state, index, generated, k):
      del index
      with patched(name):
        return rl_step.train_phase(variant, state, generated, k)
    return fn

  runs = {}
  for name in names:
    runs[name] = StepOnly(run) if name == "step_only" else phase(name, variant_run(name, config, run))
  update_key = jax.random.key(123)
  check = numerical_check(runs, run.state, batches[0], update_key)
  states = {name: _copy_state(run.state) for name in names}
  for i, generated in enumerate(batches):  # warm-up: compiles every width met
    for name in names:
      _, states[name] = runs[name](states[name], i, generated, update_key)
  compiles_before = len(compiles)
  seconds = {name: [] for name in names}
  loads = [load_average()]
  for r in range(args.rounds):
    index = r % len(batches)
    order = names[r % len(names):] + names[:r % len(names)]
    for name in order:
      start = time.perf_counter()
      _, states[name] = runs[name](states[name], index, batches[index],
                                   jax.random.fold_in(update_key, r))
      seconds[name].append(time.perf_counter() - start)
    if r % 10 == 9:
      loads.append(load_average())
  loads.append(load_average())
  medians = {name: statistics.median(v) for name, v in seconds.items()}
  profiles = {}
  for name in filter(None, args.profile.split(",")):
    profiles[name] = profile_variant(runs[name], states[name], batches, update_key,
                                     args.profile_steps)
    states[name] = profiles[name].pop("state")
  first = batches[0].rollout
  prompt_mask = np.asarray(first.prompt_mask)
  real = [float(np.mean(np.concatenate([np.asarray(g.rollout.prompt_mask),
                                        np.asarray(g.rollout.response_mask)[:, :w[1]]], 1)))
          for g, w in zip(batches, widths)]
  report = {
      "config": args.config, "rounds": args.rounds, "batches": args.batches,
      "workload": {
          "prompts_per_step": run.rl_config.prompts_per_step,
          "group_size": run.rl_config.group_size, "responses": int(prompt_mask.shape[0]),
          "model": {k: getattr(run.model_config, k) for k in (
              "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
              "head_dim", "vocab_size", "remat")},
          "num_params": int(run.model_config.num_params()),
          "prompt_bucket": int(prompt_mask.shape[1]),
          "prompt_real_tokens_max": int(prompt_mask.sum(1).max()),
          "trained_widths_prompt_response": widths,
          "real_token_fraction_at_sampler_prompt_bucket": real,
          "microbatches": run.rl_config.microbatches, "epochs": run.rl_config.epochs,
          "minibatches": run.rl_config.minibatches},
      "median_seconds": medians,
      "ratio_to_baseline": {n: medians["baseline"] / medians[n] for n in names},
      "seconds": seconds,
      "numerical_check_vs_baseline": check,
      "compiles_after_warmup": len(compiles) - compiles_before,
      "profiles": profiles,
      "setup_seconds": setup_seconds,
      "load_average": loads, "machine": machine_info(),
  }
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, "train_phase_ab.json"), "w", encoding="utf-8") as f:
    json.dump(report, f, indent=2)
  print(f"B = {report['workload']['responses']}, prompt bucket {report['workload']['prompt_bucket']}"
        f" (real <= {report['workload']['prompt_real_tokens_max']}), trained widths {widths}; "
        f"load {loads[0]} -> {loads[-1]}; compiles after warm-up "
        f"{report['compiles_after_warmup']}")
  for name, prof in profiles.items():
    print(f"  profile {name}: wall {prof['wall_seconds_per_phase'] * 1e3:.1f} ms, op time "
          f"{prof['op_seconds_per_phase'] * 1e3:.1f} ms: " + ", ".join(
              f"{k} {v['share']:.0%}" for k, v in prof["categories"].items()))
  for name in names:
    print(f"  {name:12s} median {medians[name] * 1e3:8.1f} ms  baseline/variant "
          f"{report['ratio_to_baseline'][name]:.3f}  {check.get(name, '')}")
  return report


if __name__ == "__main__":
  main()
