"""A throughput profile estimated from the TPU compiler's cost model, not measured.

    from rlscale.aot.profile import estimate_profile
    profile = estimate_profile(config, "v5p:2x2x2", [8, 16, 32])   # throughput.json's schema

For each prompts-per-step P (B = P x G responses) the run's loop-free programs
(`aot.programs.step_programs`: prefill, one decode step, one update microbatch, the forward
passes) are compiled for the TPU slice on this CPU, and each program's seconds on one chip are a
roofline bound from the compiler's per-device figures (`cost_analysis()`):

    seconds = max(flops / peak_flops, bytes_accessed / hbm_bandwidth)      (per device)

with the chip's published peak (`CHIP_PEAKS`). A phase's seconds per RL step are the sum over
its programs of repeats x seconds: generation = prefill + Tr x decode step (the static sampler
attends over all Tp + Tr cache slots at every step and runs Tr steps when no row stops early);
training = update microbatches x one microbatch + the forward passes; reward = 0 (the verifier
runs on the host: not modelled). The cost model's own `optimal_seconds` is recorded beside
where it is positive (v5p; negative on v5e and v6e with libtpu 0.0.42.1).

This is a cost-model estimate (roofline bound, no host or scheduling overheads), not a
measurement: it leaves out host work (tokenizing, rewards, Python between steps), collectives
over the chips' interconnect (fsdp's gathers of the weights at every decode step), kernel launch
and pipeline bubbles, and assumes each program reaches its roofline. Its bytes are the
compiler's count of what each fused op reads and writes, which can exceed a program's minimal
HBM traffic.

The result has throughput.json's schema (`rlscale.scaling.throughput`: "batches" rows with
seconds per phase and step as {median, iqr, values} of one value, responses_per_s, tokens; and
"fits" from `throughput.fit_profile`), so `python -m rlscale.report --throughput=` and
`fit_profile` read it, plus "estimate": "cost model", the label, the topology, its chips and, per
batch, each program's flops, bytes, seconds and repeats. A batch with a program the compiler
refuses for memory (or whose peak with what the run keeps resident exceeds the HBM) is listed
in "not_fitting" with what needed how much, and left out of "batches" and the fits.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Optional, Sequence

from rlscale import outputs
from rlscale.aot import measure, models, programs as programs_lib, steps as steps_lib
from rlscale.aot.run import model_name
from rlscale.aot.topology import Topology, load_topology
from rlscale.runner.timing import PHASES
from rlscale.scaling import hyper
from rlscale.scaling.throughput import PROFILE_FILE, fit_profile, spread

ESTIMATE = "cost model"
LABEL = ("cost-model estimate (roofline bound, no host or scheduling overheads), "
         "not a measurement")
# Published peaks of one chip: (dense bfloat16 FLOP/s, HBM bytes/s), from Google Cloud's TPU
# system-architecture pages (cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e: "Peak compute per
# chip (bf16)" and "HBM bandwidth"): v4 275 TFLOP/s, 1,200 GB/s; v5e 197 TFLOP/s, 819 GB/s;
# v5p 459 TFLOP/s, 2,765 GB/s; v6e (Trillium) 918 TFLOP/s, 1,640 GB/s.
CHIP_PEAKS = {"v4": (275e12, 1200e9), "v5e": (197e12, 819e9), "v5p": (459e12, 2765e9),
              "v6e": (918e12, 1640e9)}
PEAKS_SOURCE = ("Google Cloud TPU system architecture pages (cloud.google.com/tpu/docs/v4, v5e, "
                "v5p, v6e): peak bf16 compute and HBM bandwidth per chip")
EXAMPLE_NAMES = "v5p:2x2x2, v5p:4x4x4, v5e:2x4, v6e:2x4, v4:2x2x1"


def roofline_seconds(flops: float, bytes_accessed: float, peak_flops: float,
                     hbm_bandwidth: float) -> float:
  """Seconds of a program on one device bounded by compute or memory, whichever is slower:
  max(flops / peak_flops, bytes_accessed / hbm_bandwidth).

  Args: flops (FLOP) and bytes_accessed (bytes) of one run of the program on one device;
    peak_flops (FLOP/s) and hbm_bandwidth (bytes/s) of that device.
  Raises: ValueError for negative work or a peak <= 0."""
  if flops < 0 or bytes_accessed < 0:
    raise ValueError(f"flops and bytes must be >= 0, got {flops}, {bytes_accessed}")
  if peak_flops <= 0 or hbm_bandwidth <= 0:
    raise ValueError(f"peaks must be > 0, got {peak_flops} FLOP/s, {hbm_bandwidth} B/s")
  return max(flops / peak_flops, bytes_accessed / hbm_bandwidth)


def check_topology_name(name: str) -> str:
  """The chip of a topology name "<chip>:<shape>" whose peaks `CHIP_PEAKS` has.

  Raises: ValueError, one line naming the chips and examples, for any other name."""
  chip = name.split(":")[0] if isinstance(name, str) and ":" in name else None
  if chip not in CHIP_PEAKS:
    raise ValueError(f"--topology={name!r}: a cost-model profile is for a TPU slice "
                     f"<chip>:<shape> with chip one of {', '.join(CHIP_PEAKS)} (e.g. "
                     f"{EXAMPLE_NAMES})")
  return chip


def device_peaks(topology: Topology) -> tuple[float, float]:
  """(FLOP/s, HBM bytes/s) of one device of `topology`: the chip's `CHIP_PEAKS` shared by the
  devices of a chip (v4's two cores are two devices; the cost model's figures are per device).

  Raises: ValueError for a chip without published peaks here (e.g. a "local" GPU)."""
  if topology.chip not in CHIP_PEAKS:
    raise ValueError(f"no published peaks for {topology.kind!r} ({topology.name}); known chips: "
                     f"{', '.join(CHIP_PEAKS)}")
  flops, bandwidth = CHIP_PEAKS[topology.chip]
  return flops / topology.devices_per_chip, bandwidth / topology.devices_per_chip


def program_cost(program: programs_lib.Program, result: measure.StepResult,
                 peaks: tuple[float, float]) -> dict[str, Any]:
  """One program's figures per device: flops and bytes of one run and per RL step (x repeats),
  its roofline seconds per run and per step, which bound it hit ("compute" / "memory"), the
  cost model's optimal seconds (None where not valid), its peak bytes against the HBM, whether
  it fits, and the compiler's refusal when it does not (then no seconds)."""
  row = {"phase": program.phase, "repeats": program.repeats, "repeats_why": program.why,
         "detail": result.detail, "fits": result.fits, "peak_bytes": result.peak_bytes,
         "hbm_bytes": result.hbm_bytes, "compile_seconds": result.compile_seconds,
         "flops": result.flops, "bytes_accessed": result.bytes_accessed,
         "cost_model_seconds": result.seconds, "cost_model_seconds_note": result.seconds_note}
  if not result.compiled:
    return {**row, "message": result.message}
  seconds = roofline_seconds(result.flops or 0.0, result.bytes_accessed or 0.0, *peaks)
  compute = (result.flops or 0.0) / peaks[0]
  return {**row, "seconds": seconds, "bound": "compute" if compute >= seconds else "memory",
          "flops_per_step": program.repeats * (result.flops or 0.0),
          "bytes_per_step": program.repeats * (result.bytes_accessed or 0.0),
          "seconds_per_step": program.repeats * seconds}


