"""Throughput of the RL update step for the W1 model, against a matmul peak measured in this process.

  python benchmarks/update_step.py --out DIR [--quick]

Writes DIR/update_step.json with
  tokens_per_s: {tokens per step: tokens/s}  (every token of [prompt | response] is forwarded and
                back-propagated, so a step's tokens are B x T),
  mfu: {tokens per step: achieved FLOP/s / matmul_flops}, with 6 x params x tokens FLOPs per step
       (forward + backward; params counted with the tied embedding once),
  matmul_flops: jitted float32 [2048, 2048] matmul FLOP/s measured in this process (best of 3)
       right before and after every timed step; the median over steps,
  compiles_after_warmup: backend compilations during the timed steps (should be 0),
  mfu_cpu_time: the same ratio computed from CPU seconds (process time) of the step and of the
       matmul, which other processes on a shared machine disturb much less than wall time,
  seconds_per_step (median), every step's numbers, params, machine (with XLA_FLAGS and the load
  average), and the settings used.

Each step's MFU uses the peak measured next to it (the higher of the two around it) and the report
gives the median over steps: on a shared 2-core machine the speed available to this process can
change twofold within seconds, and pairing cancels such drifts.

The update step is `rlscale.train.update_fn.make_update_fn`'s, jitted over the mesh of every device
(`parallel.mesh.make_mesh(mesh_config())`: {data: 1} on this CPU), which on CPU compiles its
executable alone with YNNPACK dot
fusions (`rlscale.train.compile_options.CPU_UPDATE_OPTIONS`, as the runner does); `--no_ynn` compiles
it with XLA's defaults, `--process_wide_ynn` sets `--xla_cpu_experimental_ynn_fusion_type=dot` in
XLA_FLAGS for the whole process instead (the old way, which slows the sampler). The peak is the
best of a default-compiled and a YNN-compiled matmul.

W1 is the sampler issue's reference workload: Qwen3 layout, hidden 256, intermediate 768, 4 layers,
8 heads, 4 KV heads, head_dim 32, vocab 512 (`ModelConfig()` defaults), random weights from seed 0.
The step is the GRPO preset (PPO clip, seq-mean-token-mean, no KL) with one epoch and minibatch;
sequences are 64 prompt + 64 response tokens, split into microbatches of at most
--microbatch_tokens tokens so memory stays bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

YNN_FLAG = "--xla_cpu_experimental_ynn_fusion_type=dot"
# XLA reads its flags when JAX initialises, so this must happen before `import jax`.
if "--process_wide_ynn" in sys.argv and YNN_FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + YNN_FLAG).strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import (MODEL_FIELDS, add_model_args, machine_info,  # noqa: E402
                               model_config_from_args)
from experiments.configs.default import get_config  # noqa: E402
from rlscale import outputs  # noqa: E402
from rlscale.model.config import ModelConfig  # noqa: E402
from rlscale.model.transformer import init_params  # noqa: E402
from rlscale.parallel.data import global_batch  # noqa: E402
from rlscale.parallel.mesh import make_mesh, mesh_config  # noqa: E402
from rlscale.parallel.shardings import put_on_mesh  # noqa: E402
from rlscale.rl.presets import resolve_rl_config  # noqa: E402
from rlscale.train import update as update_lib  # noqa: E402
from rlscale.train.update_fn import make_update_fn  # noqa: E402
from rlscale.train.compile_options import CPU_UPDATE_OPTIONS, compile_lowered  # noqa: E402
from rlscale.train.optimizer import make_optimizer  # noqa: E402
from rlscale.train.state import create_train_state  # noqa: E402

PROMPT_LEN, RESPONSE_LEN = 64, 64
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def matmul_peak(size: int = 2048, repeats: int = 5) -> tuple[float, float]:
  """Best float32 FLOP/s of a jitted [size, size] @ [size, size] matmul over `repeats` timed runs
  each compiled with XLA's defaults and with the update step's CPU options, per wall second and per
  CPU second of this process."""
  a = jax.random.normal(jax.random.key(1), (size, size), jnp.float32)
  b = jax.random.normal(jax.random.key(2), (size, size), jnp.float32)
  lowered = jax.jit(jnp.matmul).lower(a, b)
  wall, cpu = float("inf"), float("inf")
  for options in ({}, CPU_UPDATE_OPTIONS):  # XLA's default and the update step's dot kernels
    matmul = compile_lowered(lowered, options if jax.default_backend() == "cpu" else {})
    matmul(a, b).block_until_ready()
    for _ in range(repeats):
      start, start_cpu = time.perf_counter(), time.process_time()
      matmul(a, b).block_until_ready()
      wall = min(wall, time.perf_counter() - start)
      cpu = min(cpu, time.process_time() - start_cpu)
  flops = 2.0 * size ** 3
  return flops / wall, flops / cpu


def make_batch(batch_size: int, vocab: int, seed: int = 0, prompt_len: int = PROMPT_LEN,
               response_len: int = RESPONSE_LEN) -> dict[str, np.ndarray]:
  """A full-length rollout batch: random tokens, every prompt and response token real."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, vocab, (batch_size, prompt_len + response_len)).astype(np.int32)
  return {"tokens": tokens, "input_mask": np.ones_like(tokens),
          "response_mask": np.ones((batch_size, response_len), np.int32),
          "old_logp": np.full((batch_size, response_len), -np.log(vocab), np.float32),
          "advantages": rng.normal(size=batch_size).astype(np.float32)}


