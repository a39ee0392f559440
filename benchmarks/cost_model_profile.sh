#!/usr/bin/env bash
# Cost-model throughput profiles (issue 41, item 4): GRPO (G = 8) with Qwen3-0.6B and Qwen3-8B at
# all their layers, 512-token prompts and 1K / 4K / 8K-token responses, at B = 64 and 1,024
# responses per step, on a v5p slice of 64 chips (v5p:4x4x4: 95 GiB of HBM per chip holds
# B = 1,024's KV cache of 8.7K slots, 21 GB per chip for Qwen3-8B, beside the sharded state; v5p's
# cost model also reports its own seconds). Mesh {data: 1, fsdp: 64}; one update microbatch
# = 64 rows (one per chip); dense XLA attention ("standard": the cost model counts its flops,
# which it cannot see inside a Pallas kernel); one process (--hosts=1: the prompts' layout).
# Nothing runs on a TPU: each program is compiled for the slice on this CPU and its seconds are
# a roofline bound (rlscale.aot.profile): a cost-model estimate, not a measurement.
#
#   bash benchmarks/cost_model_profile.sh                      # every model x length
#   bash benchmarks/cost_model_profile.sh qwen3-0.6b:1024      # some of them
#
# Writes benchmarks/results/cost_model_profile/<model>_tr<Tr>/throughput.json (+ .png) and
# summary.json (benchmarks/cost_model_summary.py). CPU time of compiling, on 2 busy cores:
# about 9 minutes per length for Qwen3-0.6B, 18 for Qwen3-8B (its update alone 11). The committed
# results are qwen3-0.6b:1024 qwen3-8b:1024 qwen3-0.6b:8192 (a 30-minute CPU budget); the 4K
# lengths and qwen3-8b:8192 were not run.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results/cost_model_profile
RUNS=("$@")
if [ ${#RUNS[@]} -eq 0 ]; then
  RUNS=(qwen3-0.6b:1024 qwen3-8b:1024 qwen3-0.6b:8192 qwen3-8b:8192 qwen3-0.6b:4096 qwen3-8b:4096)
fi
for run in "${RUNS[@]}"; do
  model=${run%%:*}
  tr=${run##*:}
  JAX_PLATFORMS=cpu nice python -m rlscale.throughput --config=experiments/configs/default.py \
    --topology=v5p:4x4x4 --hosts=1 --model="$model" --prompts_per_step=8,128 \
    --microbatch_rows=64 --config.mesh.data=1 --config.mesh.fsdp=-1 \
    --config.model.dtype=bfloat16 --config.model.attention_impl=standard \
    --config.rollout.max_prompt_tokens=512 --config.rollout.max_new_tokens="$tr" \
    --out="$OUT/${model}_tr${tr}"
done
python benchmarks/cost_model_summary.py "$OUT"