def _phase_sum(costs: dict[str, dict], key: str) -> dict[str, Optional[float]]:
  """{phase: sum of costs[*][key] over its programs} (0 for a phase without programs; None when
  a program of it lacks the figure)."""
  out = {}
  for phase in PHASES:
    values = [c.get(key) for c in costs.values() if c["phase"] == phase]
    out[phase] = None if any(v is None for v in values) else float(sum(values))
  return out


def batch_row(prompts: int, group: int, prompt_len: int, response_len: int,
              costs: dict[str, dict]) -> dict[str, Any]:
  """throughput.json's row of one batch from its programs' costs (all compiled): seconds per
  phase and step (one value each; reward 0: host-side, not modelled), responses/s, tokens per
  step (every response Tr tokens; trained: B x (Tp + Tr), an upper bound), the programs, and
  per-phase flops, bytes and the cost model's seconds (x repeats) where valid."""
  batch = prompts * group
  seconds = _phase_sum(costs, "seconds_per_step")
  seconds["step"] = sum(seconds[p] for p in PHASES)
  optimal = {p: (None if any(c["cost_model_seconds"] is None for c in costs.values()
                              if c["phase"] == p) else
                 float(sum(c["repeats"] * c["cost_model_seconds"] for c in costs.values()
                           if c["phase"] == p))) for p in PHASES}
  generated, trained = batch * response_len, batch * (prompt_len + response_len)
  return {
      "prompts_per_step": prompts, "group_size": group, "batch_size": batch,
      "warmup": 0, "repeats": 1, "fits": True,
      "seconds": {p: spread([s]) for p, s in seconds.items()},
      "compile_seconds": sum(c["compile_seconds"] for c in costs.values()),
      "responses_per_s": batch / seconds["step"],
      "responses_per_s_by_phase": {p: batch / seconds[p] if seconds[p] else None for p in PHASES},
      "tokens_generated_per_step": float(generated), "tokens_trained_per_step": float(trained),
      "generated_tokens_per_s": generated / seconds["generation"],
      "trained_tokens_per_s": trained / seconds["training"],
      "response_length_mean": float(response_len),
      "generation_share": seconds["generation"] / seconds["step"],
      "flops_by_phase": _phase_sum(costs, "flops_per_step"),
      "bytes_by_phase": _phase_sum(costs, "bytes_per_step"),
      "cost_model_seconds_by_phase": optimal,
      "device_peak_bytes": max(c["peak_bytes"] for c in costs.values()),
      "programs": costs,
  }


