"""Memory of the RL update step for a Qwen3-0.6B-shaped policy, from XLA's memory analysis on
this machine's CPU backend (compiled for abstract inputs, never run; see rlscale/train/memory.py).

  python benchmarks/update_memory.py --out DIR [--quick] [--layers 28] [--dtypes float32,bfloat16]
  python benchmarks/update_memory.py --out DIR --state_table   # seconds: no compile

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
count alone. The runner is data-parallel (`jax.pmap`), so every device holds all of it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.configs.default import get_config  # noqa: E402
from rlscale import outputs  # noqa: E402
from rlscale.model.config import ModelConfig  # noqa: E402
from rlscale.rl.presets import resolve_rl_config  # noqa: E402
from rlscale.train.memory import update_step_memory  # noqa: E402
from rlscale.train.optimizer import make_optimizer  # noqa: E402


# The Qwen3 releases' shapes (their config.json); every size has head_dim 128, vocab 151,936.
QWEN3_SIZES = {
    "0.6B": dict(hidden_size=1024, intermediate_size=3072, num_layers=28, num_heads=16,
                 num_kv_heads=8, tie_embeddings=True),
    "1.7B": dict(hidden_size=2048, intermediate_size=6144, num_layers=28, num_heads=16,
                 num_kv_heads=8, tie_embeddings=True),
    "4B": dict(hidden_size=2560, intermediate_size=9728, num_layers=36, num_heads=32,
               num_kv_heads=8, tie_embeddings=True),
    "8B": dict(hidden_size=4096, intermediate_size=12288, num_layers=36, num_heads=32,
               num_kv_heads=8, tie_embeddings=False),
}
GIB = 2 ** 30


def qwen3(size: str, **overrides) -> ModelConfig:
  """The architecture of the Qwen3 release `size` (a key of QWEN3_SIZES), random weights."""
  fields = {**QWEN3_SIZES[size], **overrides}
  return ModelConfig(vocab_size=151_936, head_dim=128, rope_theta=1_000_000.0, qk_norm=True,
                     **fields)


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


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", required=True)
  parser.add_argument("--layers", type=int, default=28)
  parser.add_argument("--quick", action="store_true", help="2 layers instead of --layers")
  parser.add_argument("--rows", type=int, default=8)
  parser.add_argument("--prompt_len", type=int, default=512)
  parser.add_argument("--response_len", type=int, default=512)
  parser.add_argument("--dtypes", default="float32", help="compute dtypes, comma-separated")
  parser.add_argument("--state_table", action="store_true",
                      help="only the per-device training-state table of the Qwen3 sizes")
  args = parser.parse_args()
  if args.state_table:
    rows, table = state_table()
    print(table)
    outputs.write_json(os.path.join(args.out, "state_memory.json"), {"rows": rows}, indent=2)
    return
  if args.quick:
    args.layers = 2
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
