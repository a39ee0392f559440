"""Issue 42's memory goals for long rows, on the compilers' own figures ahead of time: the GRPO
update step of a Qwen3 shape compiled (`rlscale.aot.run.compile_run`: the run's jitted update
for abstract inputs, nothing allocated, nothing run) and its per-device temporaries and peak read
from `memory_analysis()`.

  nice -n 5 python benchmarks/long_rows_memory.py --out benchmarks/results
  python benchmarks/long_rows_memory.py --out /tmp/l --cases a_blockwise --layers 2   # a check

Cases (the reference table's settings otherwise, `benchmarks/aot_table.table_config`: bfloat16
compute, float32 master weights and Adam moments sharded over every device, remat on, GRPO with
a KL term, rows of 512 prompt + the rest response tokens; every layer of the model):
  a_blockwise  Qwen3-0.6B on XLA:CPU (topology "local": this machine's CPU), ONE microbatch
               (rl.microbatches=1) of 8 rows (2 prompts x 4 samples) x 8,192 tokens,
               model.attention_impl=blockwise (no [B, T, S] buffer).
               Goal: temporaries <= 8 GiB.
  b_splash     Qwen3-1.7B on v5p:2x2x1 (v5p-8: 4 chips, mesh {fsdp: 4}), the TPU compiler
               (libtpu), one row of 32,768 tokens per device: 4 rows (1 prompt x 4 samples,
               the fewest the 4 batch parts take) in one microbatch, model.attention_impl=splash.
               Goal: fits the HBM (with the dense attention the compiler refused it before).
  a_cpu        a_blockwise with the dense "cpu" attention ([B, heads, T, S] float32 scores);
  b_standard   b_splash with the dense "standard" attention: contrasts, no goal. Both compile
               in a child stopped past --guard_rss_gib of host memory or --guard_minutes (the
               row then says "skipped: ...").

Every case compiles in its own process (`--one`), so each case's host memory is its own (peak
RSS polled from /proc and `os.wait4`) and the compilers' memory is returned between cases.

Writes OUT/long_rows_memory.json: {"command", "jax", "libtpu", "git_commit", "git_dirty" (tracked
files modified in the work tree when it ran), "rows"}, one row per case: `rlscale.aot.report.
json_rows`' fields (model, topology, mesh, step, rows, tokens, attention_impl, layers,
full_layers, temp_bytes, peak_bytes, hbm_bytes (on "local" the machine's memory), fits,
compile_seconds, message, ...) plus case, microbatches, rows_per_device, temporaries_bytes
(temp_bytes, or the compiler's "HLO temporaries" figure when it refused the step), goal,
goal_met and goal_gap_bytes (`goal_check`), host_peak_rss_bytes, wall_seconds and status
("compiled", "refused" for memory, or "skipped: ..." when the guard stopped it).

Measured (the committed result: jax 0.10.2, libtpu 0.0.42.1, commit a8ff984; a 2-core machine
shared with other jobs). GiB per device:

  case         temporaries  peak (with the reference copy)  of        goal
  a_blockwise        14.20   23.08                          23.54 RAM  <= 8: NOT met, +6.20
  b_splash            8.89   15.30                          95.74 HBM  fits: met
  a_cpu             152.71   161.59                         23.54 RAM  -
  b_standard  refused 112.01  113.61                        95.74 HBM  -

Before commit dcab036 a_blockwise needed 49.25 GiB and b_splash was refused at 105.71 GiB:
- a_blockwise: XLA merged the identical zero fills of the blockwise kernel's loop buffers (the
  backward's dq accumulator and stacked dk / dv, the forward's stacked outputs: 1.39 GiB per
  layer) and hoisted them, so all 28 layers' buffers were alive at once. The kernel now writes
  with fori_loops into buffers tied to the layer's own input or cotangent
  (`attention._after`), made inside the layer. What is left over the goal: the 27 saved layer
  inputs (bfloat16 [8, 8191, 1024], 3.4 GiB), the layer's MLP in float32 on XLA:CPU (5 x
  [65528, 3072], 3.75 GiB), its attention projections and their gradients in float32 (about
  3 GiB), the residual stream (1 GiB) and the tied embedding's gradient (2 x 0.58 GiB): 65,536
  tokens in one microbatch want the layer's MLP and projections chunked over tokens.
- b_splash: the last layer computes only the response's queries (the log-prob window), and
  `attention.resolve_attention_impl` ran that window on the dense "standard" kernel: float32
  scores [1, 16, 32256, 32767] (63 GiB) in that layer. A window without a cache now runs
  blockwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Optional

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.aot_table import package_version, table_config  # noqa: E402
from rlscale import outputs  # noqa: E402

GIB = 2 ** 30
POLL_SECONDS = 1.0
COMMAND = "python benchmarks/long_rows_memory.py"


@dataclasses.dataclass(frozen=True)
class Case:
  """One compiled update step: model shape, topology, rows, row width, attention kernel, goal.

  goal: "temporaries_bytes <= N", "fits" (peak within the HBM) or None (a contrast
  row). guarded: compiled under the host-memory and time guard (a contrast that may not finish).
  """
  model: str
  topology: str
  prompts: int
  group: int
  tokens: int
  attention_impl: str
  goal: Optional[str]
  guarded: bool = False


TEMP_GOAL_BYTES = 8 * GIB
CASES = {
    "a_blockwise": Case("qwen3-0.6b", "local", 2, 4, 8192, "blockwise",
                        f"temporaries_bytes <= {TEMP_GOAL_BYTES}"),
    "a_cpu": Case("qwen3-0.6b", "local", 2, 4, 8192, "cpu", None, guarded=True),
    "b_splash": Case("qwen3-1.7b", "v5p:2x2x1", 1, 4, 32768, "splash", "fits"),
    "b_standard": Case("qwen3-1.7b", "v5p:2x2x1", 1, 4, 32768, "standard", None, guarded=True),
}
DEFAULT_CASES = ("a_blockwise", "b_splash", "a_cpu", "b_standard")


def case_config(case: Case):
  """The reference table's config (`aot_table.table_config`, with its KL term) for `case`: its
  rows, row width, attention kernel and one microbatch."""
  config = table_config(moe=False, kl=True, tokens=case.tokens)
  with config.unlocked():
    config.rl.prompts_per_step = case.prompts
    config.rl.group_size = case.group
    config.rl.microbatches = 1
    config.model.attention_impl = case.attention_impl
  return config


def goal_check(goal: Optional[str], row: dict) -> tuple[Optional[bool], Optional[int]]:
  """(whether `row` meets `goal`, bytes by which it misses: over the limit, negative when there
  is room) for goal "temporaries_bytes <= N" (the limit N) or "fits" (the HBM, against the
  peak). (None, None) without a goal, without a compile (a skipped case) or when not every
  layer was compiled (no figure for the model); (False, None) when the compiler refused the step
  without a figure for the field."""
  if goal is None or "fits" not in row or row["layers"] != row["full_layers"]:
    return None, None
  if goal == "fits":
    return bool(row["fits"]), row["peak_bytes"] - row["hbm_bytes"]
  field, _, limit = goal.partition(" <= ")
  if row[field] is None:
    return False, None
  return row[field] <= int(limit), row[field] - int(limit)


def compile_case(name: str, layers: Optional[int]) -> dict:
  """Compiles case `name`'s update step in this process: the `report.json_rows` row plus case,
  microbatches, rows_per_device, temporaries_bytes and status."""
  # pylint: disable=import-outside-toplevel
  from rlscale.aot.measure import refusal_figures
  from rlscale.aot.run import compile_run
  # pylint: enable=import-outside-toplevel
  case = CASES[name]
  progress = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
  compiled = compile_run(case_config(case), case.topology, shape=case.model, layers=layers,
                         eval_steps=False, only=["update"], progress=progress)
  print(compiled.table(), file=sys.stderr, flush=True)
  row = compiled.rows()[0]
  parts = compiled.run.mesh.shape.get("data", 1) * compiled.run.mesh.shape.get("fsdp", 1)
  temporaries = row["temp_bytes"]
  if not row["compiled"]:
    required, _, what = refusal_figures(row["message"] or "")
    temporaries = required if what == "HLO temporaries" else None
  return {"case": name, **row, "temporaries_bytes": temporaries,
          "microbatches": compiled.run.update_microbatches,
          "rows_per_device": row["rows"] // parts // compiled.run.update_microbatches,
          "status": "compiled" if row["compiled"] else "refused"}


def _rss_bytes(pid: int) -> int:
  """Resident bytes of process `pid` (/proc; 0 once it is gone)."""
  try:
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
      for line in f:
        if line.startswith("VmRSS:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return 0


def run_case(name: str, layers: Optional[int], guard_rss: Optional[int],
             guard_seconds: Optional[float]) -> dict:
  """Case `name` compiled by a child process (`--one`), stopped past `guard_rss` resident bytes
  or `guard_seconds` when given: its row with host_peak_rss_bytes, wall_seconds, goal, goal_met
  and goal_gap_bytes (`goal_check`), or a "skipped: ..." row when stopped."""
  case = CASES[name]
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "row.json")
    argv = [sys.executable, os.path.abspath(__file__), "--one", name, "--row_out", out]
    argv += [] if layers is None else ["--layers", str(layers)]
    start = time.perf_counter()
    child = subprocess.Popen(argv, cwd=ROOT)
    why, peak = None, 0
    while True:
      pid, status, usage = os.wait4(child.pid, os.WNOHANG)
      if pid:
        break
      peak = max(peak, _rss_bytes(child.pid))
      elapsed = time.perf_counter() - start
      if why is None and guard_rss is not None and peak > guard_rss:
        why = f"host memory past {guard_rss / GIB:.1f} GiB after {elapsed:.0f} s"
      elif why is None and guard_seconds is not None and elapsed > guard_seconds:
        why = f"compile past {guard_seconds / 60:.0f} minutes ({peak / GIB:.1f} GiB resident)"
      if why is not None:
        child.kill()
      time.sleep(POLL_SECONDS)
    wall = time.perf_counter() - start
    peak = max(peak, usage.ru_maxrss * 1024)
    if why is not None or not os.path.exists(out):
      code = os.waitstatus_to_exitcode(status)
      row = {"case": name, "model": case.model, "topology": case.topology, "step": "update",
             "attention_impl": case.attention_impl, "tokens": case.tokens,
             "rows": case.prompts * case.group, "layers": layers, "full_layers": None,
             "status": f"skipped: {why}" if why else f"failed: exit status {code}"}
    else:
      row = json.load(open(out))
  row.update(goal=case.goal, host_peak_rss_bytes=peak, wall_seconds=round(wall, 1))
  row["goal_met"], row["goal_gap_bytes"] = goal_check(case.goal, row)
  return row


def git_state() -> tuple[Optional[str], list]:
  """(HEAD's commit, tracked files modified in the work tree), or (None, []) outside git."""
  try:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.strip()
    changed = subprocess.run(["git", "diff", "--name-only", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
  except (OSError, subprocess.CalledProcessError):
    return None, []
  return commit, changed


def summary_line(row: dict) -> str:
  """One line per row: case, temporaries, peak, HBM/RAM, fits, goal and its gap, seconds."""
  size = lambda n: "-" if n is None else f"{n / GIB:.2f} GiB"  # noqa: E731
  return (f"{row['case']}: {row['model']} on {row['topology']}, {row['rows']} rows x "
          f"{row['tokens']} tokens, {row['attention_impl']}: {row['status']}; temporaries "
          f"{size(row.get('temporaries_bytes'))}, peak {size(row.get('peak_bytes'))} of "
          f"{size(row.get('hbm_bytes'))}, fits {row.get('fits')}; goal {row['goal']}: "
          f"{row['goal_met']} (misses by {size(row['goal_gap_bytes'])}); compile "
          f"{row.get('compile_seconds')} s, wall "
          f"{row['wall_seconds']} s, host peak {size(row['host_peak_rss_bytes'])}")


def main(argv=None) -> None:
  """Compiles --cases, one child process each, and writes OUT/long_rows_memory.json (see the
  module docstring); with --one, compiles that case here and writes its row to --row_out."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", help="Folder for long_rows_memory.json.")
  parser.add_argument("--cases", default=",".join(DEFAULT_CASES),
                      help=f"Comma-separated, of {sorted(CASES)}.")
  parser.add_argument("--layers", type=int, default=None,
                      help="Compile this many layers (a check of the script: no goal is met).")
  parser.add_argument("--guard_rss_gib", type=float, default=10.0,
                      help="Stop a guarded (contrast) case past this much host memory.")
  parser.add_argument("--guard_minutes", type=float, default=15.0,
                      help="Stop a guarded (contrast) case past this many minutes.")
  parser.add_argument("--one", choices=sorted(CASES), help=argparse.SUPPRESS)
  parser.add_argument("--row_out", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.one:
    outputs.write_json(args.row_out, compile_case(args.one, args.layers))
    return
  if not args.out:
    parser.error("--out is required")
  names = args.cases.split(",")
  unknown = sorted(set(names) - set(CASES))
  if unknown:
    parser.error(f"--cases names {unknown}; known: {sorted(CASES)}")
  commit, dirty = git_state()
  path, rows = os.path.join(args.out, "long_rows_memory.json"), []
  for name in names:
    guarded = CASES[name].guarded
    rows.append(run_case(name, args.layers, args.guard_rss_gib * GIB if guarded else None,
                         args.guard_minutes * 60 if guarded else None))
    print(summary_line(rows[-1]), flush=True)
    os.makedirs(args.out, exist_ok=True)
    outputs.write_json(path, {"command": " ".join([COMMAND] + sys.argv[1:]),
                              "jax": package_version("jax"), "libtpu": package_version("libtpu"),
                              "git_commit": commit, "git_dirty": dirty, "rows": rows}, indent=1)


if __name__ == "__main__":
  main()