def _microbatch_update(config, topology: Topology, model_config, run: steps_lib.RunSteps,
                       processes: Optional[int]) -> tuple[Optional[int], Optional[Any]]:
  """(rows of one update microbatch, the update `Step` of one such microbatch: the run at
  P = rows / G with one epoch, minibatch and microbatch), or (rows, None) when the rows do not
  hold whole groups of G or their prompts do not split over the processes (then the run's own
  update step serves, its scan counted once)."""
  rl = run.rl
  rows = rl.prompts_per_step * rl.group_size // (rl.minibatches * run.update_microbatches)
  if rows % rl.group_size:
    return rows, None
  one = hyper.apply_overrides(config, {"rl.prompts_per_step": rows // rl.group_size,
                                       "rl.microbatches": 1, "rl.minibatches": 1, "rl.epochs": 1})
  try:
    small = steps_lib.build_steps(one, topology.devices, model_config, platform="tpu",
                                  eval_steps=False, processes=processes)
  except ValueError:  # the run itself was accepted: only the smaller batch's layout can fail
    return rows, None
  return rows, next(s for s in small.steps if s.name == "update")


def _batch_programs(config, topology: Topology, model_config, processes: Optional[int],
                    ) -> tuple[steps_lib.RunSteps, list, Optional[int]]:
  """(the run's steps, its loop-free programs, rows of the update microbatch when the update
  program is one microbatch's (epochs x minibatches x K of them per step), else None)."""
  run = steps_lib.build_steps(config, topology.devices, model_config, platform="tpu",
                              eval_steps=False, processes=processes)
  programs = programs_lib.step_programs(run)
  rows, update = _microbatch_update(config, topology, model_config, run, processes)
  if update is None:
    return run, programs, None
  programs = [p if p.step.name != "update" else programs_lib.Program(
      programs_lib.one_chunk_step(update), p.phase, p.repeats,
      p.why + f" of {rows} rows, each compiled alone") for p in programs]
  return run, programs, rows


def _not_fitting(prompts: int, group: int, costs: dict[str, dict]) -> dict[str, Any]:
  """The "not_fitting" entry of a batch: the programs that do not fit, what each needs."""
  return {"prompts_per_step": prompts, "batch_size": prompts * group,
          "programs": {name: {k: c.get(k) for k in ("detail", "peak_bytes", "hbm_bytes",
                                                     "message")}
                       for name, c in costs.items() if not c["fits"]}}


