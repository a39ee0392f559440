"""Generation throughput on W1-MoE: rlscale's KV-cached sampler against transformers' generate.

  python benchmarks/moe_sampler.py --out DIR [--quick] [--batches 1,16,64]

W1-MoE is W1 (`benchmarks/sampler.py`: hidden 256, 4 layers, 8 heads, 4 KV heads, head_dim 32,
vocab 512; 32 random prompt tokens, exactly 64 new tokens, temperature 1) with every MLP a
Qwen3-MoE block of E = 8 experts, top-2 with renormalised weights, expert width 384 (k x 384 =
W1's 768: the same active size). Random weights from a transformers `Qwen3MoeForCausalLM` built
after `torch.manual_seed(0)`, saved with `save_pretrained` and loaded into rlscale with
`load_hf_checkpoint`, so both run the same weights; batch sizes 1, 16, 64.

rlscale runs `Sampler` (host_threads = the CPU count) with `model.moe_dispatch` "auto" (the
dense every-expert path on CPU) and, as `rlscale_ragged`, the sorted ragged_dot dispatch;
transformers runs `generate(use_cache=True, do_sample=True, top_k=0)` with 2 torch threads.

Writes DIR/moe_sampler.json: tokens_per_s {generator: {batch: new tokens/s}} (median of 5 timed
runs after a warm-up, 3 with --quick), tokens_per_cpu_s, speedup_vs_transformers {generator:
{batch: ratio}}, the workload and the machine (load before and after: other processes lower
every number). Needs torch and transformers (the `test` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import jax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import machine_info  # noqa: E402
from benchmarks.sampler import NEW_TOKENS, PROMPT_LEN, SEED, time_cache, time_transformers  # noqa: E402
from rlscale import outputs  # noqa: E402
from rlscale.model import ModelConfig, load_hf_checkpoint  # noqa: E402

BATCHES = (1, 16, 64)
EXPERTS, TOP_K = 8, 2
GENERATORS = ("rlscale", "rlscale_ragged", "transformers")


def save_w1_moe_checkpoint(directory: str) -> None:
  """Writes the W1-MoE transformers checkpoint (seed 0) to `directory`."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  c = ModelConfig()
  hf_config = transformers.Qwen3MoeConfig(
      vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
      moe_intermediate_size=c.intermediate_size // TOP_K, num_experts=EXPERTS,
      num_experts_per_tok=TOP_K, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
      num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
      num_key_value_heads=c.num_kv_heads, head_dim=c.head_dim, rope_theta=c.rope_theta,
      rms_norm_eps=c.rms_norm_eps, tie_word_embeddings=True, max_position_embeddings=4096)
  torch.manual_seed(SEED)
  transformers.Qwen3MoeForCausalLM(hf_config).save_pretrained(directory)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", required=True, help="directory for moe_sampler.json")
  parser.add_argument("--quick", action="store_true", help="3 timed runs instead of 5")
  parser.add_argument("--batches", default=",".join(map(str, BATCHES)),
                      help="comma-separated batch sizes (responses)")
  args = parser.parse_args(argv)
  batches = [int(b) for b in args.batches.split(",")]
  repeats = 3 if args.quick else 5
  load_before = os.getloadavg()
  threads = os.cpu_count()
  with tempfile.TemporaryDirectory() as directory:
    save_w1_moe_checkpoint(directory)
    config, params = load_hf_checkpoint(directory)
    assert (config.num_experts, config.num_experts_per_tok) == (EXPERTS, TOP_K), config
    params = jax.device_put(params)
    configs = {"rlscale": config.replace(moe_dispatch="auto"),
               "rlscale_ragged": config.replace(moe_dispatch="ragged")}
    rates = {"wall": {g: {} for g in GENERATORS}, "cpu": {g: {} for g in GENERATORS}}
    for batch in batches:
      for name in GENERATORS:
        timing = (time_transformers(directory, batch, repeats) if name == "transformers" else
                  time_cache(configs[name], params, batch, repeats, threads))
        rates["wall"][name][str(batch)] = batch * NEW_TOKENS / timing.wall
        rates["cpu"][name][str(batch)] = batch * NEW_TOKENS / timing.cpu
      print(f"batch {batch}: " + ", ".join(f"{g} {rates['wall'][g][str(batch)]:.0f}"
                                           for g in GENERATORS) + " tokens/s", flush=True)
  hf = rates["wall"]["transformers"]
  report = {
      "tokens_per_s": rates["wall"],
      "tokens_per_cpu_s": rates["cpu"],
      "speedup_vs_transformers": {g: {b: rates["wall"][g][b] / hf[b] for b in hf}
                                  for g in ("rlscale", "rlscale_ragged")},
      "workload": {"name": "W1-MoE", "prompt_tokens": PROMPT_LEN, "new_tokens": NEW_TOKENS,
                   "batches": batches, "experts": EXPERTS, "top_k": TOP_K,
                   "params_total": config.num_params(),
                   "params_active": config.num_params(active=True),
                   "weights": "transformers Qwen3MoeForCausalLM, torch.manual_seed(0)"},
      "repeats": repeats,
      "host_threads": threads,
      "machine": {**machine_info(), "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
  }
  outputs.write_json(os.path.join(args.out, "moe_sampler.json"), report, indent=2)
  print(json.dumps({k: report[k] for k in ("tokens_per_s", "speedup_vs_transformers")}, indent=2))
  return report


if __name__ == "__main__":
  main()
