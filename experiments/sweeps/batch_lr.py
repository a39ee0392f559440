"""The batch-size study on the main job's task: batch x LR rule x LR grid x seeds, GRPO.

Runs (every run consumes the same number of responses and evaluates at the same counts):
- P in {8, 16, 32, 64} prompts per step at G = 8: B = 64 .. 512 responses (8x);
- LR rules `none` and `sqrt` relative to the main job's B0 = 256 (lr0 = 1e-4); at B0 they coincide
  and run once;
- an LR grid x0.5 and x2 around the sqrt rule at the smallest and largest batch ("retuned" = the
  best LR found there; sqrt x2 at B = 64 is `none` and runs once);
- seeds 0 and 1 (each seed its own warm start, shared by all its runs).
20 runs; rl.microbatches = 2 so the report can estimate the gradient noise scale on one device.

Commands (the study, then its throughput profile alone on the machine, then the report):

  python -m rlscale.sweep --config=experiments/sweeps/batch_lr.py --workdir=runs/batch_lr --parallel=2
  python -m rlscale.throughput --config=experiments/sweeps/batch_lr.py \
      --prompts_per_step=8,16,32,64 --out=runs/batch_lr/throughput \
      --config.sft.cache_dir=runs/batch_lr/sft
  python -m rlscale.report runs/batch_lr

Smoke version (seconds): `--config=experiments/sweeps/batch_lr.py:smoke`. List the runs' commands
(one per line, e.g. for a SLURM array): add `--list`; run a share: `--shard=i/n`.
"""

import os

from rlscale.runner.config_files import load_config_file
from rlscale.scaling.hyper import batch_lr_grid

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs")
LR0 = 1e-4  # the main job's learning rate at B0 = 256
SMOKE_LR0 = 3e-3  # large, so a few smoke steps move the held-out curves
# Budget in responses and evaluation interval (all runs): 64 steps at B = 512, 512 at B = 64,
# 16 evaluations; a quarter of the main job's 128k responses (enough for ~+12 points here). The
# committed study (experiments/results/batch_lr/) ran exactly this: 20 runs with --parallel=2 in
# 10 min 17 s on a 2-core CPU, both warm starts included. A budget of 65,536 would give longer
# curves at twice the cost.
TOTAL_SAMPLES = 32768
EVAL_EVERY_SAMPLES = 2048


def check_arg(arg):
  if arg not in (None, "smoke"):
    raise ValueError(f"sweep argument {arg!r} is not one of [None, 'smoke']")


def set_budget(config, total_samples, eval_every_samples):
  """Budget in responses and evaluation interval, equal for every run of the sweep."""
  config.train.total_steps = None
  config.train.total_samples = total_samples
  config.train.eval_every_samples = eval_every_samples


def shrink_for_smoke(config):
  """The smoke settings shared by the sweep files: a small model, tiny batches and budgets."""
  config.model.hidden_size = 64
  config.model.intermediate_size = 128
  config.model.num_layers = 1
  config.model.num_heads = 2
  config.model.num_kv_heads = 1
  config.model.head_dim = 32
  # Sums of two digits: a few SFT steps reach ~10% held-out accuracy, so the curves move.
  config.task.kwargs.min_terms = 2
  config.task.kwargs.max_terms = 2
  config.rollout.max_new_tokens = 4
  config.sft.steps = 40
  config.sft.batch_size = 32
  config.sft.learning_rate = 3e-3
  config.task.eval_size = 16
  config.eval.pass_k = 2
  config.rl.group_size = 2
  config.optim.reference_batch = 4
  config.optim.learning_rate = SMOKE_LR0
  set_budget(config, 64, 16)
  config.train.checkpoint_every = 100
  return config


def get_config(arg=None):
  """Base run config of the sweep (the main job with a sample budget and GNS microbatches)."""
  check_arg(arg)
  config = load_config_file(os.path.join(CONFIGS, "default.py"))
  config.optim.learning_rate = LR0
  config.optim.reference_batch = 256
  config.rl.group_size = 8
  config.rl.microbatches = 2  # the small batch of the noise-scale estimate on one device
  set_budget(config, TOTAL_SAMPLES, EVAL_EVERY_SAMPLES)
  config.train.checkpoint_every = 100
  if arg == "smoke":
    shrink_for_smoke(config)
  return config


def get_sweep(arg=None):
  """The runs as flat override dicts (duplicates with equal effective settings run once)."""
  check_arg(arg)
  if arg == "smoke":
    return batch_lr_grid(prompts_per_step=(2, 4), seeds=(0, 1), learning_rate=SMOKE_LR0,
                         grid_prompts=(4,), grid_multipliers=(2.0,))
  return batch_lr_grid(prompts_per_step=(8, 16, 32, 64), seeds=(0, 1), learning_rate=LR0,
                       grid_prompts=(8, 64), grid_multipliers=(0.5, 2.0))