def estimate_profile(config, topology: str | Topology, prompts_per_step: Sequence[int], *,
                     shape: Optional[str] = None, microbatch_rows: Optional[int] = None,
                     processes: Optional[int] = None, name: str = "",
                     log: Callable[[str], None] = print) -> dict[str, Any]:
  """The cost-model throughput profile of `config` on `topology` at each P (see the module
  docstring for the estimate and its limits).

  Args:
    config: a run config (experiments/configs/*.py) with its overrides (its mesh over the
      slice's devices).
    topology: a TPU slice name "<chip>:<shape>" (chip in `CHIP_PEAKS`) or a loaded Topology.
    prompts_per_step: the P values (ints >= 1); B = P x rl.group_size.
    shape: a release shape replacing the config's model (`models.QWEN3_SHAPES`), or None.
    microbatch_rows: rows of one update microbatch at every batch (rl.microbatches = B /
      (rl.minibatches x microbatch_rows)), or None for the config's rl.microbatches.
    processes: the run's processes on the slice (`steps.build_steps`; None: libtpu's hosts).
    name: the profile's name (e.g. the config file).
    log: called with a progress line before each compile.
  Returns: the profile dict (throughput.json's schema plus the estimate's fields).
  Raises:
    ValueError: an unknown topology (one line naming the chips), an empty or bad P list,
      microbatch_rows that does not divide a minibatch, or a config the run would refuse.
    topology.TopologyUnavailable: libtpu cannot load here.
    jax.errors.JaxRuntimeError: a program the compiler cannot compile for a reason other than
      memory.
  """
  if not prompts_per_step or any(isinstance(p, bool) or not isinstance(p, int) or p < 1
                                 for p in prompts_per_step):
    raise ValueError(f"--prompts_per_step must list integers >= 1, got {list(prompts_per_step)}")
  if isinstance(topology, str):
    check_topology_name(topology)
    topology = load_topology(topology)
  peaks = device_peaks(topology)
  model_config = models.aot_model_config(config, platform="tpu", shape=shape)
  start = time.perf_counter()
  rows, not_fitting, cache, run = [], [], {}, None
  for prompts in sorted(set(prompts_per_step)):
    batch_config = _batch_config(config, prompts, microbatch_rows)
    run, programs, mb_rows = _batch_programs(batch_config, topology, model_config, processes)
    costs = {}
    for program in programs:
      # One microbatch's update is the same program at every batch: compiled once.
      key = mb_rows if program.step.name == "update" and mb_rows else None
      result = cache.get(key)
      if result is None:
        log(f"profile: P={prompts}: compiling {program.step.name} for {topology.name}: "
            f"{program.step.detail}")
        result = measure.compile_step(program.step, topology)
        if key is not None:
          cache[key] = result
      costs[program.step.name] = program_cost(program, result, peaks)
    group = run.rl.group_size
    if all(c["fits"] for c in costs.values()):
      rows.append(batch_row(prompts, group, run.prompt_len, run.response_len, costs))
    else:
      not_fitting.append(_not_fitting(prompts, group, costs))
  return {
      "name": name, "estimate": ESTIMATE, "label": LABEL, "backend": "tpu",
      "device": f"{topology.name}: {topology.chips} x TPU {topology.chip}, cost-model estimate",
      "topology": topology.name, "chips": topology.chips, "chip": topology.chip,
      "num_devices": len(topology.devices),
      "peak_flops_per_device": peaks[0], "hbm_bytes_per_s_per_device": peaks[1],
      "peaks_source": PEAKS_SOURCE, "hbm_bytes": topology.hbm_bytes,
      "model": model_name(config, shape), "layers": model_config.num_layers,
      "mesh": None if run is None else dict(run.mesh.shape),
      "prompt_len": None if run is None else run.prompt_len,
      "response_len": None if run is None else run.response_len,
      "microbatch_rows": microbatch_rows, "processes": None if run is None else run.processes,
      "reward_seconds": "0: rewards are computed on the host, not modelled",
      "batches": rows, "not_fitting": not_fitting, "fits": fit_profile(rows),
      "seconds": time.perf_counter() - start,
  }


def _batch_config(config, prompts: int, microbatch_rows: Optional[int]):
  """config at P = prompts, with rl.microbatches from microbatch_rows when given.

  Raises: ValueError when microbatch_rows does not divide a minibatch's rows."""
  overrides: dict[str, Any] = {"rl.prompts_per_step": prompts}
  if microbatch_rows is not None:
    minibatch = prompts * config.rl.group_size // config.rl.minibatches
    if microbatch_rows < 1 or minibatch % microbatch_rows:
      raise ValueError(f"--microbatch_rows={microbatch_rows} must divide the {minibatch} rows of "
                       f"a minibatch at prompts_per_step={prompts}")
    overrides["rl.microbatches"] = minibatch // microbatch_rows
  return hyper.apply_overrides(config, overrides)


def write_profile(profile: dict[str, Any], out_dir: str) -> dict[str, Any]:
  """Writes out_dir/throughput.json and, with two or more batches, throughput.png
  (`scaling.figures.throughput_profile_figure`); returns the profile with "plot" (or None)."""
  outputs.write_json(os.path.join(out_dir, PROFILE_FILE), profile, indent=2)
  plot = None
  if profile["batches"]:
    from rlscale.scaling import figures  # pylint: disable=g-import-not-at-top
    plot = figures.throughput_profile_figure(profile, out_dir)
  return {**profile, "plot": plot}
