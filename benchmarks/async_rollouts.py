"""Step throughput of asynchronous rollouts (rl.max_off_policy_steps = 1) against the synchronous
loop (k = 0) on the main job's smoke config, runs interleaved.

  python benchmarks/async_rollouts.py --out DIR [--rounds 3] [--steps 24]
      [--variants k0,k1_thread,k1_dispatch] [--config experiments/configs/default.py:smoke]
      [--sft_cache DIR] [--set FIELD=VALUE ...]
  python benchmarks/async_rollouts.py --out DIR --phases 40 [--config ...] [--sft_cache DIR]

Each round runs every variant once (the order rotates each round), each a fresh
`python -m rlscale.main` process in its own workdir, the smoke config with train.total_steps =
--steps and evaluation and checkpoints only at the end (so steps are steps), the SFT warm start
cached in --sft_cache (trained once, before the rounds). Variants:
  k0           the synchronous loop (rl.max_off_policy_steps = 0).
  k1_thread    k = 1, rollout.async_overlap = "thread" (a rollout thread).
  k1_dispatch  k = 1, rollout.async_overlap = "dispatch" (JAX's asynchronous dispatch, one thread).
Both k = 1 variants use the default correction (decoupled PPO, so rl.old_logp = "recompute":
one more forward per step than k = 0); `--set rl.off_policy_correction=none` compares the
overlap alone.

Per run, from metrics.jsonl, over the steady steps (every step after the first two, whose
compiles and warm-up differ): seconds per step (time/total less time/compile, evaluation and
checkpointing: none of those fall on steady steps here), responses per second, and the phase
split per step: generation (k = 0: time/generation + time/reward; k = 1: the rollout side's
rollout/generation_seconds + rollout/reward_seconds, overlapped), training (time/training) and
waiting (k = 1: rollout/wait_seconds, the main thread idle for its batch; k = 0: none).
Writes DIR/async_rollouts.json (every run's steps, per-variant medians over rounds, each k = 1
variant's throughput ratio to k0, load averages before and after) and prints a table.

With --phases N, instead: whether the two phases overlap on this machine at all, measured in
one process on the config's own Run (`builders.build_run`, warm start from --sft_cache): N
repetitions, each timing (order rotating) a rollout batch alone (`collect_rollouts`), an update
alone (`rl_step.train_phase`), both at once with the rollout on a thread (the "thread" overlap)
and both at once with the update dispatched first and the batch drawn in the main thread before
its metrics are fetched (the "dispatch" overlap). Overlap efficiency = median(alone sum) /
median(both): 1 = no overlap (the phases take turns), 2 = perfect. Writes
DIR/async_phases.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import jax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable=wrong-import-position
from benchmarks.common import load_average, machine_info
from rlscale.runner import builders
from rlscale.runner.async_rollouts import _Policy, snapshot
from rlscale.runner.config_files import load_config_file
from rlscale.runner.rl_step import finish_update, start_update, train_phase
from rlscale.runner.rollouts import collect_rollouts
from rlscale.runner.timing import RunClock

VARIANTS = {
    "k0": ["--config.rl.max_off_policy_steps=0"],
    "k1_thread": ["--config.rl.max_off_policy_steps=1", "--config.rollout.async_overlap=thread"],
    "k1_dispatch": ["--config.rl.max_off_policy_steps=1",
                    "--config.rollout.async_overlap=dispatch"],
}
WARM_STEPS = 2  # steps left out of the steady state: compiles, first batch, first evaluation


def run_once(config: str, workdir: str, steps: int, sft_cache: str, extra: list[str]) -> list:
  """One `rlscale.main` run; its metrics.jsonl records (step >= 1)."""
  cmd = [sys.executable, "-m", "rlscale.main", f"--config={config}", f"--workdir={workdir}",
         f"--config.train.total_steps={steps}", f"--config.train.eval_every={steps}",
         f"--config.train.checkpoint_every={steps}", f"--config.sft.cache_dir={sft_cache}",
         *extra]
  subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                 env={**os.environ, "JAX_PLATFORMS": "cpu"})
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    return [r for r in map(json.loads, f) if r["step"] >= 1]


def step_split(record: dict) -> dict:
  """Seconds of one step: total (less compile / evaluation / checkpointing) and its phases."""
  total = record["time/total"] - sum(record.get(f"time/{p}", 0.0)
                                     for p in ("compile", "evaluation", "checkpointing"))
  if "rollout/wait_seconds" in record:
    generation = record["rollout/generation_seconds"] + record["rollout/reward_seconds"]
    waiting = record["rollout/wait_seconds"]
  else:
    generation = record["time/generation"] + record["time/reward"]
    waiting = 0.0
  return {"step_s": total, "generation_s": generation, "training_s": record["time/training"],
          "waiting_s": waiting}


def summarize(records: list, batch: int) -> dict:
  """Medians over the steady steps of a run."""
  steady = [step_split(r) for r in records[WARM_STEPS:]]
  out = {key: statistics.median(s[key] for s in steady) for key in steady[0]}
  out["responses_per_s"] = batch / out["step_s"]
  return out


def phase_overlap(config_arg: str, sft_cache: str, reps: int, out: str) -> dict:
  """The --phases measurement (module docstring)."""
  path, _, arg = config_arg.partition(":")
  config = load_config_file(path, arg or None)
  config.sft.cache_dir = sft_cache
  run = builders.build_run(config, tempfile.mkdtemp(prefix="async_phases_"), log=lambda _: None)
  key, clock, box = jax.random.key(0), RunClock(), {"state": run.state}

  def generate():
    return collect_rollouts(run, _Policy(box["params"]), key, {"samples": 0, "prompts": 0},
                            clock)[0]

  def update(generated):
    _, box["state"] = train_phase(run, box["state"], generated, key)

  def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0

  def both_thread(generated):
    worker = threading.Thread(target=generate)
    worker.start()
    update(generated)
    worker.join()

  def both_dispatch(generated):
    pending = start_update(run, box["state"], generated, key)
    generate()
    _, box["state"] = finish_update(*pending)

  box["params"] = snapshot(run.state.params)
  generated = generate()
  for fn in (lambda: update(generated), lambda: both_thread(generated),
             lambda: both_dispatch(generated)):
    fn()  # compiles
  parts = {"generation": generate, "update": lambda: update(generated),
           "thread": lambda: both_thread(generated), "dispatch": lambda: both_dispatch(generated)}
  seconds = {name: [] for name in parts}
  for rep in range(reps):
    names = list(parts)
    for name in names[rep % 4:] + names[:rep % 4]:
      seconds[name].append(timed(parts[name]))
  median = {name: statistics.median(v) for name, v in seconds.items()}
  alone = median["generation"] + median["update"]
  result = {"config": config_arg, "reps": reps, "median_s": median,
            "overlap_efficiency": {m: alone / median[m] for m in ("thread", "dispatch")},
            "seconds": seconds, "load": load_average(), "machine": machine_info()}
  with open(os.path.join(out, "async_phases.json"), "w", encoding="utf-8") as f:
    json.dump(result, f, indent=2)
  efficiency = result["overlap_efficiency"]
  print(f"alone: generation {median['generation']:.4f} s + update {median['update']:.4f} s = "
        f"{alone:.4f} s; together: thread {median['thread']:.4f} s (x{efficiency['thread']:.2f}), "
        f"dispatch {median['dispatch']:.4f} s (x{efficiency['dispatch']:.2f}); load "
        f"{load_average()}")
  return result


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", required=True)
  parser.add_argument("--config", default="experiments/configs/default.py:smoke")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--steps", type=int, default=24)
  parser.add_argument("--variants", default=",".join(VARIANTS))
  parser.add_argument("--sft_cache", default=None)
  parser.add_argument("--set", action="append", default=[],
                      help="an extra --config.FIELD=VALUE for every variant, e.g. "
                           "rl.off_policy_correction=none")
  parser.add_argument("--phases", type=int, default=0,
                      help="instead of runs: N repetitions of the in-process overlap measurement")
  args = parser.parse_args(argv)
  os.makedirs(args.out, exist_ok=True)
  if args.phases:
    return phase_overlap(args.config, args.sft_cache or tempfile.mkdtemp(prefix="sft_"),
                         args.phases, args.out)
  variants = args.variants.split(",")
  extra = [f"--config.{s}" for s in args.set]
  scratch = tempfile.mkdtemp(prefix="async_rollouts_")
  sft_cache = args.sft_cache or os.path.join(scratch, "sft")
  loads = {"before": load_average()}
  # The warm start, trained once (cached): every timed run then loads it.
  run_once(args.config, os.path.join(scratch, "warm"), 1, sft_cache, extra)
  runs = []
  for round_index in range(args.rounds):
    order = variants[round_index % len(variants):] + variants[:round_index % len(variants)]
    for name in order:
      workdir = os.path.join(scratch, f"{name}_{round_index}")
      t0 = time.perf_counter()
      records = run_once(args.config, workdir, args.steps, sft_cache, VARIANTS[name] + extra)
      batch = records[0]["samples"]
      summary = summarize(records, batch)
      runs.append({"variant": name, "round": round_index, "wall_s": time.perf_counter() - t0,
                   "load": load_average(), **summary,
                   "steps": [step_split(r) for r in records]})
      print(f"round {round_index} {name:12s} {summary['step_s']:.3f} s/step "
            f"(generation {summary['generation_s']:.3f}, training {summary['training_s']:.3f}, "
            f"waiting {summary['waiting_s']:.3f}) load {load_average()[0]}", flush=True)
  loads["after"] = load_average()
  medians = {}
  for name in variants:
    mine = [r for r in runs if r["variant"] == name]
    medians[name] = {key: statistics.median(r[key] for r in mine)
                     for key in ("step_s", "responses_per_s", "generation_s", "training_s",
                                 "waiting_s")}
  ratios = {}
  if "k0" in medians:
    # Paired per round: each round's k = 1 run against the same round's k0 run.
    for name in variants:
      if name != "k0":
        per_round = [next(r for r in runs if r["variant"] == "k0" and r["round"] == i)["step_s"]
                     / next(r for r in runs if r["variant"] == name and r["round"] == i)["step_s"]
                     for i in range(args.rounds)]
        ratios[name] = {"throughput_ratio_median": statistics.median(per_round),
                        "per_round": per_round}
  result = {"config": args.config, "steps": args.steps, "rounds": args.rounds, "extra": extra,
            "medians": medians, "throughput_vs_k0": ratios, "runs": runs, "load": loads,
            "machine": machine_info()}
  with open(os.path.join(args.out, "async_rollouts.json"), "w", encoding="utf-8") as f:
    json.dump(result, f, indent=2)
  for name, m in medians.items():
    ratio = ratios.get(name, {}).get("throughput_ratio_median")
    print(f"{name:12s} {m['step_s']:.3f} s/step, {m['responses_per_s']:.1f} responses/s, "
          f"generation {m['generation_s']:.3f}, training {m['training_s']:.3f}, waiting "
          f"{m['waiting_s']:.3f}" + (f", throughput x{ratio:.2f} vs k0" if ratio else ""))
  return result


if __name__ == "__main__":
  main()
