"""The per-device table of a run's compiled steps, the one-line verdict for a step that does not
fit, and the JSON rows (`benchmarks/results/`-style: one row per model x step x topology).

Every memory figure is per device (one chip on v5e, v5p and v6e; one core on v4) in GiB
(2^30 bytes). Peak = the program's own bytes (arguments + outputs not aliased to donated
arguments + temporaries) + what the run keeps resident beside it (e.g. the Adam moments while
the sampler runs).
"""

from __future__ import annotations

from typing import Optional, Sequence

from rlscale.aot.measure import StepResult, gib
from rlscale.aot.steps import RunSteps
from rlscale.aot.topology import GIB, LOCAL, Topology

MIB = 2 ** 20

COLUMNS = ("step", "rows x tokens", "args", "temp", "out", "program", "resident", "peak",
           "HBM", "fits", "flops", "bytes accessed", "cost s", "compile s")
COST_NOTE = ("flops, bytes accessed and cost s: the compiler's cost model, every loop body "
             "counted once (one microbatch of the update, the sampler's prefill plus one "
             "decode step, one log-prob chunk); a roofline bound, not a measurement")


def mesh_text(mesh) -> str:
  """{data: 8, fsdp: 1, tensor: 1} of a Mesh."""
  return "{" + ", ".join(f"{k}: {v}" for k, v in mesh.shape.items()) + "}"


def model_text(run: RunSteps, model_name: str) -> str:
  """One line on the compiled policy: name, parameters, layers, dtypes, remat, kernels."""
  c = run.model_config
  n = c.num_params()
  count = f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"
  return (f"{model_name}: {count} parameters, {c.num_layers} layers, "
          f"{c.dtype} compute, float32 master weights + Adam, remat "
          f"{'on' if c.remat else 'off'}, attention {c.attention_impl}")


def _flag(field: str, value) -> str:
  """The command-line override `--config.<field>=<value>`."""
  return f"--config.{field}={value}"


def advice(result: StepResult, run: RunSteps, topology: Topology) -> str:
  """What to change so `result`'s step fits, cheapest first, each with its override: remat
  (the update), more fsdp (parameters and Adam moments sharded), bfloat16 compute, fewer rows
  at a time (microbatches; the sampler's prompts or responses), tensor parallelism, a larger
  slice. Only changes the run can make are named (e.g. no remat when it is on)."""
  mesh, model, rl = run.mesh.shape, run.model_config, run.rl
  devices = len(topology.devices)
  tensor, expert = mesh.get("tensor", 1), mesh.get("expert", 1)
  parts = mesh.get("data", 1) * mesh.get("fsdp", 1) * expert  # the batch axes
  rows_per_part = rl.prompts_per_step * rl.group_size // parts
  options = []
  if result.kind == "update" and not model.remat:
    options.append(f"remat ({_flag('model.remat', True)})")
  if mesh.get("fsdp", 1) * tensor * expert < devices:
    options.append(f"more fsdp, parameters and Adam moments sharded over all {devices} devices "
                   f"({_flag('mesh.data', 1)} {_flag('mesh.fsdp', -1)})")
  if model.dtype == "float32":
    options.append(f"bfloat16 compute ({_flag('model.dtype', 'bfloat16')})")
  if result.kind in ("update", "pass"):
    k = 2 * (run.update_microbatches if result.kind == "update" else run.pass_microbatches)
    minibatches = rl.minibatches if result.kind == "update" else 1
    if rows_per_part % (k * minibatches) == 0:
      options.append(f"fewer rows per microbatch ({_flag('rl.microbatches', k)})")
  elif result.step == "sample":
    options.append(f"fewer rows per call ({_flag('rl.prompts_per_step', rl.prompts_per_step // 2)})"
                   " or shorter responses "
                   f"({_flag('rollout.max_new_tokens', max(1, run.response_len // 2))})")
  else:
    options.append(f"fewer held-out rows per call ({_flag('task.eval_size', '...')}, "
                   f"{_flag('eval.pass_k', '...')})")
  if tensor == 1 and model.num_kv_heads % 2 == 0:
    options.append(f"tensor parallelism, heads, MLP, vocabulary and the KV cache's heads "
                   f"sharded ({_flag('mesh.tensor', 2)})")
  options.append("a larger slice")
  return "; ".join(options)


def verdict_line(result: StepResult, run: RunSteps, topology: Topology) -> Optional[str]:
  """One line for a step that does not fit (None when it fits): the step, what it needs per
  device, what a device has, and `advice`."""
  if result.fits:
    return None
  where = f"{topology.name} ({topology.kind})"
  hbm = f"a device has {gib(result.hbm_bytes)} GiB"
  if not result.compiled:
    need = (f"the compiler refused it: needs {gib(result.program_bytes)} GiB per device"
            if result.program_bytes else "the compiler refused it for memory")
    if result.resident_bytes:
      need += (f", plus {gib(result.resident_bytes)} GiB the run keeps resident "
               f"({result.resident_what})")
  else:
    need = (f"needs {gib(result.peak_bytes)} GiB per device ({gib(result.program_bytes)} for "
            f"the program + {gib(result.resident_bytes)} the run keeps resident: "
            f"{result.resident_what})")
  return (f"{result.step} does not fit {where}: {need}; {hbm}. Try: "
          f"{advice(result, run, topology)}")


