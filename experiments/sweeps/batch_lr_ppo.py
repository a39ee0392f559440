"""The batch-size study with PPO (critic, GAE, two epochs of two minibatches), designed for power
on the rules of the GRPO study (batch_lr.py, issue 19).

Design, fixed here before any run:
- Batches: B = 64, 256, 1024 responses per step (16x, factor 4) at G = 1, so P = B prompts. PPO
  makes rl.minibatches = 2 optimizer updates per pass, so the LR rule's reference is the update
  (minibatch) batch: optim.reference_batch 128 means B0 = 256 responses per step, as in batch_lr.py.
- Learning rates: at every batch the sqrt rule's value lr0 sqrt(B / B0) x {1/4, 1/2, 1, 2, 4}, so
  `none` = lr0 is on the grid at both ends, plus `sqrt_adam` at the extremes. The critic's LR is
  the policy's (optim.critic_learning_rate = None), scaled by the same rule.
- Warm start, budget, evaluation, schedule, noise scale: as batch_lr.py (one warm start shared by
  every RL seed, sft.seed = 0; 65,536 responses; cosine schedule in responses; evaluation every
  4,096 responses on the whole held-out set of 841 questions; two microbatch slices for the GNS).
- Target and seeds: fixed after the pilot (PILOT below): TARGET_VALUE and SEEDS. The pilot's 20
  runs are runs of this design (seeds 0-3, `none` and `sqrt`), so the study keeps them.
- Cost (estimated, not measured on this design): the earlier PPO study's 20 runs of 32,768
  responses took 18 min 41 s at --parallel=2 on 2 cores; the pilot's 20 runs of 65,536 about twice
  that.

The pilot, then its report (experiments/results/batch_lr_ppo_pilot/, at the target fixed below):

  python -m rlscale.sweep --config=experiments/sweeps/batch_lr_ppo.py:pilot --workdir=runs/batch_lr_ppo --parallel=2
  python -m rlscale.report runs/batch_lr_ppo --target=0.75 --out=runs/batch_lr_ppo/pilot_report

The study (in the pilot's workdir, which it reuses), then its report:

  python -m rlscale.sweep --config=experiments/sweeps/batch_lr_ppo.py --workdir=runs/batch_lr_ppo --parallel=2
  python -m rlscale.report runs/batch_lr_ppo

Finished runs are committed as they finish (experiments/results/batch_lr_ppo/runs/, metrics
gzipped); the sweep skips every run with a summary.json, so it continues from them. The warm start
is the GRPO study's (same SFT fields, the same cache key), so its committed cache file is reused:

  mkdir -p runs/batch_lr_ppo/sft && cp -r experiments/results/batch_lr_ppo/runs runs/batch_lr_ppo/
  cp experiments/results/batch_lr/sft/*.msgpack runs/batch_lr_ppo/sft/

The earlier PPO study (experiments/results/batch_lr_ppo_2seeds/) predates this design: B = 64 .. 512,
two seeds each on its own warm start, 32,768 responses (see README, "The committed studies").
Smoke version (seconds): `--config=experiments/sweeps/batch_lr_ppo.py:smoke`.
"""

import os

from rlscale.runner.config_files import load_config_file
from rlscale.scaling.hyper import batch_lr_grid, fixed, product, sweep
from rlscale.scaling.sweep import load_sweep_module

