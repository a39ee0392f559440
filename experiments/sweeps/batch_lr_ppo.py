"""The batch-size study with PPO (critic, GAE, two epochs of two minibatches) on the main job's task.

The grid of the GRPO study before its redesign (batch_lr.py's history): B = 64 .. 512 responses per step (G = 1, so P = B prompts), LR rules
`none` and `sqrt`, LR x0.5 / x2 around sqrt at the smallest and largest batch, seeds 0 and 1. The
critic's learning rate is the policy's (optim.critic_learning_rate = None) and is scaled by the
same rule. PPO makes rl.minibatches = 2 optimizer updates per pass, so the LR rule scales with the
minibatch, B / 2: the reference batch 128 means B0 = 256 responses per step as in batch_lr.py.
PPO trains 2 epochs plus a critic: the committed study (experiments/results/batch_lr_ppo/) ran
its 20 runs with --parallel=2 in 18 min 41 s on a 2-core CPU (batch_lr.py: 10 min 17 s), then
its throughput profile alone in 69 s. Commands (the study, its profile alone, the report):

  python -m rlscale.sweep --config=experiments/sweeps/batch_lr_ppo.py --workdir=runs/batch_lr_ppo --parallel=2
  python -m rlscale.throughput --config=experiments/sweeps/batch_lr_ppo.py \
      --prompts_per_step=64,128,256,512 --out=runs/batch_lr_ppo/throughput \
      --config.sft.cache_dir=runs/batch_lr_ppo/sft
  python -m rlscale.report runs/batch_lr_ppo

Smoke version (seconds): `--config=experiments/sweeps/batch_lr_ppo.py:smoke`.
"""

import os

from rlscale.runner.config_files import load_config_file
from rlscale.scaling.hyper import batch_lr_grid
from rlscale.scaling.sweep import load_sweep_module

HERE = os.path.dirname(os.path.abspath(__file__))
GRPO = load_sweep_module(os.path.join(HERE, "batch_lr.py"))
# The committed PPO study's design (the GRPO study's before it was redesigned for power):
LR0 = 1e-4
TOTAL_SAMPLES = 32768
EVAL_EVERY_SAMPLES = 2048


def get_config(arg=None):
  """The PPO config (experiments/configs/ppo.py) with the committed study's budget and GNS
  settings (two microbatches)."""
  GRPO.check_arg(arg)
  config = load_config_file(os.path.join(GRPO.CONFIGS, "ppo.py"))
  config.optim.learning_rate = LR0
  config.optim.critic_learning_rate = None  # = the policy's, scaled by the same rule
  config.optim.reference_batch = 128  # minibatch of B0 = 256 (two minibatches)
  config.rl.group_size = 1
  config.rl.microbatches = 2
  GRPO.set_budget(config, TOTAL_SAMPLES, EVAL_EVERY_SAMPLES)
  config.train.checkpoint_every = 100
  if arg == "smoke":
    GRPO.shrink_for_smoke(config)
    config.rl.group_size = 1
    config.optim.learning_rate = GRPO.SMOKE_LR0
    config.optim.reference_batch = 2  # minibatch of B = 4
  return config


def get_sweep(arg=None):
  """B = P (G = 1): the same batch sizes as batch_lr.py."""
  GRPO.check_arg(arg)
  if arg == "smoke":
    return batch_lr_grid(prompts_per_step=(4, 8), seeds=(0, 1), learning_rate=GRPO.SMOKE_LR0)
  return batch_lr_grid(prompts_per_step=(64, 128, 256, 512), seeds=(0, 1),
                       learning_rate=LR0, grid_prompts=(64, 512), grid_multipliers=(0.5, 2.0))