def _size(n: Optional[float], unit: int) -> str:
  """n bytes in `unit` (GIB or MIB) with 2 decimals ("-" for None)."""
  return "-" if n is None else f"{n / unit:.2f}"


def _row(result: StepResult, unit: int) -> list[str]:
  """The table cells of one step (`COLUMNS`), memory in `unit`."""
  tflop = "-" if result.flops is None else f"{result.flops:.3g}"
  accessed = "-" if result.bytes_accessed is None else f"{result.bytes_accessed:.3g}"
  seconds = f"{result.seconds:.3g}" if result.seconds is not None else result.seconds_note
  out = (None if result.output_bytes is None
         else result.output_bytes - (result.alias_bytes or 0))
  fits = "yes" if result.fits else ("REFUSED" if not result.compiled else "NO")
  size = lambda n: _size(n, unit)  # noqa: E731
  program = size(result.program_bytes) if result.program_bytes else "?"
  return [result.step, f"{result.rows} x {result.tokens}", size(result.argument_bytes),
          size(result.temp_bytes), size(out), program, size(result.resident_bytes),
          size(result.peak_bytes) if result.program_bytes else "?", size(result.hbm_bytes), fits,
          tflop, accessed, seconds, f"{result.compile_seconds:.1f}"]


def topology_text(topology: Topology, processes: int) -> str:
  """One line on the devices compiled for and the memory one program may use on each."""
  if topology.name == LOCAL:
    return (f"topology: local, {len(topology.devices)} device(s) of {topology.kind} "
            f"({topology.platform}), {gib(topology.hbm_bytes)} GiB per device usable by a "
            "program (the allocator's limit; on a CPU the machine's memory)")
  return (f"topology: {topology.name}, {topology.chips} chips of {topology.kind} "
          f"({len(topology.devices)} devices, {processes} host(s)), {gib(topology.hbm_bytes)} "
          "GiB of HBM per device usable by a program (the compiler's figure)")


def format_table(results: Sequence[StepResult], run: RunSteps, topology: Topology,
                 model_name: str) -> str:
  """The per-device table of `results` with a header (model, topology, mesh, state) and the
  notes: columns `COLUMNS`, memory in GiB (MiB when every peak is below 1 GiB), then one
  `verdict_line` per step that does not fit."""
  unit = MIB if all(r.peak_bytes < GIB for r in results) else GIB
  unit_name = "MiB" if unit == MIB else "GiB"
  lines = [
      f"model: {model_text(run, model_name)}",
      topology_text(topology, run.processes),
      f"mesh: {mesh_text(run.mesh)}; training state {_size(run.state_bytes, unit)} {unit_name} "
      f"per device (parameters {_size(run.param_bytes, unit)})",
  ]
  rows = [list(COLUMNS)] + [_row(r, unit) for r in results]
  widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
  for n, row in enumerate(rows):
    lines.append("  ".join(cell.rjust(w) if i else cell.ljust(w)
                           for i, (cell, w) in enumerate(zip(row, widths))))
    if n == 0:
      lines.append("  ".join("-" * w for w in widths))
  lines.append(f"memory in {unit_name} per device; peak = program + resident (state the run keeps "
               "alive beside the step's arguments); HBM = what the compiler lets a program use")
  lines.append(COST_NOTE)
  for result in results:
    if result.seconds is None and result.seconds_note.startswith("negative"):
      lines.append(f"cost s: the cost model's seconds are negative on {topology.chip} "
                   "(not valid there); its flops and bytes are still the compiler's counts")
      break
  lines.extend(line for line in (verdict_line(r, run, topology) for r in results) if line)
  return "\n".join(lines)


def json_rows(results: Sequence[StepResult], run: RunSteps, topology: Topology,
              model_name: str, *, full_layers: int) -> list[dict]:
  """One dict per step: model, topology, chips, devices, mesh, step, peak_bytes (program +
  resident), hbm_bytes, fits, layers (compiled), full_layers (the model's), attention_impl
  (the kernel the target runs for training and prefill), flops,
  bytes_accessed, seconds (None where the cost model's are not valid), compile_seconds, the
  memory parts, rows, tokens, detail and the compiler's message when it refused."""
  return [{
      "model": model_name, "topology": topology.name, "chip": topology.kind,
      "chips": topology.chips, "devices": len(topology.devices), "hosts": run.processes,
      "mesh": dict(run.mesh.shape), "step": r.step, "detail": r.detail,
      "rows": r.rows, "tokens": r.tokens, "peak_bytes": r.peak_bytes,
      "program_bytes": r.program_bytes, "resident_bytes": r.resident_bytes,
      "resident": r.resident_what, "argument_bytes": r.argument_bytes,
      "temp_bytes": r.temp_bytes, "output_bytes": r.output_bytes, "alias_bytes": r.alias_bytes,
      "code_bytes": r.code_bytes, "hbm_bytes": r.hbm_bytes, "fits": r.fits,
      "compiled": r.compiled, "layers": run.model_config.num_layers, "full_layers": full_layers,
      "dtype": run.model_config.dtype, "remat": run.model_config.remat,
      "attention_impl": run.model_config.attention_impl,
      "flops": r.flops, "bytes_accessed": r.bytes_accessed, "seconds": r.seconds,
      "seconds_note": r.seconds_note or None, "compile_seconds": round(r.compile_seconds, 2),
      "message": r.message,
  } for r in results]
