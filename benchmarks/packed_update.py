"""One GRPO update on W3, padded (one row per response) against packed (train.max_tokens_per_row).

  python benchmarks/packed_update.py --out benchmarks/results            # the committed result
  python benchmarks/packed_update.py --out /tmp/w3 --quick               # a check (seconds)

W3 is the long-tailed workload of issue 42 (design.md): the W1 model (`ModelConfig()` defaults,
random weights from seed 0), 64 responses (P = 8 prompts x G = 8) to 32-token prompts with
response lengths 48 x 64, 12 x 256 and 4 x 1,024 tokens: 12,288 real tokens (2,048 prompt +
10,240 response), padded to the longest, 64 x (32 + 1,024) = 67,584. The step is the GRPO preset
(PPO clip, seq-mean-token-mean, no KL), one epoch and minibatch, rl.microbatches unset (the CPU
rule: slices of >= 1,024 tokens, whole groups), CPU compiler options as the runner's; packed with
train.max_tokens_per_row = each of --widths and no token budget (the same CPU rule in rows).

Writes OUT/packed_update.json: for padded and each packed width, seconds per update (median of
--repeats after a compile call), real tokens/s (12,288 / seconds), the microbatch layout and the
first update's loss and grad_norm from the same start; `packed_over_padded` is the best packed
width's real tokens/s over the padded one's, `loss_diff` the largest |loss packed - loss padded|.
Pause other jobs while it runs: it times wall seconds on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import machine_info  # noqa: E402
from experiments.configs.default import get_config  # noqa: E402
from rlscale import outputs  # noqa: E402
from rlscale.model.config import ModelConfig  # noqa: E402
from rlscale.model.transformer import init_params  # noqa: E402
from rlscale.packing import layout  # noqa: E402
from rlscale.parallel.data import global_batch  # noqa: E402
from rlscale.parallel.mesh import make_mesh, mesh_config  # noqa: E402
from rlscale.parallel.shardings import put_on_mesh  # noqa: E402
from rlscale.rl.presets import resolve_rl_config  # noqa: E402
from rlscale.train import update as update_lib  # noqa: E402
from rlscale.train.optimizer import make_optimizer  # noqa: E402
from rlscale.train.state import create_train_state  # noqa: E402
from rlscale.train.update_fn import make_update_fn  # noqa: E402

PROMPT_LEN = 32
W3_LENGTHS = (64,) * 48 + (256,) * 12 + (1024,) * 4  # response tokens of the 64 responses
GROUP = 8


def w3_batch(lengths, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
  """The padded batch: full 32-token prompts, responses of `lengths` tokens (left-aligned, padded
  to the longest), random tokens, old_logp at the uniform policy, random advantages. The lengths
  are dealt round the rows so every group holds long and short responses."""
  rng = np.random.default_rng(seed)
  lengths = np.asarray(lengths)[rng.permutation(len(lengths))]
  rows, response = len(lengths), int(lengths.max())
  tokens = rng.integers(1, vocab, (rows, PROMPT_LEN + response)).astype(np.int32)
  response_mask = (np.arange(response)[None] < lengths[:, None]).astype(np.int32)
  tokens[:, PROMPT_LEN:] *= response_mask
  return {"tokens": tokens,
          "input_mask": np.concatenate([np.ones((rows, PROMPT_LEN), np.int32), response_mask], 1),
          "response_mask": response_mask,
          "old_logp": np.full((rows, response), -np.log(vocab), np.float32) * response_mask,
          "advantages": rng.normal(size=rows).astype(np.float32)}


def time_layout(model_config, host, *, width, repeats: int) -> dict:
  """Seconds per update (median of `repeats` after the compiling call), the layout and the first
  update's loss: padded when width is None, else packed into rows of `width` tokens."""
  rl_cfg = get_config().rl
  rl_cfg.prompts_per_step, rl_cfg.group_size = len(host["tokens"]) // GROUP, GROUP
  rl = resolve_rl_config(rl_cfg)
  optimizer = make_optimizer(get_config().optim, **update_lib.optimizer_args(rl, rl_steps=1000))
  mesh = make_mesh(mesh_config())
  update = make_update_fn(model_config, rl, optimizer, mesh)
  state = put_on_mesh(jax.device_get(create_train_state(init_params(model_config,
                                                                    jax.random.key(0)),
                                                        optimizer)), update.state_shardings)
  batch = global_batch(host, mesh)
  plan = None
  if width is not None:
    plan = layout.update_plan(host["input_mask"], host["response_mask"].shape[1], None, rl,
                              width=width)
  args = () if plan is None else (plan.arrays(),)
  start = time.perf_counter()
  state, metrics = update(state, batch, jax.random.key(0), *args)
  first = {k: float(v) for k, v in jax.device_get(metrics).items()}
  compile_seconds = time.perf_counter() - start
  seconds = []
  for i in range(repeats):
    start = time.perf_counter()
    state, metrics = update(state, batch, jax.random.key(i + 1), *args)
    jax.block_until_ready(metrics)
    seconds.append(time.perf_counter() - start)
  rows, width_t = host["tokens"].shape
  shape = ({"rows": rows, "width": width_t,
            "microbatches": update_lib.microbatch_count(None, rows, width_t, group_size=GROUP)}
           if plan is None else
           {"width": width, "microbatches": plan.microbatches,
            "rows_per_microbatch": plan.rows_per_microbatch,
            "packed_rows": int((plan.segment_ids.max(axis=-1) > 0).sum())})
  return {"seconds": statistics.median(seconds), "every_seconds": seconds,
          "first_call_seconds": compile_seconds, "loss": first["loss"],
          "grad_norm": first["grad_norm"], **shape}


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", required=True)
  parser.add_argument("--widths", default="1056,2048",
                      help="packed row widths, tokens (each >= 32 + 1,024)")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--quick", action="store_true",
                      help="a 1-layer width-64 model and responses 1/16 as long: checks the script")
  args = parser.parse_args(argv)
  model_config = ModelConfig()
  lengths = W3_LENGTHS
  widths = [int(w) for w in args.widths.split(",")]
  if args.quick:
    model_config = ModelConfig(num_layers=1, hidden_size=64, intermediate_size=128,
                               num_heads=2, num_kv_heads=1, head_dim=32, vocab_size=128)
    lengths = tuple(n // 16 for n in W3_LENGTHS)
    widths = [PROMPT_LEN + max(lengths)]
  host = w3_batch(lengths, model_config.vocab_size)
  real = int(host["input_mask"].sum())
  results = {"padded": time_layout(model_config, host, width=None, repeats=args.repeats)}
  for width in widths:
    results[f"packed_{width}"] = time_layout(model_config, host, width=width,
                                             repeats=args.repeats)
  for name, result in results.items():
    result["real_tokens_per_s"] = real / result["seconds"]
    print(f"{name}: {result['seconds']:.2f} s per update, "
          f"{result['real_tokens_per_s']:.0f} real tokens/s, loss {result['loss']:.6f}",
          flush=True)
  packed = [r for name, r in results.items() if name != "padded"]
  report = {
      "packed_over_padded": max(r["real_tokens_per_s"] for r in packed)
                            / results["padded"]["real_tokens_per_s"],
      "loss_diff": max(abs(r["loss"] - results["padded"]["loss"]) for r in packed),
      "grad_norm_diff": max(abs(r["grad_norm"] - results["padded"]["grad_norm"]) for r in packed),
      "real_tokens": real, "padded_tokens": int(host["tokens"].size),
      "response_lengths": {str(n): lengths.count(n) for n in sorted(set(lengths))},
      "prompt_tokens": PROMPT_LEN, "results": results, "quick": args.quick,
      "model": {"num_layers": model_config.num_layers, "hidden_size": model_config.hidden_size,
                "attention_impl": model_config.attention_impl},
      "machine": {**machine_info(), "load_average": os.getloadavg()},
  }
  outputs.write_json(os.path.join(args.out, "packed_update.json"), report, indent=2)
  print(json.dumps({k: report[k] for k in ("packed_over_padded", "loss_diff")}, indent=2))
  return report


if __name__ == "__main__":
  main()
