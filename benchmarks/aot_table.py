"""The reference table of issue 41 on the TPU compiler: Qwen3 GRPO steps sized per device for
TPU slices, compiled on this CPU (`rlscale.aot`: libtpu, `pip install -e ".[tpu]"`).

  python benchmarks/aot_table.py --out benchmarks/results          # the whole table (hours)
  python benchmarks/aot_table.py --out /tmp/t --models qwen3-8b --topologies v5p:2x2x1
  python benchmarks/aot_table.py --out /tmp/t --layers 2            # a quick check, not the table

Each row: one model x step x topology, the main job's config (experiments/configs/default.py)
with the model replaced by a Qwen3 release shape at its full layer count (no extrapolation:
--layers is for checking the script only, and its rows say so), GRPO, bfloat16 compute, float32
master weights and Adam moments, remat on, the parameters and Adam moments sharded over every
device ({data: 1, fsdp: -1}), B = 8 responses (2 prompts x 4 samples: `ROLLOUT`) of 512 +
3,584 = 4,096 tokens. Steps: the update and the sampler (prefill + decode with its KV cache for
those rows), plus the reference pass and its resident copy with --kl. Qwen3-30B-A3B runs on a
64-chip v5p slice (v5p:4x4x4) with the expert axis ({fsdp: 8, expert: 8}) and 64 responses
(16 prompts x 4 samples: one row per device, the slice's 16 hosts one prompt group each).
Writes OUT/aot_table.json: {"command", "jax", "libtpu", "rows"} (`rlscale.aot.report.json_rows`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ml_collections  # noqa: E402

from experiments.configs.default import get_config  # noqa: E402
from rlscale import outputs  # noqa: E402
from rlscale.aot.run import compile_run  # noqa: E402

DENSE_MODELS = ("qwen3-0.6b", "qwen3-1.7b", "qwen3-8b")
DENSE_TOPOLOGIES = ("v5e:2x4", "v6e:2x4", "v5p:2x2x1", "v5p:2x2x2")
MOE_MODEL, MOE_TOPOLOGY = "qwen3-30b-a3b", "v5p:4x4x4"
# Rows and lengths of the table: P prompts x G samples = 8 responses of 512 + 3,584 tokens.
ROLLOUT = dict(prompts_per_step=2, group_size=4, max_prompt_tokens=512, max_new_tokens=3584)
MOE_PROMPTS = 16  # 16 x 4 = 64 rows: the rows must split over fsdp x expert = 64 devices


def table_config(*, moe: bool, kl: bool):
  """The main job's config with the table's settings (see the module docstring)."""
  config = get_config()
  with config.unlocked():
    config.model.dtype = "bfloat16"
    config.model.remat = True
    if moe:
      config.mesh = ml_collections.ConfigDict({"data": 1, "fsdp": -1, "tensor": 1, "expert": 8})
    else:
      config.mesh.data, config.mesh.fsdp = 1, -1
    config.rl.prompts_per_step = MOE_PROMPTS if moe else ROLLOUT["prompts_per_step"]
    config.rl.group_size = ROLLOUT["group_size"]
    config.rollout.max_prompt_tokens = ROLLOUT["max_prompt_tokens"]
    config.rollout.max_new_tokens = ROLLOUT["max_new_tokens"]
    if kl:
      config.rl.kl_coef, config.rl.kl_estimator = 0.001, "k3"
  return config


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
  args = parser.parse_args(argv)
  steps = ["update", "sample"] + (["ref_logp"] if args.kl else [])
  rows = []
  for model in args.models.split(","):
    moe = model == MOE_MODEL
    for topology in ([MOE_TOPOLOGY] if moe else args.topologies.split(",")):
      start = time.perf_counter()
      compiled = compile_run(table_config(moe=moe, kl=args.kl), topology, shape=model,
                             layers=args.layers, eval_steps=False, only=steps,
                             progress=lambda line: print(line, file=sys.stderr, flush=True))
      print(compiled.table(), f"\n({time.perf_counter() - start:.0f} s)\n", flush=True)
      rows.extend(compiled.rows())
      os.makedirs(args.out, exist_ok=True)  # written after every topology: partial results kept
      outputs.write_json(os.path.join(args.out, "aot_table.json"), {
          "command": " ".join(["python benchmarks/aot_table.py"] + sys.argv[1:]),
          "jax": importlib.metadata.version("jax"),
          "libtpu": importlib.metadata.version("libtpu"), "rows": rows}, indent=1)


if __name__ == "__main__":
  main()
