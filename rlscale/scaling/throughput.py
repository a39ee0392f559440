"""Throughput profile q(B): seconds per RL step by phase at each batch, measured alone.

For each prompts-per-step P (B = P * G responses) the run is built exactly as the runner builds it
(`rlscale.runner.builders.build_run`, warm start from the cache) and RL steps are taken with the
runner's own step (`rlscale.runner.rl_step.rl_step`: sampling, rewards, advantages, update) and timed
by the runner's clock (`rlscale.runner.timing.RunClock`: execution per phase, JAX compilation
apart), so the profile times the code the sweep runs. Compile seconds are reported apart; the
first `warmup` steps are dropped anyway (first calls also warm caches); the next `repeats` steps
give the steady-state median and interquartile range per phase. Batches run in increasing order in one process, so the peak resident memory after
a batch is that batch's peak (it only grows).

Fits (rlscale.scaling.fits): generation seconds per step = a + b * B, where `a` is the cost every
decode step pays whatever the batch (reading all weights: bandwidth-bound) and `b` the per-row
cost; B = a / b is where generation stops being bandwidth-bound. Training seconds per step =
c + d * tokens trained. End-to-end seconds per step = alpha + beta * B gives q(B) = B / (alpha +
beta * B) for the report's time-optimal batch.
"""

from __future__ import annotations

import os
import platform
import resource
import time
from typing import Any, Callable, Sequence

import jax
import numpy as np

from rlscale import outputs
from rlscale.runner.timing import PHASES
from rlscale.scaling import fits
from rlscale.scaling import hyper

PROFILE_FILE = "throughput.json"


def spread(values: Sequence[float]) -> dict[str, Any]:
  """{"median", "iqr": [q25, q75], "values"} of repeated timings (seconds)."""
  v = np.asarray(values, np.float64)
  return {"median": float(np.median(v)),
          "iqr": [float(np.percentile(v, 25)), float(np.percentile(v, 75))],
          "values": [float(x) for x in v]}


def _device_peak_bytes() -> int | None:
  stats = jax.local_devices()[0].memory_stats() if hasattr(jax.local_devices()[0], "memory_stats") else None
  return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


def measure_batch(config, prompts_per_step: int, workdir: str, *, warmup: int = 2,
                  repeats: int = 5, log: Callable[[str], None] = print) -> dict[str, Any]:
  """Times `warmup + repeats` RL steps of `config` at P = prompts_per_step (see module doc).

  Returns one row of throughput.json: seconds per phase and per step (median, IQR, values),
  compile seconds, responses/s, generated and trained tokens/s, memory.
  Raises ValueError for warmup < 1 or repeats < 1."""
  from rlscale.runner import builders  # pylint: disable=g-import-not-at-top
  from rlscale.runner.rl_step import rl_step  # pylint: disable=g-import-not-at-top
  from rlscale.runner.timing import RunClock  # pylint: disable=g-import-not-at-top
  if warmup < 1 or repeats < 1:
    raise ValueError(f"--warmup and --repeats must be >= 1, got {warmup}, {repeats}")
  config = hyper.apply_overrides(config, {"rl.prompts_per_step": prompts_per_step})
  run = builders.build_run(config, workdir, log=log)
  state = run.state
  counters = {"samples": 0, "prompts": 0}
  key = jax.random.key(config.seed)
  clock = RunClock()  # the runner's clock: phase execution seconds, compilation apart
  clock.record()
  records = []
  for i in range(warmup + repeats):
    record, state = rl_step(run, state, jax.random.fold_in(key, i), counters, clock)
    record.update(clock.record())
    records.append(record)
  steady = records[warmup:]
  batch = prompts_per_step * config.rl.group_size
  seconds = {p: spread([r[f"time/{p}"] for r in steady]) for p in PHASES}
  # End to end: the step's wall seconds less any compilation (host bookkeeping included).
  seconds["step"] = spread([r["time/total"] - r["time/compile"] for r in steady])
  generated = float(np.median([r["tokens/generated"] for r in steady]))
  trained = float(np.median([r["tokens/trained"] for r in steady]))
  row = {
      "prompts_per_step": prompts_per_step, "group_size": config.rl.group_size,
      "batch_size": batch, "warmup": warmup, "repeats": repeats, "seconds": seconds,
      "compile_seconds": sum(r["time/compile"] for r in records),
      "responses_per_s": batch / seconds["step"]["median"],
      "responses_per_s_by_phase": {p: batch / seconds[p]["median"] if seconds[p]["median"] else None
                                   for p in PHASES},
      "tokens_generated_per_step": generated, "tokens_trained_per_step": trained,
      "generated_tokens_per_s": generated / seconds["generation"]["median"],
      "trained_tokens_per_s": trained / seconds["training"]["median"],
      "response_length_mean": float(np.mean([r["response/length_mean"] for r in steady])),
      # ru_maxrss is in KiB on Linux: the process's peak so far (batches run smallest first).
      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
      "device_peak_bytes": _device_peak_bytes(),
  }
  log(f"throughput: B={batch}: {seconds['step']['median']:.3f} s/step (generation "
      f"{seconds['generation']['median']:.3f}, reward {seconds['reward']['median']:.3f}, training "
      f"{seconds['training']['median']:.3f}), {row['responses_per_s']:.1f} responses/s, compile "
      f"{row['compile_seconds']:.1f} s")
  return row