def time_update(model_config: ModelConfig, tokens_per_step: int, *, microbatch_tokens: int,
                repeats: int, compiles: list, ynn: bool = True) -> dict:
  """Compiles the update step (jitted over the mesh of every device) for one batch size, then times `repeats` steps, each between
  two matmul-peak measurements. Returns per-step wall and CPU seconds, the peak around each step
  (the higher of the two, wall and CPU), and the compilations seen after the warm-up call."""
  seq_len = PROMPT_LEN + RESPONSE_LEN
  batch_size = tokens_per_step // seq_len
  rl_cfg = get_config().rl
  rl_cfg.prompts_per_step, rl_cfg.group_size = batch_size // 8, 8
  rl_cfg.microbatches = max(1, tokens_per_step // microbatch_tokens)
  rl = resolve_rl_config(rl_cfg)
  optimizer = make_optimizer(get_config().optim, **update_lib.optimizer_args(rl, rl_steps=1000))
  params = init_params(model_config, jax.random.key(0))
  mesh = make_mesh(mesh_config())
  update = make_update_fn(model_config, rl, optimizer, mesh,
                          cpu_compiler_options=CPU_UPDATE_OPTIONS if ynn else {})
  state = put_on_mesh(jax.device_get(create_train_state(params, optimizer)), update.state_shardings)
  batch = global_batch(make_batch(batch_size, model_config.vocab_size), mesh)
  state, metrics = update(state, batch, jax.random.key(0))
  jax.block_until_ready(metrics)
  seen = len(compiles)
  steps = []
  before = matmul_peak(repeats=3)
  for i in range(repeats):
    start, start_cpu = time.perf_counter(), time.process_time()
    state, metrics = update(state, batch, jax.random.key(i + 1))
    jax.block_until_ready(metrics)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    after = matmul_peak(repeats=3)
    steps.append({"seconds": wall, "cpu_seconds": cpu, "peak": max(before[0], after[0]),
                  "peak_cpu": max(before[1], after[1])})
    before = after
  return {"steps": steps, "compiles_after_warmup": len(compiles) - seen, "batch_size": batch_size,
          "microbatches": rl.microbatches}


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", required=True, help="directory for update_step.json")
  parser.add_argument("--quick", action="store_true", help="fewer repeats (under 3 minutes)")
  parser.add_argument("--no_ynn", action="store_true",
                      help="compile the update step with XLA's defaults (no YNNPACK dot fusions)")
  parser.add_argument("--process_wide_ynn", action="store_true",
                      help="set " + YNN_FLAG + " in XLA_FLAGS for the whole process")
  parser.add_argument("--tokens", default="4096,16384,65536",
                      help="comma-separated tokens per step to time")
  parser.add_argument("--microbatch_tokens", type=int, default=2048,
                      help="tokens per gradient-accumulation microbatch (2048 was fastest here)")
  add_model_args(parser)
  args = parser.parse_args(argv)

  compiles: list = []
  jax.monitoring.register_event_duration_secs_listener(
      lambda event, duration, **kw: compiles.append(duration) if event == COMPILE_EVENT else None)
  model_config = model_config_from_args(args)
  params = model_config.num_params()
  matmul_peak()  # compile and warm the peak measurement
  summary = {}
  runs = {}
  for tokens in (int(t) for t in args.tokens.split(",")):
    repeats = (1 if tokens > 16384 else 3) if args.quick else 5
    run = time_update(model_config, tokens, microbatch_tokens=args.microbatch_tokens,
                      repeats=repeats, compiles=compiles, ynn=not args.no_ynn)
    flops = 6 * params * tokens
    steps = run["steps"]
    summary[tokens] = {
        "seconds": statistics.median(s["seconds"] for s in steps),
        "mfu": statistics.median(flops / s["seconds"] / s["peak"] for s in steps),
        "mfu_cpu_time": statistics.median(flops / s["cpu_seconds"] / s["peak_cpu"] for s in steps),
        "peak": statistics.median(s["peak"] for s in steps)}
    runs[tokens] = run
    print(f"{tokens} tokens/step: {summary[tokens]['seconds']:.3f} s, "
          f"{tokens / summary[tokens]['seconds']:.0f} tokens/s, MFU {summary[tokens]['mfu']:.1%} "
          f"(CPU-time MFU {summary[tokens]['mfu_cpu_time']:.1%}), "
          f"peak {summary[tokens]['peak'] / 1e9:.0f} GFLOP/s", flush=True)
  report = {
      "tokens_per_s": {str(t): t / r["seconds"] for t, r in summary.items()},
      "mfu": {str(t): r["mfu"] for t, r in summary.items()},
      "matmul_flops": statistics.median(r["peak"] for r in summary.values()),
      "compiles_after_warmup": sum(r["compiles_after_warmup"] for r in runs.values()),
      "mfu_cpu_time": {str(t): r["mfu_cpu_time"] for t, r in summary.items()},
      "matmul_flops_by_size": {str(t): r["peak"] for t, r in summary.items()},
      "seconds_per_step": {str(t): r["seconds"] for t, r in summary.items()},
      "steps": {str(t): r["steps"] for t, r in runs.items()},
      "microbatches": {str(t): r["microbatches"] for t, r in runs.items()},
      "params": params,
      "flops_per_step": {str(t): 6 * params * t for t in summary},
      "sequence": {"prompt_tokens": PROMPT_LEN, "response_tokens": RESPONSE_LEN},
      "machine": {**machine_info(), "load_average": os.getloadavg(),
                  "update_compiler_options": {} if args.no_ynn else CPU_UPDATE_OPTIONS},
      "model": {**{f: getattr(model_config, f) for f in MODEL_FIELDS}, "dtype": args.dtype},
      "quick": args.quick,
  }
  outputs.write_json(os.path.join(args.out, "update_step.json"), report, indent=2)
  print(json.dumps({k: report[k] for k in ("tokens_per_s", "mfu", "mfu_cpu_time", "matmul_flops",
                                            "compiles_after_warmup")}, indent=2))
  return report


if __name__ == "__main__":
  main()
