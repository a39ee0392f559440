"""Where the update step's time goes: XLA:CPU per-op profile of the W1 GRPO update step.

  python benchmarks/profile_update.py --out DIR [--tokens 16384] [--no_ynn] [--steps 2] [--w2]

Compiles the update step exactly as `update_step.py` (and the runner) do, runs it `--steps` times
under `jax.profiler.trace`, and sums the duration of every XLA thunk (one per fused op) from the
trace. Writes DIR/update_profile.json: seconds per category and per op name (top 30), the
category shares and the step's wall time. Categories, by op name: matmul (dot, YNNPACK/oneDNN fusions),
layout (transpose, copy), reduce (reductions: log-softmax, norms, sums), elementwise (other
fusions), collective (all-reduce), other. With --w2 the batch is W2's update instead (`rl_step.py`:
64 responses of 8 prompt + 64 response tokens, microbatches chosen as the runner's default
chooses them, `update.microbatch_count`; --microbatches K sets them).
Timings on a shared machine are inflated, but the shares within one step much less so.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import sys
import tempfile
import time

import jax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=g-import-not-at-top,wrong-import-position (after the sys.path line)
from benchmarks.common import load_average, machine_info
from benchmarks.update_step import PROMPT_LEN, RESPONSE_LEN, make_batch
from experiments.configs.default import get_config
from rlscale import outputs
from rlscale.model.config import ModelConfig
from rlscale.model.transformer import init_params
from rlscale.parallel.data import global_batch
from rlscale.parallel.mesh import make_mesh, mesh_config
from rlscale.parallel.shardings import put_on_mesh
from rlscale.rl.presets import resolve_rl_config
from rlscale.train import update as update_lib
from rlscale.train.update_fn import make_update_fn
from rlscale.train.compile_options import CPU_UPDATE_OPTIONS
from rlscale.train.optimizer import make_optimizer
from rlscale.train.state import create_train_state

CATEGORIES = (("collective", re.compile(r"all-reduce|all_reduce|collective")),
              ("matmul", re.compile(r"dot|ynn|onednn|matmul|convolution|custom-call")),
              ("layout", re.compile(r"transpose|copy")),
              ("reduce", re.compile(r"reduce")),
              ("elementwise", re.compile(r"fusion|wrapped_|add|multiply|exp|log|select")))
# W2's update batch (rl_step.py): 8 prompts x 8 samples of an 8-token prompt bucket + 64 tokens.
W2_ROWS, W2_PROMPT_LEN, W2_RESPONSE_LEN = 64, 8, 64
# Thunks that only wait for or contain others.
SKIP = re.compile(r"^(end: |ThunkExecutor|ThreadpoolListener|while|call|conditional)")


def category(name: str) -> str:
  for label, pattern in CATEGORIES:
    if pattern.search(name):
      return label
  return "other"


def op_times(trace_dir: str) -> dict[str, float]:
  """Seconds per XLA thunk name, summed over the CPU client threads of the trace."""
  path = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)[0]
  totals = collections.Counter()
  for plane in jax.profiler.ProfileData.from_file(path).planes:
    for line in plane.lines:
      if "XLAPjRtCpuClient" not in line.name and "XLAEigen" not in line.name:
        continue
      for event in line.events:
        if not SKIP.match(event.name):
          totals[re.sub(r"\.\d+$", "", event.name)] += event.duration_ns / 1e9
  return dict(totals)


def op_breakdown(ops: dict[str, float], runs: int) -> dict:
  """Seconds per op name summed over `runs` runs -> {"op_seconds", "categories": {category:
  {"seconds", "share"}}, "top_ops": {name: seconds}} per run, largest first (top 30 ops)."""
  by_category = collections.Counter()
  for name, seconds in ops.items():
    by_category[category(name)] += seconds / runs
  total = sum(by_category.values())
  return {"op_seconds": total,
          "categories": {k: {"seconds": v, "share": v / total} for k, v in by_category.most_common()},
          "top_ops": {k: v / runs for k, v in collections.Counter(ops).most_common(30)}}


def print_breakdown(breakdown: dict) -> None:
  """The categories' seconds and shares, one line each, then the top 12 ops."""
  for name, value in breakdown["categories"].items():
    print(f"  {name:12s} {value['seconds']:.3f} s  {value['share']:.1%}")
  print("top ops:", json.dumps({k: round(v, 4) for k, v in list(breakdown["top_ops"].items())[:12]}))


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", required=True)
  parser.add_argument("--tokens", type=int, default=16384)
  parser.add_argument("--microbatch_tokens", type=int, default=2048)
  parser.add_argument("--steps", type=int, default=2)
  parser.add_argument("--no_ynn", action="store_true")
  parser.add_argument("--w2", action="store_true",
                      help="W2's update batch: 64 x (8 + 64) tokens, the runner's microbatches")
  parser.add_argument("--microbatches", type=int, default=None,
                      help="with --w2: gradient-accumulation slices (default: the runner's choice)")
  args = parser.parse_args(argv)
  model_config = ModelConfig()
  prompt_len, response_len = (W2_PROMPT_LEN, W2_RESPONSE_LEN) if args.w2 else (PROMPT_LEN,
                                                                              RESPONSE_LEN)
  batch_size = W2_ROWS if args.w2 else args.tokens // (prompt_len + response_len)
  args.tokens = batch_size * (prompt_len + response_len)
  rl_cfg = get_config().rl
  rl_cfg.prompts_per_step, rl_cfg.group_size = batch_size // 8, 8
  rl_cfg.microbatches = (update_lib.microbatch_count(args.microbatches, batch_size, prompt_len
                                                     + response_len) if args.w2
                         else max(1, args.tokens // args.microbatch_tokens))
  rl = resolve_rl_config(rl_cfg)
  optimizer = make_optimizer(get_config().optim, **update_lib.optimizer_args(rl, rl_steps=1000))
  options = {} if args.no_ynn else CPU_UPDATE_OPTIONS
  mesh = make_mesh(mesh_config())
  update = make_update_fn(model_config, rl, optimizer, mesh, cpu_compiler_options=options)
  state = put_on_mesh(jax.device_get(create_train_state(
      init_params(model_config, jax.random.key(0)), optimizer)), update.state_shardings)
  batch = global_batch(make_batch(batch_size, model_config.vocab_size, prompt_len=prompt_len,
                                  response_len=response_len), mesh)
  state, metrics = update(state, batch, jax.random.key(0))
  jax.block_until_ready(metrics)
  load = load_average()
  with tempfile.TemporaryDirectory() as trace_dir:
    start = time.perf_counter()
    with jax.profiler.trace(trace_dir):
      for i in range(args.steps):
        state, metrics = update(state, batch, jax.random.key(i + 1))
        jax.block_until_ready(metrics)
    wall = (time.perf_counter() - start) / args.steps
    ops = op_times(trace_dir)
  breakdown = op_breakdown(ops, args.steps)
  report = {
      "tokens": args.tokens, "rows": batch_size,
      "sequence": {"prompt_tokens": prompt_len, "response_tokens": response_len},
      "microbatches": rl.microbatches, "compiler_options": options,
      "wall_seconds_per_step": wall,
      "op_seconds_per_step": breakdown["op_seconds"],
      "categories": breakdown["categories"], "top_ops": breakdown["top_ops"],
      "load_average": [load, load_average()], "machine": machine_info(),
  }
  outputs.write_json(os.path.join(args.out, "update_profile.json"), report, indent=2)
  print(f"{args.tokens} tokens/step, {wall:.3f} s wall per step, op time "
        f"{breakdown['op_seconds']:.3f} s (summed over threads); load {load}")
  print_breakdown(breakdown)
  return report


if __name__ == "__main__":
  main()
