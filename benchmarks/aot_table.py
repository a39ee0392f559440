"""The reference table of issue 41 on the TPU compiler: Qwen3 GRPO steps sized per device for
TPU slices, compiled on this CPU (`rlscale.aot`: libtpu, `pip install -e ".[tpu]"`).

  python benchmarks/aot_table.py --out benchmarks/results          # the whole table (hours)
  python benchmarks/aot_table.py --out /tmp/t --models qwen3-8b --topologies v5p:2x2x1
  python benchmarks/aot_table.py --out /tmp/t --layers 2            # a quick check, not the table
  python benchmarks/aot_table.py --out benchmarks/results --kl --longest   # after the table
  JAX_PLATFORMS=cuda python benchmarks/aot_table.py --out OUT --kl --topologies local \
      --models qwen3-0.6b,qwen3-1.7b,qwen3-8b       # the GPU rows, on a GPU (benchmarks/gpu.sh)

Each row: one model x step x topology, the main job's config (experiments/configs/default.py)
with the model replaced by a Qwen3 release shape at its full layer count (no extrapolation:
--layers is for checking the script only, and its rows say so), GRPO, bfloat16 compute, float32
master weights and Adam moments, remat on, the parameters and Adam moments sharded over every
device ({data: 1, fsdp: -1}), B = 8 responses (2 prompts x 4 samples: `ROLLOUT`) of 512 +
3,584 = 4,096 tokens. Steps: the update and the sampler (prefill + decode with its KV cache for
those rows), plus the reference pass and its resident copy with --kl. Qwen3-30B-A3B runs on a
64-chip v5p slice (v5p:4x4x4) with the expert axis ({fsdp: 8, expert: 8}) and 64 responses
(16 prompts x 4 samples: one row per device, the slice's 16 hosts one prompt group each).
Writes OUT/aot_table.json: {"command", "made_by", "jax", "libtpu", "rows"} (rows:
`rlscale.aot.report.json_rows` and the commit that made each). A run resumes the table of the same
settings (--out, --kl, --layers), adding the selected models x topologies it lacks (--redo:
recompiling those it has, replacing their rows), so one table can be made in several runs;
--tensor N adds rows of the mesh {data: 1, fsdp: -1, tensor: N} beside them (what would fit).

--longest reads OUT/aot_table.json and writes OUT/aot_longest.json: for each model x topology the
longest row (prompt + response tokens, the prompt kept at 512) whose update step fits, found by
doubling from the table's 4,096 while it fits (8,192 / 16,384 / 32,768) or halving while it does
not (2,048 / 1,024). Only the update is searched: it holds the batch's activations and its
attention grows with the square of the row, while the sampler's cache grows linearly (every
sampler row of the table needs far less than the update's).
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import ml_collections  # noqa: E402

from experiments.configs.default import get_config  # noqa: E402
from rlscale import outputs  # noqa: E402
from rlscale.aot.run import compile_run  # noqa: E402

DENSE_MODELS = ("qwen3-0.6b", "qwen3-1.7b", "qwen3-8b")
DENSE_TOPOLOGIES = ("v5e:2x4", "v6e:2x4", "v5p:2x2x1", "v5p:2x2x2")
MOE_MODEL, MOE_TOPOLOGY = "qwen3-30b-a3b", "v5p:4x4x4"
# Rows and lengths of the table: P prompts x G samples = 8 responses of 512 + 3,584 tokens.
ROLLOUT = dict(prompts_per_step=2, group_size=4, max_prompt_tokens=512, max_new_tokens=3584)
LONGER, SHORTER = (8192, 16384, 32768), (2048, 1024)  # --longest's row widths, tokens
MOE_PROMPTS = 16  # 16 x 4 = 64 rows: the rows must split over fsdp x expert = 64 devices


def table_config(*, moe: bool, kl: bool, tokens: int = 4096, tensor: int = 1):
  """The main job's config with the table's settings (see the module docstring), rows of
  `tokens` = 512 prompt + the rest response tokens, the dense models' mesh {data: 1, fsdp: -1,
  tensor: `tensor`}."""
  config = get_config()
  with config.unlocked():
    config.model.dtype = "bfloat16"
    config.model.remat = True
    if moe:
      config.mesh = ml_collections.ConfigDict({"data": 1, "fsdp": -1, "tensor": 1, "expert": 8})
    else:
      config.mesh.data, config.mesh.fsdp, config.mesh.tensor = 1, -1, tensor
    config.rl.prompts_per_step = MOE_PROMPTS if moe else ROLLOUT["prompts_per_step"]
    config.rl.group_size = ROLLOUT["group_size"]
    config.rollout.max_prompt_tokens = ROLLOUT["max_prompt_tokens"]
    config.rollout.max_new_tokens = tokens - ROLLOUT["max_prompt_tokens"]
    if kl:
      config.rl.kl_coef, config.rl.kl_estimator = 0.001, "k3"
  return config


def longest_row(model: str, topology: str, base: dict, *, kl: bool, layers, progress) -> dict:
  """The longest row width whose update step fits (see the module docstring), from the table's
  4,096-token update row `base`: {"model", "topology", "chips", "mesh", "step", "rows",
  "longest_fitting_tokens" (None: not even 1,024), "first_refused_tokens" (the shortest refused; None: 32,768 fits),
  "peak_bytes" at each width tried, "hbm_bytes", "layers", "full_layers"}."""
  moe = model == MOE_MODEL
  fitting, refused = (4096, None) if base["fits"] else (None, 4096)
  peaks = {4096: base["peak_bytes"]}
  for tokens in (LONGER if base["fits"] else SHORTER):
    compiled = compile_run(table_config(moe=moe, kl=kl, tokens=tokens), topology, shape=model,
                           layers=layers, eval_steps=False, only=["update"], progress=progress)
    result = compiled.results[0]
    peaks[tokens] = result.peak_bytes
    if result.fits:
      fitting = tokens
    else:
      refused = tokens  # going down, the smallest width refused
    if result.fits != base["fits"]:
      break
  return {key: base[key] for key in ("model", "topology", "chips", "mesh", "rows", "hbm_bytes",
                                     "layers", "full_layers")} | {
      "step": "update", "longest_fitting_tokens": fitting, "first_refused_tokens": refused,
      "peak_bytes": {str(k): v for k, v in sorted(peaks.items())}}


def release_compiled() -> None:
  """Drops jax's caches of traced and compiled programs: a whole table kept every executable
  alive and grew past this machine's 24 GiB (killed at 14.6 GiB resident beside other jobs)."""
  jax.clear_caches()
  gc.collect()


