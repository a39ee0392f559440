"""Memory of the RL update step for a Qwen3-0.6B-shaped policy, from XLA's memory analysis on
this machine's CPU backend (compiled for abstract inputs, never run; see rlscale/train/memory.py).

  python benchmarks/update_memory.py --out DIR [--quick] [--layers 28] [--dtypes float32,bfloat16]
  python benchmarks/update_memory.py --out DIR --state_table   # seconds: no compile
  python benchmarks/update_memory.py --out DIR --sharded [--models qwen3_8b,qwen3_32b] [--layers N]

Writes DIR/update_memory.json: for each compute dtype and model.remat in (False, True), the
per-device temporary, argument, output and peak GiB of the update step (GRPO preset, one
microbatch of --rows x (--prompt_len + --response_len) tokens, Adam with clipping, float32
parameters and Adam moments), with the settings and the jax version.

The shape is Qwen3-0.6B's: vocab 151,936, hidden 1024, 28 layers, 16 heads, 8 KV heads,
head_dim 128, intermediate 3072, tied embeddings; 8 x 1,024 tokens with a 512-token response.
Before response-only chunked log-probs and remat (commit cb7ab42) the same measurement gave
86.4 GiB of temporaries (issue 13 quotes 81.6 GiB from an earlier main) and 6.66 GiB of arguments.
The step is compiled with the XLA options the runner gives it (train.compile_options; with XLA's
defaults the remat figure was 8.72 GiB).
Each compile of the 28-layer step takes 1-4 minutes on a 2-core CPU; --quick compiles 2 layers
(under a minute each).

`--state_table` writes DIR/state_memory.json and prints a Markdown table instead: the memory each
device holds for the training state of the Qwen3 sizes (`state_memory`), from the parameter
count alone, for a data-parallel mesh ({data: N}), where every device holds all of it.

--sharded: the update step jitted over a mesh (`rlscale.train.update_fn`) for Qwen3-8B on {fsdp: 8} and
Qwen3-32B on {fsdp: 8, tensor: 4}, each compiled (AOT, nothing allocated) in a subprocess with
that many host devices forced (--xla_force_host_platform_device_count): one microbatch of
8 x 4,096 tokens (2,048 response), remat, bfloat16 compute, float32 parameters and Adam moments.
Adds to DIR/update_memory.json a "sharded" list, per entry model, mesh, per_device_bytes
(arguments + outputs + temporaries of the partitioned executable's `memory_analysis()`) and the
parameter + optimizer share per device (from the state's shardings). Goal (issue 20): Qwen3-8B at
most 40 GiB per device on 8 devices. Measured (jax 0.10.2, XLA:CPU buffer assignment): Qwen3-8B on
{fsdp: 8} 11.4 GiB of float32 parameters and Adam state and 42.4 GiB of temporaries per device
(peak 53.8 GiB; arguments + outputs + temporaries 65.3 GiB, the outputs aliasing the donated
state), so the goal is not met yet: the gathered embedding / lm_head (2.3 GiB each in float32,
several copies), one row's float32 attention scores [32 heads, 4095, 4095] (2.0 GiB, several) and
0.77 GiB more per layer dominate. The per-layer share is how XLA:CPU lowers the collectives: its
HLO shows each reduce-scatter of a layer's gradients as a full-size float32 all-reduce followed by
a dynamic slice (several layers' all-reduces combined into one tuple) and the parameters gathered
in float32; constraining each layer's gradients to the parameters' shardings in the backward did
not change the figure (2 layers 14.5 GiB, 4 layers 16.6 GiB either way), so an accelerator's
reduce-scatter should need less, unmeasured here. Qwen3-32B on {fsdp: 8, tensor: 4}: 11.4 GiB of
state and 42.8 GiB of temporaries per device (peak 54.2 GiB). Qwen3-30B-A3B on
{fsdp: 8, expert: 8} (64 devices, 64 rows): 2.58 GB of parameters and 5.17 GB of Adam state per
device, peak 57.6 GiB (50.3 GiB of temporaries) with accelerator-shaped grouped-matmul buffers,
178.5 GiB as XLA:CPU expands ragged_dot. The 8B step compiles in 2.5-6 minutes here, the 32B one
in 16, the 30B-A3B one in 11 and 16 (both compiles).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from typing import NamedTuple

import jax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.configs.default import get_config  # noqa: E402
from rlscale import outputs  # noqa: E402
from rlscale.model.config import ModelConfig  # noqa: E402
from rlscale.aot.models import QWEN3_COMMON, QWEN3_SHAPES  # noqa: E402
from rlscale.rl.presets import resolve_rl_config  # noqa: E402
from rlscale.train.compile_options import CPU_UPDATE_OPTIONS  # noqa: E402
from rlscale.train.memory import update_step_memory  # noqa: E402
from rlscale.train.optimizer import make_optimizer  # noqa: E402


# The dense Qwen3 releases' shapes (their config.json: `rlscale.aot.models.QWEN3_SHAPES`).
QWEN3_SIZES = {size: QWEN3_SHAPES[f"qwen3-{size.lower()}"] for size in ("0.6B", "1.7B", "4B", "8B")}
GIB = 2 ** 30


def qwen3(size: str, **overrides) -> ModelConfig:
  """The architecture of the Qwen3 release `size` (a key of QWEN3_SIZES), random weights."""
  return ModelConfig(**{**QWEN3_COMMON, **QWEN3_SIZES[size], **overrides})


def qwen3_0p6b(num_layers: int = 28, **overrides) -> ModelConfig:
  """The Qwen3-0.6B architecture (config.json of the release), random weights."""
  return qwen3("0.6B", num_layers=num_layers, **overrides)


def state_memory(model: ModelConfig) -> dict[str, float]:
  """GiB (2^30 bytes) one device holds for the training state of `model` in the runner, from its
  parameter count N (`ModelConfig.num_params`): float32 master parameters 4N bytes whatever
  model.dtype (rlscale.runner.builders.build_model), Adam's two float32 moments 8N, the frozen
  reference policy 4N (held only with a KL term, rl.kl_coef > 0), the gradients 4N (a temporary
  of the update step), and PPO's critic (same body and a value head, with its own Adam) 12N.
  Activations, logits and the sampler's KV cache come on top (the compiled step's
  temporaries)."""
  n = model.num_params()
  return {"params_billion": round(n / 1e9, 3),
          **{name: round(factor * n / GIB, 2) for name, factor in (
              ("params_gib", 4), ("adam_gib", 8), ("reference_gib", 4), ("gradients_gib", 4),
              ("ppo_critic_gib", 12))}}


def state_table(sizes=tuple(QWEN3_SIZES)) -> tuple[list[dict], str]:
  """(rows of `state_memory` per Qwen3 size, the same as a Markdown table)."""
  rows = [{"model": f"Qwen3-{size}", **state_memory(qwen3(size))} for size in sizes]
  lines = ["| model | parameters | float32 params | Adam moments | reference copy (KL) | "
           "gradients | params + Adam + gradients | PPO critic + its Adam |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
  for r in rows:
    train = r["params_gib"] + r["adam_gib"] + r["gradients_gib"]
    lines.append(f"| {r['model']} | {r['params_billion']:.2f}B | {r['params_gib']:.1f} GiB | "
                 f"{r['adam_gib']:.1f} GiB | {r['reference_gib']:.1f} GiB | "
                 f"{r['gradients_gib']:.1f} GiB | {train:.1f} GiB | "
                 f"{r['ppo_critic_gib']:.1f} GiB |")
  return rows, "\n".join(lines)


class ShardedModel(NamedTuple):
  """One --sharded entry: its label, ModelConfig fields, mesh section and microbatch rows."""
  label: str
  fields: dict
  mesh: dict
  rows: int


# The --sharded entries, each with one 4,096-token row per device. Qwen3-30B-A3B (its
# config.json: 48 layers, 128 experts, 8 per token, expert width 768) shards its experts over
# `expert` and runs the ragged grouped-matmul dispatch (an accelerator's "auto"; the dense path
# would compute all 128 experts).
SHARDED_MODELS = {
    "qwen3_8b": ShardedModel(
        "Qwen3-8B", dict(vocab_size=151_936, hidden_size=4096, intermediate_size=12_288,
                         num_layers=36, num_heads=32, num_kv_heads=8, head_dim=128),
        {"data": 1, "fsdp": 8, "tensor": 1}, rows=8),
    "qwen3_32b": ShardedModel(
        "Qwen3-32B", dict(vocab_size=151_936, hidden_size=5120, intermediate_size=25_600,
                          num_layers=64, num_heads=64, num_kv_heads=8, head_dim=128),
        {"data": 1, "fsdp": 8, "tensor": 4}, rows=8),
    "qwen3_30b_a3b": ShardedModel(
        "Qwen3-30B-A3B", dict(vocab_size=151_936, hidden_size=2048, intermediate_size=6144,
                              num_layers=48, num_heads=32, num_kv_heads=4, head_dim=128,
                              num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                              norm_topk_prob=True, moe_dispatch="ragged"),
        {"data": 1, "fsdp": 8, "tensor": 1, "expert": 8}, rows=64),
}


def grouped_matmul_buffers(x, w, group_sizes):
  """A stand-in for `moe.grouped_matmul` with the buffers of an accelerator's grouped matmul
  (megablox, a grouped GEMM): x [M, K] and w [G, K, N] give [M, N], and the gradient w.r.t. w is
  [G, K, N]. One dense dot with the first expert: the shapes are right, the numbers are not.
  XLA:CPU lowers `jax.lax.ragged_dot` to an expansion over the groups with [G, M, N] buffers,
  which no accelerator kernel allocates, so a CPU compile of the real op overstates the memory."""
  del group_sizes
  return x @ w[0]


@contextlib.contextmanager
def accelerator_grouped_matmul():
  """`moe.grouped_matmul` replaced by `grouped_matmul_buffers` inside the block (memory on paper
  only: nothing compiled here runs)."""
  from rlscale.model import moe  # pylint: disable=g-import-not-at-top
  real, moe.grouped_matmul = moe.grouped_matmul, grouped_matmul_buffers
  try:
    yield
  finally:
    moe.grouped_matmul = real


def sharded_entry(name: str, layers: int = 0, prompt_len: int = 2048,
                  response_len: int = 2048) -> dict:
  """Compiles the sharded update step of SHARDED_MODELS[name] on this process's devices (their
  count must be the mesh's) for abstract inputs and returns its entry. layers > 0 overrides the
  layer count (a quick check). An MoE model is compiled twice: with `accelerator_grouped_matmul`
  (per_device_bytes: the accelerator's figure) and with ragged_dot as XLA:CPU lowers it
  (xla_cpu_ragged_dot: its expansion included)."""
  entry = _compile_sharded(name, layers, prompt_len, response_len)
  if not SHARDED_MODELS[name].fields.get("num_experts"):
    return entry
  with accelerator_grouped_matmul():
    accelerator = _compile_sharded(name, layers, prompt_len, response_len)
  keys = ("per_device_bytes", "per_device_peak_bytes", "temp_gib", "peak_gib", "compile_seconds")
  return {**accelerator, "grouped_matmul": "accelerator buffers (grouped_matmul_buffers)",
          "xla_cpu_ragged_dot": {k: entry[k] for k in keys}}


def _compile_sharded(name: str, layers: int, prompt_len: int, response_len: int) -> dict:
  """One AOT compile of `sharded_entry`: its entry."""
  from rlscale.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  from rlscale.train.compile_options import compile_lowered  # pylint: disable=g-import-not-at-top
  from rlscale.train.memory import StepMemory, abstract_batch  # pylint: disable=g-import-not-at-top
  from rlscale.train.state import abstract_train_state  # pylint: disable=g-import-not-at-top
  from rlscale.train.update_fn import make_update_fn  # pylint: disable=g-import-not-at-top
  label, fields, mesh_cfg, rows = SHARDED_MODELS[name]
  model = ModelConfig(**{**fields, "num_layers": layers or fields["num_layers"]},
                      rope_theta=1_000_000.0, tie_embeddings=False, qk_norm=True,
                      dtype="bfloat16", param_dtype="float32", remat=True)
  config = get_config()
  config.rl.prompts_per_step, config.rl.group_size, config.rl.microbatches = 1, rows, 1
  rl = resolve_rl_config(config.rl)
  optimizer = make_optimizer(config.optim, batch_size=rows, total_steps=100)
  mesh = mesh_lib.make_mesh(mesh_cfg)
  start = time.perf_counter()
  fn = make_update_fn(model, rl, optimizer, mesh)
  state = abstract_train_state(model, optimizer)
  batch = abstract_batch(rl, rows, prompt_len, response_len, mesh)
  rng = jax.eval_shape(lambda: jax.random.key(0))
  jitted = fn.jitted(batch)
  stats = compile_lowered(jitted.lower(state, batch, rng), CPU_UPDATE_OPTIONS).memory_analysis()
  memory = StepMemory(temp_bytes=int(stats.temp_size_in_bytes),
                      argument_bytes=int(stats.argument_size_in_bytes),
                      output_bytes=int(stats.output_size_in_bytes),
                      alias_bytes=int(stats.alias_size_in_bytes),
                      generated_code_bytes=int(stats.generated_code_size_in_bytes))

  def shard_bytes(tree, shardings) -> int:
    return sum(math.prod(s.shard_shape(x.shape)) * x.dtype.itemsize
               for x, s in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings)))

  return {"model": label,
          "layers": model.num_layers, "mesh": mesh_cfg, "devices": jax.device_count(),
          "num_params": model.num_params(),
          "num_params_active": model.num_params(active=True), "rows": rows,
          "prompt_len": prompt_len,
          "response_len": response_len, "dtype": model.dtype, "param_dtype": model.param_dtype,
          "remat": True, "per_device_bytes": memory.argument_bytes + memory.output_bytes
          + memory.temp_bytes, "per_device_peak_bytes": memory.peak_bytes,
          "param_bytes_per_device": shard_bytes(state.params, fn.state_shardings.params),
          "optimizer_bytes_per_device": shard_bytes(state.opt_state, fn.state_shardings.opt_state),
          **memory.gib(), "compile_seconds": round(time.perf_counter() - start, 1)}


def run_sharded(out_dir: str, models: list[str], layers: int) -> None:
  """Each entry of `models` in a subprocess with its mesh's device count forced; the entries are
  added (by model and mesh) to out_dir/update_memory.json's "sharded" list."""
  path = os.path.join(out_dir, "update_memory.json")
  existing = {}
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      existing = json.load(f)
  entries = existing.get("sharded", [])
  for name in models:
    devices = math.prod(SHARDED_MODELS[name].mesh.values())
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--out", out_dir,
                          "--one_sharded", name, "--layers", str(layers)], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode:
      print(f"error: {name}: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}",
            file=sys.stderr)
      continue
    entry = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(entry), flush=True)
    entries = [e for e in entries if (e["model"], e["mesh"], e.get("layers")) !=
               (entry["model"], entry["mesh"], entry["layers"])] + [entry]
  existing["sharded"] = entries
  outputs.write_json(path, existing, indent=2)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", required=True)
  parser.add_argument("--layers", type=int, default=None,
                      help="layer count (default: 28 for the 0.6B shape, the model's with --sharded)")
  parser.add_argument("--quick", action="store_true", help="2 layers instead of --layers")
  parser.add_argument("--rows", type=int, default=8)
  parser.add_argument("--prompt_len", type=int, default=512)
  parser.add_argument("--response_len", type=int, default=512)
  parser.add_argument("--dtypes", default="float32", help="compute dtypes, comma-separated")
  parser.add_argument("--sharded", action="store_true",
                      help="the sharded step of --models on their meshes (see the docstring)")
  parser.add_argument("--models", default="qwen3_8b,qwen3_32b")
  parser.add_argument("--one_sharded", help=argparse.SUPPRESS)
  parser.add_argument("--state_table", action="store_true",
                      help="only the per-device training-state table of the Qwen3 sizes")
  args = parser.parse_args()
  if args.state_table:
    rows, table = state_table()
    print(table)
    outputs.write_json(os.path.join(args.out, "state_memory.json"), {"rows": rows}, indent=2)
    return
  if args.one_sharded:
    print(json.dumps(sharded_entry(args.one_sharded, args.layers or 0)))
    return
  if args.sharded:
    unknown = sorted(set(args.models.split(",")) - set(SHARDED_MODELS))
    if unknown:
      parser.exit(2, f"error: --models: unknown {unknown}, allowed {sorted(SHARDED_MODELS)}\n")
    run_sharded(args.out, args.models.split(","), args.layers or 0)
    return
  args.layers = 2 if args.quick else (args.layers or 28)
  config = get_config()
  config.rl.prompts_per_step, config.rl.group_size = 1, args.rows
  rl = resolve_rl_config(config.rl)
  optimizer = make_optimizer(config.optim, batch_size=args.rows, total_steps=100)
  results = []
  for dtype in args.dtypes.split(","):
    for remat in (False, True):
      model = qwen3_0p6b(args.layers, dtype=dtype, remat=remat)
      start = time.perf_counter()
      memory = update_step_memory(model, rl, optimizer, batch_size=args.rows,
                                  prompt_len=args.prompt_len, response_len=args.response_len)
      row = {"dtype": dtype, "remat": remat, **memory.gib(),
             "compile_seconds": round(time.perf_counter() - start, 1)}
      print(json.dumps(row), flush=True)
      results.append(row)
  out = {"model": "Qwen3-0.6B shape", "layers": args.layers, "rows": args.rows,
         "prompt_len": args.prompt_len, "response_len": args.response_len,
         "algorithm": "grpo", "params_dtype": "float32", "backend": jax.default_backend(),
         "jax": jax.__version__, "results": results,
         "before": {"commit": "cb7ab42", "temp_gib": 86.4, "argument_gib": 6.66,
                    "issue_13_quote_temp_gib": 81.6}}
  outputs.write_json(os.path.join(args.out, "update_memory.json"), out, indent=2)


if __name__ == "__main__":
  main()
