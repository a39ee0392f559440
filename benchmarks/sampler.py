"""Generation throughput on workload W1: rlscale with KV cache, without cache, and transformers.

  python benchmarks/sampler.py --out DIR [--quick] [--generators rlscale_cache,transformers]

W1: Qwen3 layout, hidden 256, intermediate 768, 4 layers, 8 heads, 4 KV heads, head_dim 32, vocab
512 (`ModelConfig()` defaults); random weights from a transformers `Qwen3ForCausalLM` built after
`torch.manual_seed(0)`, saved once with `save_pretrained` and loaded into rlscale with
`load_hf_checkpoint`, so all three generators run the same weights. Prompts: 32 random tokens;
responses: exactly 64 new tokens (EOS disabled), temperature 1, no top-k / top-p; batch sizes
1, 4, 16, 64, 256.

Writes DIR/sampler.json with
  tokens_per_s: {generator: {batch: new tokens/s}} for the generators below, the
    median of 5 timed runs after a warm-up (3 with --quick and for rlscale_nocache, which is
    compiled ahead instead of warmed up); null where not run (transformers without torch or not
    in --generators, rlscale_nocache above batch 16 with --quick, rlscale_cache_grouped_g8 below 8);
  tokens_per_cpu_s: the same per CPU-second of this process (all threads), which other processes
    on the machine disturb less than wall time; tokens_per_s_best: from the fastest run;
  roofline_tokens_per_s: matmul_flops / ModelConfig.flops_per_token(context) with context the mean
    number of keys a generated token attends to (32 + 64 / 2);
  matmul_flops: best jitted float32 FLOP/s (wall) over [1024]^3 and [2048]^3 matmuls in this
    process, before and after the generators;
  workload_flops_per_new_token: model FLOPs of the whole workload per generated token: the prefill
    forward over the 32 prompt tokens (token t attends to t + 1 keys) plus the 63 decode forwards
    (mean 64 keys), over 64 new tokens; about 1.45x flops_per_token, because the prompt's keys
    and values must be computed too and the roofline above does not count them;
  generation_mfu: {generator: {batch: tokens_per_s x workload_flops_per_new_token / matmul_flops}},
    the share of the matmul peak the whole generation sustains (prefill included), comparable
    between generators since transformers prefills the same prompts (rlscale_cache_grouped_g8
    counts its one prefill per 8 rows);
  ratios: speedup_vs_transformers {batch: rlscale_cache / transformers}, roofline_fraction_256,
    scaling_256_over_1 (rlscale_cache at 256 / at 1); goals: the issue's targets and whether they
    hold; machine (CPU, versions, XLA_FLAGS, load average before and after: other processes on
    the machine lower every number here).

rlscale_cache is `rlscale.sampler.Sampler` (the runner's path: bucketing, jit over the mesh of the
process's devices, host transfer) with host_threads = the CPU count (row chunks decoded
concurrently), rlscale_cache_one_thread the same with host_threads=1. rlscale_cache_grouped_g8 is
not W1 but its GRPO-shaped variant: B / 8 distinct prompts x 8 samples each (batches >= 8), drawn
with `samples_per_prompt=8`, which prefills each prompt once; its tokens/s shows what sharing the
prefill saves at the same batch. rlscale_nocache reruns the full causal forward over all Tp + Tr
slots at every step inside one jitted `lax.fori_loop`: the cost a sampler without a KV cache pays.
transformers is `model.generate(use_cache=True, do_sample=True, top_k=0)` with
`torch.set_num_threads(2)`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import machine_info  # noqa: E402
from rlscale import outputs  # noqa: E402
from rlscale.model import ModelConfig, forward, load_hf_checkpoint  # noqa: E402
from rlscale.sampler import SamplingConfig, Sampler, sample_token  # noqa: E402

PROMPT_LEN, NEW_TOKENS, SEED = 32, 64, 0
GENERATORS = ("rlscale_cache", "rlscale_cache_one_thread", "rlscale_cache_grouped_g8",
              "rlscale_nocache", "transformers")
GROUP = 8  # samples per prompt of rlscale_cache_grouped_g8
NOCACHE_QUICK_MAX_BATCH = 16  # --quick: the uncached sampler costs ~4 s per 1000 tokens at batch 64
BATCHES = (1, 4, 16, 64, 256)
SAMPLING = SamplingConfig(temperature=1.0)
GOALS = {"speedup_vs_transformers_at_1": 5.0, "speedup_vs_transformers_at_64": 3.0,
         "roofline_fraction_256": 0.5, "scaling_256_over_1": 20.0}


def save_w1_checkpoint(directory: str) -> bool:
  """Writes the W1 transformers checkpoint (seed 0) to `directory`; False when torch is absent."""
  try:
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
  except ImportError:
    return False
  c = ModelConfig()
  hf_config = transformers.Qwen3Config(
      vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
      num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
      num_key_value_heads=c.num_kv_heads, head_dim=c.head_dim, rope_theta=c.rope_theta,
      rms_norm_eps=c.rms_norm_eps, tie_word_embeddings=True, max_position_embeddings=4096)
  torch.manual_seed(SEED)
  transformers.Qwen3ForCausalLM(hf_config).save_pretrained(directory)
  return True


def random_w1_params(config: ModelConfig) -> dict:
  """Fallback without torch: rlscale's own random init (seed 0)."""
  from rlscale.model import init_params  # pylint: disable=g-import-not-at-top
  return init_params(config, jax.random.key(SEED))


