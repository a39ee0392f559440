"""The batch-size study where generation matters: worked reasoning from a model beyond the cache.

The main job's 8-token answers make generation ~7% of RL time, so larger batches buy little
throughput. Here the task is chain_sum with 6 one-digit terms and the warm start writes the
running sums (`task.target_template = " {worked}"`, rlscale.tasks.worked): `4 + 1 + 7 - 7 + 7 - 6 =`
-> ` 5 + 7 - 7 + 7 - 6 = 12 - 7 + 7 - 6 = 5 + 7 - 6 = 12 - 6 = 6`, about 60 tokens (the character
tokenizer: one token per character). The model has 11.9M float32 parameters (45 MiB, beyond this
CPU's 32 MiB last-level cache), so each decode step at batch 1 streams the weights from memory:
the throughput profile shows the per-step fixed cost and the batch where per-row work takes over.

Runs: P in {2, 4, 8, 16} at G = 8 (B = 16 .. 128, 8x), LR rules `none` and `sqrt` around
B0 = 64, seeds 0 and 1: 14 runs (the rules coincide at B0). Budget sized for ~90 minutes on an
idle 2-core CPU by a FLOP estimate (~45 ms of training and 15-35 ms of generation per response,
~5 min of SFT per seed; it took 39 min per seed on a loaded machine): 3,072 responses per run,
evaluated every 384 on 128 held-out prompts. The learning rate at B0 = 64 comes from a pilot at
B = 64 (seed 0, warm start at 0.164 greedy accuracy): 1e-4 collapsed the model (0.016 after 384
responses, also at B = 16), 3e-5 fell to 0.07-0.09, 1e-5 held 0.17-0.19 over 1,152 responses.

  python -m rlscale.sweep --config=experiments/sweeps/batch_lr_reasoning.py --workdir=runs/reasoning --parallel=2
  python -m rlscale.throughput --config=experiments/sweeps/batch_lr_reasoning.py \
      --prompts_per_step=1,2,4,8,16 --out=runs/reasoning/throughput --config.sft.cache_dir=runs/reasoning/sft
  python -m rlscale.report runs/reasoning

The committed study (experiments/results/batch_lr_reasoning/) predates issue 19's rules: 2 seeds,
each its own warm start, and its target 0.174 is 0.3 SE above the warm start on 128 held-out
prompts, so its learning side measures noise. Its throughput side (the profile, measured alone)
stands and is what the README reports.

The pilots for a study under issue 19's rules (2026-12-05/06, seed 0, B0 = 64 = P 8 x G 8, one run
each; `:pilot` is the last one, 4-term chain sums, ~25-token worked answers):

  python -m rlscale.main --config=experiments/sweeps/batch_lr_reasoning.py:pilot --workdir=runs/reasoning_pilot

- 6 terms, 128 held-out prompts (the design above): warm start 0.164; lr 1e-4 collapsed (0.016),
  3e-5 fell (0.07-0.09), 1e-5 held 0.17-0.19; the 14-run study's best evaluation was 0.24, noise.
- 4 terms, 512 held-out prompts (SE 0.022 at the warm start 0.508, so 5 SE is ~0.618), lr 2e-5,
  max_new_tokens 40:
  - temperature 0.5, 8,192 responses: 0.508 -> 0.531 (+1 SE), a dip to 0.418 at 1,024; policy
    entropy 0.04-0.07 nats per token, too little exploration for GRPO's groups (545 s of RL).
  - temperature 1.0, 16,384 responses (evaluated every 2,048): greedy 0.508, 0.383, 0.422, 0.445,
    0.523, 0.549, 0.561, 0.570, 0.578 (+3.2 SE); sampled accuracy 0.21 -> 0.27; 1,083 s of RL
    and 834 s of SFT, both beside the PPO sweep.
  - temperature 1.0, 32,768 responses (`:pilot`, evaluated every 4,096): greedy 0.508, 0.428,
    0.484, 0.494, 0.537, 0.590, 0.602, 0.631 at 28,672 (+5.6 SE): learning beyond noise, but it
    crosses 5 SE only at ~85% of the budget, after an early dip that every batch would share.
- Cost of the study under the rules: a 16x span (B = 16 .. 256) with an LR grid, >= 4 seeds and
  a budget where B0 crosses 5 SE mid-budget (~64k responses) is ~20 runs of ~45 min each alone on
  this 2-core CPU, ~15 h: beyond the issue's ~4 hours, so it is not run here. Only the throughput
  side above is reported, labelled as such. These pilots' logs lived on a scratch disk that did not
  survive the session; the numbers are the ones read from them at the time.

Smoke version (seconds): `--config=experiments/sweeps/batch_lr_reasoning.py:smoke`.
"""