def fit_profile(rows: Sequence[dict]) -> dict[str, Any]:
  """The cost-model fits of a profile (see module doc); {} with fewer than 2 batch sizes."""
  if len({r["batch_size"] for r in rows}) < 2:
    return {}
  batches = [r["batch_size"] for r in rows]
  gen = fits.fit_line(batches, [r["seconds"]["generation"]["median"] for r in rows])
  train = fits.fit_line([r["tokens_trained_per_step"] for r in rows],
                        [r["seconds"]["training"]["median"] for r in rows])
  step = fits.fit_line(batches, [r["seconds"]["step"]["median"] for r in rows])
  rates = {r["batch_size"]: r["batch_size"] / r["seconds"]["generation"]["median"] for r in rows}
  until = fits.bandwidth_bound_until(gen)
  return {
      "generation": {**gen._asdict(), "unit": "s per step = intercept + slope * B",
                     "bandwidth_bound_until_batch": until,
                     # Only a crossover inside the batches measured is a finding; beyond them the
                     # line is an extrapolation.
                     "bandwidth_bound_within_measured": bool(
                         until is not None and min(batches) <= until <= max(batches))},
      "training": {**train._asdict(), "unit": "s per step = intercept + slope * tokens trained"},
      "step": {**step._asdict(), "unit": "s per step = intercept + slope * B"},
      "generation_throughput_ratio": rates[max(rates)] / rates[min(rates)],
  }


def profile(config, prompts_per_step: Sequence[int], out_dir: str, *, warmup: int = 2,
            repeats: int = 5, name: str = "", log: Callable[[str], None] = print) -> dict[str, Any]:
  """Measures every batch (smallest first), fits, writes out_dir/throughput.json and
  throughput.png; returns the profile dict. The warm start is cached in config.sft.cache_dir,
  else out_dir/sft. A profile that fails before its throughput.json leaves out_dir as it was
  (removed when it created it), except a trained warm start in out_dir/sft
  (`rlscale.outputs.removed_on_failure`)."""
  if not prompts_per_step or any(p < 1 for p in prompts_per_step):
    raise ValueError(f"--prompts_per_step must list integers >= 1, got {list(prompts_per_step)}")
  from rlscale.runner.run_dir import holds_results  # pylint: disable=g-import-not-at-top

  def measured(folder):  # a profile written, or a warm start trained
    return os.path.isfile(os.path.join(folder, PROFILE_FILE)) or holds_results(folder)
  with outputs.removed_on_failure(out_dir, keep=measured):
    return _profile(config, prompts_per_step, out_dir, warmup=warmup, repeats=repeats, name=name,
                    log=log)


def _profile(config, prompts_per_step, out_dir, *, warmup, repeats, name, log) -> dict[str, Any]:
  t0 = time.perf_counter()
  rows = [measure_batch(config, p, out_dir, warmup=warmup, repeats=repeats, log=log)
          for p in sorted(set(prompts_per_step))]
  result = {
      "name": name, "backend": jax.default_backend(), "device": str(jax.local_devices()[0]),
      "num_devices": jax.local_device_count(), "cpu_count": os.cpu_count(),
      "machine": platform.processor() or platform.machine(),
      "batches": rows, "fits": fit_profile(rows), "seconds": time.perf_counter() - t0,
  }
  outputs.write_json(os.path.join(out_dir, PROFILE_FILE), result, indent=2)
  from rlscale.scaling import figures  # pylint: disable=g-import-not-at-top
  result["plot"] = figures.throughput_profile_figure(result, out_dir)
  return result
