#!/usr/bin/env bash
# The benchmark suite at GPU scale, for one GPU:
#   bash benchmarks/gpu.sh [OUT_DIR]      (default benchmarks/results/gpu; under 10 minutes)
#   FULL=1 bash benchmarks/gpu.sh [OUT_DIR]   (also the update step, W2 against TRL and the
#                                           study's throughput profile: about 10 more minutes)
#   DRY_RUN=1 bash benchmarks/gpu.sh /tmp/gpu_dry   (tiny sizes on a CPU: checks the plumbing)
#
# Always:
#   aot_table    the reference table's GPU rows (benchmarks/aot_table.py --topologies local):
#                Qwen3-0.6B / 1.7B / 8B GRPO with KL, update + sampler + reference pass for 8 x
#                (512 + 3,584) tokens, compiled by XLA for this GPU at the full layer counts
#                (memory_analysis() against the GPU's allocator limit; nothing allocated);
#   sampler      W1 as on CPU (rlscale generators only: the transformers row of sampler.py runs on
#                the CPU, so it is skipped here).
# With FULL=1, at a Qwen3-layout model with hidden 1024, intermediate 3072, 16 layers, 16 heads,
# 8 KV heads, head_dim 64, vocab 512 (~200M parameters), bf16 compute with float32 parameters and
# Adam moments:
#   update_step  16k and 64k tokens per step (sequences of 64 + 64 tokens);
#   verifier     CPU-only (the same as on the CPU machine; on the GPU host for completeness);
#   rl_step      W2 at scale: 64 prompts x 8 samples = 512 responses of exactly 512 new tokens,
#                rlscale against TRL's GRPOTrainer on the same GPU (TRL's `use_cpu` is off when CUDA
#                is visible; bf16 on);
#   throughput   the batch-size study's throughput profile on this GPU.
# Record the results with the device named (results.json's machine.versions.devices says it).
# Needs jax[cuda] (and torch with CUDA plus trl for the TRL row); CI never runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-benchmarks/results/gpu}"
MODEL="--hidden_size 1024 --intermediate_size 3072 --num_layers 16 --num_heads 16 --num_kv_heads 8 --head_dim 64 --vocab_size 512 --dtype bfloat16"
RL="--rounds 3 --prompts 64 --group 8 --new_tokens 512"
TOKENS="16384,65536"
ONLY="sampler"
[[ "${FULL:-0}" == 1 ]] && ONLY="sampler,update_step,verifier,rl_step"
PLATFORM="cuda"
TABLE="--models qwen3-0.6b,qwen3-1.7b,qwen3-8b"
if [[ "${DRY_RUN:-0}" == 1 ]]; then  # tiny sizes: checks the plumbing on a CPU in about a minute
  PLATFORM="cpu"
  TABLE="--models qwen3-0.6b --layers 1"
  MODEL="--hidden_size 32 --intermediate_size 64 --num_layers 1 --num_heads 2 --num_kv_heads 1 --head_dim 16 --vocab_size 128 --dtype bfloat16"
  RL="--rounds 2 --prompts 2 --group 2 --new_tokens 8"
  TOKENS="1024"
  ONLY="update_step,rl_step"
fi
# XLA would otherwise reserve 75% of GPU memory in the JAX process, leaving little for torch (TRL
# runs in the same process as rlscale in rl_step.py).
export XLA_PYTHON_CLIENT_PREALLOCATE=false
JAX_PLATFORMS="$PLATFORM" python benchmarks/aot_table.py --out "$OUT" --kl --topologies local $TABLE
python benchmarks/run_all.py --quick --out "$OUT" --only "$ONLY" \
  --extra "sampler=--generators rlscale_cache,rlscale_cache_grouped_g8 --host_threads 1" \
  --extra "update_step=--tokens $TOKENS $MODEL" \
  --extra "rl_step=$RL --trl_threads 1 --host_threads 1 $MODEL"
[[ "${FULL:-0}" == 1 || "${DRY_RUN:-0}" == 1 ]] || exit 0
# The batch-size study's throughput side on this machine: N* lives on the sample axis and does not
# depend on the hardware, q(B) does. This profile, combined with the committed study's N*, gives
# this machine's decisions (README, "Re-deciding for your hardware").
if [[ "${DRY_RUN:-0}" == 1 ]]; then STUDY="experiments/sweeps/batch_lr.py:smoke"; PROMPTS="2,4"
else STUDY="experiments/sweeps/batch_lr.py"; PROMPTS="8,32,128"; fi
python -m rlscale.throughput --config="$STUDY" --prompts_per_step="$PROMPTS" --out="$OUT/throughput_batch_lr"
echo "decisions for this machine: python -m rlscale.report experiments/results/batch_lr --throughput=$OUT/throughput_batch_lr --out=$OUT/report_batch_lr"
