"""Where the sampler's time goes: XLA:CPU per-op profile of W1 generation at one batch size.

  python benchmarks/profile_sampler.py --out DIR [--batch 64] [--host_threads 1] [--calls 2]

W1 as in `sampler.py` (rlscale's random init, seed 0; 32-token prompts, exactly 64 new tokens,
temperature 1): compiles the Sampler for the batch, runs it `--calls` times under
`jax.profiler.trace`, and sums the duration of every XLA thunk by category, as
`profile_update.py` does for the update step. A decode step's matmuls have only B rows, so the
categories show how much of the loop is matmul and how much the per-step work around it
(attention over the cache, sampling, cache writes, the loop itself).
Writes DIR/sampler_profile.json: wall seconds per call, new tokens/s, op seconds per category and
per op name (top 30), and the load average. Timings on a shared machine are inflated; the shares
much less so.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import jax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=g-import-not-at-top,wrong-import-position (after the sys.path line)
from benchmarks.common import load_average, machine_info
from benchmarks.profile_update import op_breakdown, op_times, print_breakdown
from benchmarks.sampler import NEW_TOKENS, PROMPT_LEN, SAMPLING, prompts, random_w1_params
from rlscale import outputs
from rlscale.model.config import ModelConfig
from rlscale.sampler import Sampler


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", required=True)
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--host_threads", type=int, default=1)
  parser.add_argument("--calls", type=int, default=2)
  args = parser.parse_args(argv)
  config = ModelConfig()
  params = random_w1_params(config)
  sampler = Sampler(config, NEW_TOKENS, SAMPLING, eos_ids=(), pad_id=0,
                    prompt_buckets=(PROMPT_LEN,), host_threads=args.host_threads)
  tokens, mask = prompts(args.batch, config.vocab_size)
  sampler(params, tokens, mask, jax.random.key(0))  # compiles
  load = load_average()
  with tempfile.TemporaryDirectory() as trace_dir:
    start = time.perf_counter()
    with jax.profiler.trace(trace_dir):
      for i in range(args.calls):
        sampler(params, tokens, mask, jax.random.key(i + 1))
    wall = (time.perf_counter() - start) / args.calls
    ops = op_times(trace_dir)
  breakdown = op_breakdown(ops, args.calls)
  report = {
      "batch": args.batch, "host_threads": args.host_threads, "new_tokens": NEW_TOKENS,
      "prompt_tokens": PROMPT_LEN, "wall_seconds_per_call": wall,
      "new_tokens_per_s": args.batch * NEW_TOKENS / wall,
      "op_seconds_per_call": breakdown["op_seconds"],
      "categories": breakdown["categories"], "top_ops": breakdown["top_ops"],
      "load_average": [load, load_average()], "machine": machine_info(),
  }
  outputs.write_json(os.path.join(args.out, "sampler_profile.json"), report, indent=2)
  print(f"batch {args.batch}: {wall:.3f} s per call ({report['new_tokens_per_s']:,.0f} new "
        f"tokens/s), op time {breakdown['op_seconds']:.3f} s (summed over threads); load {load}")
  print_breakdown(breakdown)
  return report


if __name__ == "__main__":
  main()