def package_version(name: str):
  """The installed version of `name`, or None (no libtpu on a GPU machine: `--topologies local`)."""
  try:
    return importlib.metadata.version(name)
  except importlib.metadata.PackageNotFoundError:
    return None


def write(path: str, rows: list, earlier: dict) -> None:
  """`path` = {"command", "made_by", "jax", "libtpu", "rows"}, rewritten after every topology so
  partial results are kept. "command" makes the whole table (the settings without the model and
  topology selection); "made_by" lists every invocation that added rows, each row its "commit"."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  made_by = list(earlier.get("made_by", [])) or ([earlier["command"]] if earlier else [])
  if command_line() not in made_by:
    made_by.append(command_line())
  outputs.write_json(path, {
      "command": table_command(), "made_by": made_by,
      "jax": importlib.metadata.version("jax"),
      "libtpu": package_version("libtpu"), "rows": rows}, indent=1)


def load_table(path: str) -> dict:
  """The earlier table at `path` made with this invocation's settings (`table_command`: the same
  --out, --kl and --layers, whatever models and topologies it selected), with every row's
  "commit" filled in (rows from before the field: the file's "commit"), else {} (start over)."""
  if not os.path.exists(path):
    return {}
  earlier = json.load(open(path))
  if earlier["command"] != table_command():
    return {}
  for row in earlier["rows"]:
    row.setdefault("commit", earlier.get("commit"))
  return earlier


def current_commit() -> str:
  """HEAD of the repository this script runs from (+ " with local changes" when files outside
  benchmarks/results/ differ from it)."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  run = lambda *a: subprocess.run(["git", *a], cwd=root, capture_output=True,  # noqa: E731
                                  text=True).stdout.strip()
  # The table's own results file changes as it runs: only other changes make the code dirty.
  dirty = [line for line in run("status", "--porcelain", "--untracked-files=no").splitlines()
           if "benchmarks/results/" not in line]
  return run("rev-parse", "--short", "HEAD") + (" with local changes" if dirty else "")


def command_line() -> str:
  """This invocation as the JSON files record it."""
  return " ".join(["python benchmarks/aot_table.py"] + sys.argv[1:])


def table_command() -> str:
  """This invocation without its selection (--models, --topologies, --tensor) and --redo: the
  command of the table."""
  args, skip = [], False
  for arg in sys.argv[1:]:
    if skip:
      skip = False
    elif arg in ("--models", "--topologies", "--tensor"):
      skip = True
    elif arg != "--redo" and not arg.startswith(("--models=", "--topologies=", "--tensor=")):
      args.append(arg)
  return " ".join(["python benchmarks/aot_table.py"] + args)


def main(argv=None) -> None:
  """Compiles the table's rows and writes OUT/aot_table.json (see the module docstring)."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", required=True, help="Folder for aot_table.json.")
  parser.add_argument("--models", default=",".join(DENSE_MODELS + (MOE_MODEL,)))
  parser.add_argument("--topologies", default=",".join(DENSE_TOPOLOGIES),
                      help=f"Slices of the dense models ({MOE_MODEL} always on {MOE_TOPOLOGY}).")
  parser.add_argument("--layers", type=int, default=None,
                      help="Compile this many layers (a check of the script, not the table).")
  parser.add_argument("--kl", action="store_true", help="A KL term: the reference pass too.")
  parser.add_argument("--tensor", type=int, default=1,
                      help="The dense models' tensor-parallel axis (rows of another mesh: a "
                           "what-would-fit row beside the table's {fsdp: -1}).")
  parser.add_argument("--redo", action="store_true",
                      help="Recompile the selected models x topologies where the table has them.")
  parser.add_argument("--longest", action="store_true",
                      help="From OUT/aot_table.json, the longest rows that fit (aot_longest.json).")
  args = parser.parse_args(argv)
  progress = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
  if args.longest:
    table = json.load(open(os.path.join(args.out, "aot_table.json")))["rows"]
    rows = []
    for base in table:
      if base["step"] != "update" or base["model"] not in args.models.split(","):
        continue
      rows.append(longest_row(base["model"], base["topology"], base, kl=args.kl,
                              layers=args.layers, progress=progress))
      print(json.dumps(rows[-1]), flush=True)
      write(os.path.join(args.out, "aot_longest.json"), rows, {})
      release_compiled()
    return
  steps = ["update", "sample"] + (["ref_logp"] if args.kl else [])
  earlier = load_table(os.path.join(args.out, "aot_table.json"))
  rows = earlier.get("rows", [])
  commit = current_commit()
  tensor = lambda row: row["mesh"].get("tensor", 1)  # noqa: E731
  done = {(r["model"], r["topology"], tensor(r)) for r in rows}
  for model in args.models.split(","):
    moe = model == MOE_MODEL
    for topology in ([MOE_TOPOLOGY] if moe else args.topologies.split(",")):
      key = (model, topology, 1 if moe else args.tensor)
      if key in done and not args.redo:
        print(f"{model} on {topology}: in {args.out}/aot_table.json already", flush=True)
        continue
      start = time.perf_counter()
      compiled = compile_run(table_config(moe=moe, kl=args.kl, tensor=key[2]), topology,
                             shape=model, layers=args.layers, eval_steps=False, only=steps,
                             progress=progress)
      print(compiled.table(), f"\n({time.perf_counter() - start:.0f} s)\n", flush=True)
      rows = [r for r in rows if (r["model"], r["topology"], tensor(r)) != key]
      rows.extend({**row, "commit": commit} for row in compiled.rows())
      write(os.path.join(args.out, "aot_table.json"), rows, earlier)
      release_compiled()


if __name__ == "__main__":
  main()