HERE = os.path.dirname(os.path.abspath(__file__))
GRPO = load_sweep_module(os.path.join(HERE, "batch_lr.py"))
PROMPTS_PER_STEP = (64, 256, 1024)  # G = 1: B = P
LR0 = 1e-4  # the earlier PPO study's lr0; the grid reaches x1/4 .. x4 around sqrt
LR_MULTIPLIERS = GRPO.LR_MULTIPLIERS
PILOT_SEEDS = (0, 1, 2, 3)
SEEDS = tuple(range(8))  # from the pilot's power calculation (PILOT)
TARGET_METRIC = GRPO.TARGET_METRIC
TARGET_VALUE = 0.75  # 14 SE above the warm start 0.509 on 841 prompts (SE 0.0172), after the pilot
PILOT = """\
The pilot (2026-12-04): the 20 runs of `:pilot` (RL seeds 0-3 on the shared warm start, `none`
and `sqrt` at B = 64, 256, 1024, lr0 1e-4, 65,536 responses, --parallel=2, ~38 min on 2 cores).
- Learning: warm start 0.509; final held-out greedy accuracy 0.82-0.95 at B = 64, 0.89-0.92 at
  B0 = 256, 0.77-0.89 at B = 1024. The GRPO study's 0.60 is crossed at 4,300-6,400 responses at
  B0 (~8% of the budget), far too early to tell batches apart.
- Target: B0's curves at 32,768 responses (mid-budget) read 0.78-0.84, so 0.75: 14 SE above the
  warm start, B0's sustained crossings at 18,300-28,400 responses (28-43% of the budget), every
  pilot run reaching it (the slowest, `none` at B = 1024, at 44,300 responses, final 0.77; at
  0.80, three of its four seeds never get there).
- Spread (target 0.75): the sd over seeds of the paired log N* ratio against B = 64 was 0.22 and
  0.25 (`none`, B = 256 and 1024), 0.31 and 0.24 (`sqrt`); median ~0.25, as in the GRPO pilot.
- Power: +-15% needs 13-22 seeds (17 at sd 0.25): with 17 runs per seed, ~100 s of the 2-core
  machine each, that is 6-10 h, beyond the ~4-hour budget. With 8 seeds (116 runs beyond the
  pilot's 20, ~3.2 h) the half width is t(7) 0.25 / sqrt(8) = 0.21: ratios known to about
  x/1.23, so the smallest effect this study reports is ~25%.
"""
ARGS = GRPO.ARGS


def get_config(arg=None):
  """The PPO config (experiments/configs/ppo.py) on batch_lr.py's budget, evaluation, warm start
  and schedule."""
  GRPO.check_arg(arg, ARGS)
  config = load_config_file(os.path.join(GRPO.CONFIGS, "ppo.py"))
  config.optim.learning_rate = LR0
  config.optim.critic_learning_rate = None  # = the policy's, scaled by the same rule
  config.optim.reference_batch = 128  # minibatch of B0 = 256 (two minibatches)
  config.optim.schedule_unit = "samples"
  config.rl.group_size = 1
  config.sft.seed = 0
  config.train.measure_noise_scale = True
  config.task.holdout_fraction = GRPO.HOLDOUT_FRACTION
  config.task.eval_size = GRPO.HELD_OUT_QUESTIONS
  GRPO.set_budget(config, GRPO.TOTAL_SAMPLES, GRPO.EVAL_EVERY_SAMPLES)
  config.train.checkpoint_every = 100
  if arg == "smoke":
    GRPO.shrink_for_smoke(config)
    config.rl.group_size = 1
    config.optim.learning_rate = GRPO.SMOKE_LR0
    config.optim.reference_batch = 2  # minibatch of B = 4
  return config


def get_target(arg=None):
  """The pre-registered target (PILOT); the pilot has none, the smoke its own."""
  GRPO.check_arg(arg, ARGS)
  if arg == "smoke":
    return {"metric": TARGET_METRIC, "value": 0.2}
  if arg == "pilot":
    return None
  return {"metric": TARGET_METRIC, "value": TARGET_VALUE}


def study_runs(seeds):
  """Every batch x (none, sqrt, the sqrt grid) for `seeds`, plus sqrt_adam at the extremes."""
  runs = batch_lr_grid(prompts_per_step=PROMPTS_PER_STEP, seeds=seeds, learning_rate=LR0,
                       rules=("none", "sqrt"), grid_prompts=PROMPTS_PER_STEP,
                       grid_multipliers=LR_MULTIPLIERS)
  extremes = (PROMPTS_PER_STEP[0], PROMPTS_PER_STEP[-1])
  return runs + product(sweep("seed", seeds), sweep("rl.prompts_per_step", extremes),
                        fixed("optim.lr_scaling", "sqrt_adam"))


def get_sweep(arg=None):
  """The runs as flat override dicts: the smoke's, the pilot's (a subset of the study's) or the
  study's."""
  GRPO.check_arg(arg, ARGS)
  if arg == "smoke":
    return batch_lr_grid(prompts_per_step=(4, 8), seeds=(0, 1), learning_rate=GRPO.SMOKE_LR0)
  if arg == "pilot":
    return [r for r in study_runs(PILOT_SEEDS) if "optim.learning_rate" not in r
            and r["optim.lr_scaling"] in ("none", "sqrt")]
  return study_runs(SEEDS)