import os

from rlscale.runner.config_files import load_config_file
from rlscale.scaling.hyper import batch_lr_grid
from rlscale.scaling.sweep import load_sweep_module

HERE = os.path.dirname(os.path.abspath(__file__))
GRPO = load_sweep_module(os.path.join(HERE, "batch_lr.py"))
LR0 = 1e-5  # from the pilot in the docstring: larger rates collapse this warm start
TOTAL_SAMPLES = 3072
EVAL_EVERY_SAMPLES = 384
ARGS = (None, "smoke", "pilot")


def pilot_config(config):
  """The last pilot of the docstring: 4-term chain sums, temperature 1.0, lr 2e-5 at B0 = 64,
  32,768 responses, 512 held-out prompts."""
  config.task.kwargs.min_terms = 4
  config.task.kwargs.max_terms = 4
  config.rollout.max_new_tokens = 40
  config.rollout.temperature = 1.0
  config.task.eval_size = 512
  config.optim.learning_rate = 2e-5
  config.rl.prompts_per_step = 8
  GRPO.set_budget(config, 32768, 4096)
  return config


def get_config(arg=None):
  """Worked-reasoning chain sums, a 12M-parameter model, B0 = 64 (the study's, the pilot's or
  the smoke's)."""
  GRPO.check_arg(arg, ARGS)
  config = load_config_file(os.path.join(GRPO.CONFIGS, "default.py"))
  config.task.kwargs.min_terms = 6
  config.task.kwargs.max_terms = 6
  config.task.target_template = " {worked}"
  # `a + b + c + d + e + f =` is 23 characters; the worked solution at most ~70 plus EOS.
  config.rollout.max_prompt_tokens = 32
  config.rollout.max_new_tokens = 80
  config.model.hidden_size = 512
  config.model.intermediate_size = 1408
  config.model.num_layers = 4
  config.model.num_heads = 8
  config.model.num_kv_heads = 4
  config.model.head_dim = 64
  config.sft.steps = 300
  config.sft.batch_size = 32
  config.sft.learning_rate = 5e-4
  config.optim.learning_rate = LR0
  config.optim.reference_batch = 64
  config.rl.group_size = 8
  config.rl.microbatches = 2
  config.task.eval_size = 128
  config.eval.pass_k = 2
  GRPO.set_budget(config, TOTAL_SAMPLES, EVAL_EVERY_SAMPLES)
  config.train.checkpoint_every = 50
  if arg == "smoke":
    GRPO.shrink_for_smoke(config)
    config.task.kwargs.min_terms = 3  # ` 4 + 2 = 6`: short worked solutions
    config.task.kwargs.max_terms = 3
    config.rollout.max_new_tokens = 16
    config.optim.learning_rate = GRPO.SMOKE_LR0
  if arg == "pilot":
    pilot_config(config)
  return config


def get_sweep(arg=None):
  """B = 16 .. 128 under none and sqrt, two seeds (the pilot: its one run at B0, seed 0)."""
  GRPO.check_arg(arg, ARGS)
  if arg == "pilot":
    return [{"seed": 0}]
  if arg == "smoke":
    return batch_lr_grid(prompts_per_step=(2, 4), seeds=(0, 1), learning_rate=GRPO.SMOKE_LR0)
  return batch_lr_grid(prompts_per_step=(2, 4, 8, 16), seeds=(0, 1), learning_rate=LR0)