def prompts(batch: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
  """[batch, PROMPT_LEN] random tokens (seed 0), all real."""
  tokens = np.random.default_rng(SEED).integers(0, vocab, (batch, PROMPT_LEN)).astype(np.int32)
  return tokens, np.ones_like(tokens)


class Timing(NamedTuple):
  """Seconds per call of one generator at one batch size.

  wall: median wall time; cpu: median CPU time of this process (all threads), which other
  processes on the machine disturb less; best: the fastest wall time."""
  wall: float
  cpu: float
  best: float


def time_calls(run, repeats: int, warmup: bool = True) -> Timing:
  """Times `repeats` calls run(0), run(1), ... after one warm-up call run(-1) (which compiles)."""
  if warmup:
    run(-1)
  wall, cpu = [], []
  for i in range(repeats):
    start, start_cpu = time.perf_counter(), time.process_time()
    run(i)
    wall.append(time.perf_counter() - start)
    cpu.append(time.process_time() - start_cpu)
  return Timing(statistics.median(wall), statistics.median(cpu), min(wall))


def matmul_flops(sizes=(1024, 2048), repeats: int = 3) -> float:
  """Best float32 FLOP/s (wall clock) of jitted [n, n] @ [n, n] matmuls, n in `sizes`."""
  best = 0.0
  for n in sizes:
    a, b = jnp.ones((n, n), jnp.float32), jnp.full((n, n), 0.5, jnp.float32)
    matmul = jax.jit(jnp.matmul)
    jax.block_until_ready(matmul(a, b))
    for _ in range(repeats):
      start = time.perf_counter()
      jax.block_until_ready(matmul(a, b))
      best = max(best, 2.0 * n ** 3 / (time.perf_counter() - start))
  return best


def time_cache(config, params, batch, repeats, host_threads, group: int = 1) -> Timing:
  """Sampler timing for `batch` responses: batch / group distinct prompts x group samples."""
  sampler = Sampler(config, NEW_TOKENS, SAMPLING, eos_ids=(), pad_id=0, prompt_buckets=(PROMPT_LEN,),
                    host_threads=host_threads)
  tokens, mask = prompts(batch // group, config.vocab_size)
  return time_calls(lambda i: sampler(params, tokens, mask, jax.random.key(i + 1),
                                      samples_per_prompt=group), repeats)


def make_nocache_generate(config: ModelConfig):
  """Jitted sampler without a KV cache: a full forward over all slots for every new token."""

  @jax.jit
  def generate_nocache(params, prompt_tokens, prompt_mask, rng):
    batch = prompt_tokens.shape[0]
    tokens = jnp.concatenate([prompt_tokens, jnp.zeros((batch, NEW_TOKENS), jnp.int32)], axis=1)
    input_mask = jnp.concatenate([prompt_mask, jnp.zeros((batch, NEW_TOKENS), jnp.int32)], axis=1)

    def step(i, carry):
      tokens, input_mask, logp = carry
      logits = forward(params, config, tokens, input_mask).logits[:, PROMPT_LEN - 1 + i]
      token, token_logp = sample_token(logits, jax.random.fold_in(rng, i), SAMPLING)
      tokens = tokens.at[:, PROMPT_LEN + i].set(token)
      input_mask = input_mask.at[:, PROMPT_LEN + i].set(1)
      return tokens, input_mask, logp.at[:, i].set(token_logp)

    logp = jnp.zeros((batch, NEW_TOKENS), jnp.float32)
    return jax.lax.fori_loop(0, NEW_TOKENS, step, (tokens, input_mask, logp))

  return generate_nocache


def time_nocache(config, params, batch, repeats) -> Timing:
  tokens, mask = prompts(batch, config.vocab_size)
  # Compiled ahead instead of a warm-up run: one run takes a minute at batch 256.
  compiled = make_nocache_generate(config).lower(params, tokens, mask, jax.random.key(0)).compile()
  def run(i):
    jax.block_until_ready(compiled(params, tokens, mask, jax.random.key(i + 1)))
  return time_calls(run, repeats, warmup=False)


def time_transformers(directory, batch, repeats) -> Timing:
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(2)
  # The class the checkpoint names (Qwen3ForCausalLM for W1, Qwen3MoeForCausalLM for W1-MoE).
  model = transformers.AutoModelForCausalLM.from_pretrained(directory,
                                                            dtype=torch.float32).eval()
  tokens, mask = prompts(batch, model.config.vocab_size)
  tokens, mask = torch.from_numpy(tokens).long(), torch.from_numpy(mask).long()

  def run(i):
    torch.manual_seed(i + 1)
    with torch.no_grad():
      out = model.generate(tokens, attention_mask=mask, max_new_tokens=NEW_TOKENS,
                           min_new_tokens=NEW_TOKENS, do_sample=True, temperature=1.0, top_k=0,
                           top_p=1.0, use_cache=True, pad_token_id=0, eos_token_id=None)
    assert out.shape == (batch, PROMPT_LEN + NEW_TOKENS), out.shape

  return time_calls(run, repeats)


def workload_flops_per_new_token(config: ModelConfig, group: int = 1) -> float:
  """Model FLOPs of one W1 row (prefill of PROMPT_LEN tokens, NEW_TOKENS - 1 decode forwards; the
  first new token comes from the prefill) divided by NEW_TOKENS; with `group` rows sharing one
  prompt's prefill, each row carries 1/group of it."""
  prefill = PROMPT_LEN * config.flops_per_token((PROMPT_LEN + 1) / 2) / group
  decode = (NEW_TOKENS - 1) * config.flops_per_token(PROMPT_LEN + NEW_TOKENS / 2)
  return (prefill + decode) / NEW_TOKENS


def ratios_and_goals(tokens_per_s: dict, roofline: float) -> tuple[dict, dict]:
  cache, hf = tokens_per_s["rlscale_cache"], tokens_per_s["transformers"]
  speedup = {b: (cache[b] / hf[b] if hf.get(b) else None) for b in cache}
  ratios = {"speedup_vs_transformers": speedup,
            "roofline_fraction_256": cache["256"] / roofline,
            "scaling_256_over_1": cache["256"] / cache["1"],
            "nocache_over_cache": {b: (v / cache[b] if v else None)
                                   for b, v in tokens_per_s["rlscale_nocache"].items()}}
  measured = {"speedup_vs_transformers_at_1": speedup["1"],
              "speedup_vs_transformers_at_64": speedup["64"],
              "roofline_fraction_256": ratios["roofline_fraction_256"],
              "scaling_256_over_1": ratios["scaling_256_over_1"]}
  goals = {name: {"target": target, "measured": measured[name],
                  "met": None if measured[name] is None else measured[name] >= target}
           for name, target in GOALS.items()}
  return ratios, goals


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", required=True, help="directory for sampler.json")
  parser.add_argument("--quick", action="store_true",
                      help="3 repeats, rlscale_nocache only up to batch 16 (under 3 minutes)")
  parser.add_argument("--host_threads", type=int, default=os.cpu_count(),
                      help="Sampler(host_threads=...) for rlscale_cache (default: the CPU count)")
  parser.add_argument("--generators", default=",".join(GENERATORS),
                      help=f"comma-separated subset of {','.join(GENERATORS)} to time")
  args = parser.parse_args(argv)
  repeats = 3 if args.quick else 5
  chosen = args.generators.split(",")
  if not set(chosen) <= set(GENERATORS) or "rlscale_cache" not in chosen:
    parser.error(f"--generators must include rlscale_cache and name only {GENERATORS}, "
                 f"got {args.generators!r}")
  load_before = os.getloadavg()
  peak = max(matmul_flops() for _ in range(2))
  with tempfile.TemporaryDirectory() as directory:
    have_torch = save_w1_checkpoint(directory)
    if have_torch:
      config, params = load_hf_checkpoint(directory)
    else:
      config = ModelConfig()
      params = random_w1_params(config)
    assert config == ModelConfig(), config
    params = jax.device_put(params)
    rates = {kind: {name: {} for name in GENERATORS} for kind in Timing._fields}
    for batch in BATCHES:
      threads = args.host_threads
      timers = {"rlscale_cache": lambda: time_cache(config, params, batch, repeats, threads)}
      if "rlscale_cache_one_thread" in chosen:
        timers["rlscale_cache_one_thread"] = lambda: time_cache(config, params, batch, repeats, 1)
      if "rlscale_cache_grouped_g8" in chosen and batch >= GROUP:
        timers["rlscale_cache_grouped_g8"] = lambda: time_cache(config, params, batch, repeats,
                                                                threads, GROUP)
      if "rlscale_nocache" in chosen and not (args.quick and batch > NOCACHE_QUICK_MAX_BATCH):
        # 3 runs at most: one takes about a minute at batch 256.
        timers["rlscale_nocache"] = lambda: time_nocache(config, params, batch, min(repeats, 3))
      if have_torch and "transformers" in chosen:
        timers["transformers"] = lambda: time_transformers(directory, batch, repeats)
      for name in GENERATORS:
        timing = timers[name]() if name in timers else Timing(None, None, None)
        for kind, seconds in timing._asdict().items():
          rates[kind][name][str(batch)] = batch * NEW_TOKENS / seconds if seconds else None
      print(f"batch {batch}: " + ", ".join(
          f"{name} {rates['wall'][name][str(batch)] or 0:.0f}" for name in GENERATORS) + " tokens/s",
          flush=True)
    tokens_per_s = rates["wall"]
  peak = max(peak, matmul_flops())  # again, in case the machine sped up meanwhile
  context = PROMPT_LEN + NEW_TOKENS // 2
  roofline = peak / config.flops_per_token(context)
  ratios, goals = ratios_and_goals(tokens_per_s, roofline)
  workload_flops = workload_flops_per_new_token(config)
  mfu = {name: {b: (rate * workload_flops_per_new_token(config, GROUP if "grouped" in name else 1)
                    / peak if rate else None) for b, rate in rates.items()}
         for name, rates in tokens_per_s.items()}
  report = {
      "tokens_per_s": tokens_per_s,
      "tokens_per_cpu_s": rates["cpu"],
      "tokens_per_s_best": rates["best"],
      "roofline_tokens_per_s": roofline,
      "matmul_flops": peak,
      "flops_per_token": config.flops_per_token(context),
      "workload_flops_per_new_token": workload_flops,
      "generation_mfu": mfu,
      "context_for_flops": context,
      "ratios": ratios,
      "goals": goals,
      "workload": {"name": "W1", "prompt_tokens": PROMPT_LEN, "new_tokens": NEW_TOKENS,
                   "batches": list(BATCHES), "temperature": SAMPLING.temperature,
                   "params": config.num_params(), "weights": "transformers Qwen3ForCausalLM, "
                   "torch.manual_seed(0)" if have_torch else "rlscale init_params(key 0)"},
      "repeats": repeats,
      "host_threads": args.host_threads,
      "quick": args.quick,
      "machine": {**machine_info(), "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
  }
  outputs.write_json(os.path.join(args.out, "sampler.json"), report, indent=2)
  print(json.dumps({k: report[k] for k in ("ratios", "goals", "roofline_tokens_per_s",
                                           "generation_mfu")}, indent=2))
  return report


if __name__ == "__main__":
  main()
