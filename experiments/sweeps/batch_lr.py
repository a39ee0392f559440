"""The batch-size study on the main job's task (GRPO, chain_sum), designed for power (issue 19).

Design, pre-registered here before the runs beyond the pilot:
- Batches: P in {8, 32, 128} prompts per step at G = 8, so B = 64, 256, 1024 responses (16x, a
  geometric ladder with factor 4); B0 = 256 is the reference batch of the LR rules.
- Learning rates: at every batch the sqrt rule's value lr0 sqrt(B / B0) times {1/4, 1/2, 1, 2, 4}
  (a factor-2 grid, so `none` = lr0 is on it at both ends: x2 at B = 64, x1/2 at B = 1024), plus
  the Adam-adjusted sqrt rule (`sqrt_adam`: betas 1 - k (1 - beta), eps / sqrt(k)) at B = 64 and
  1024. The tuned group of the report is the best LR of each batch's grid (bracketed when it is
  not at an edge), read leave-one-seed-out.
- Seeds: one warm start (sft.seed = 0) shared by every RL seed (common random numbers: runs with
  one seed index share the warm start and the prompt stream); SEEDS from the power calculation
  below; a second warm start (sft.seed = 1) at B0 and both extremes under sqrt, ROBUSTNESS_SEEDS.
- Budget 65,536 responses, the LR schedule (cosine to 0, no warmup) in responses consumed
  (optim.schedule_unit = "samples"), so every batch has the same LR at the same sample count;
  evaluation every 4,096 responses on the whole held-out set (841 questions: task.holdout_fraction
  0.2 of the ~4,000 chain_sum questions of three one-digit terms).
- Target (get_target): TARGET_METRIC >= TARGET_VALUE, fixed after the pilot (below).
- Noise scale: train.measure_noise_scale, so the automatic microbatch split gives two slices of
  whole groups at every batch.
- Validation: the decisions' runs again, one at a time, alone on the machine
  (`--validate`, below).

Pilot (`:pilot`, 20 runs of the study itself: PILOT_SEEDS on the first warm start under `none`
and `sqrt` at every batch): see PILOT below for what it measured and the power calculation.

  python -m rlscale.sweep --config=experiments/sweeps/batch_lr.py:pilot --workdir=runs/batch_lr --parallel=2
  python -m rlscale.report runs/batch_lr --target=0.6 --allow_weak_target --out=runs/batch_lr/pilot_report

Commands (the study, its validation alone, its throughput profile alone, the report):

  python -m rlscale.sweep --config=experiments/sweeps/batch_lr.py --workdir=runs/batch_lr --parallel=2
  python -m rlscale.sweep --config=experiments/sweeps/batch_lr.py --workdir=runs/batch_lr --validate
  python -m rlscale.throughput --config=experiments/sweeps/batch_lr.py \
      --prompts_per_step=8,32,128 --out=runs/batch_lr/throughput \
      --config.sft.cache_dir=runs/batch_lr/sft
  python -m rlscale.report runs/batch_lr

Smoke version (seconds): `--config=experiments/sweeps/batch_lr.py:smoke`. List the runs' commands
(one per line, e.g. for a SLURM array): add `--list`; run a share: `--shard=i/n`.
"""

import os

from rlscale.runner.config_files import load_config_file
from rlscale.scaling.hyper import batch_lr_grid, fixed, product, sweep

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs")
PROMPTS_PER_STEP = (8, 32, 128)  # B = 64, 256, 1024 at G = 8
REFERENCE_BATCH = 256
LR0 = 5e-5  # lr at B0; the previous study's best LRs were half the sqrt rule's around 1e-4
LR_MULTIPLIERS = (0.25, 0.5, 2.0, 4.0)  # around the sqrt rule's value at every batch
PILOT_SEEDS = (0, 1, 2, 3)
SEEDS = tuple(range(8))  # from the power calculation (PILOT)
ROBUSTNESS_SEEDS = (0, 1, 2)  # on the second warm start
TOTAL_SAMPLES = 65536
EVAL_EVERY_SAMPLES = 4096
# A fifth of chain_sum's ~4,000 questions held out: 841, so the evaluation's SE is 0.017 at
# p = 0.5 (the default 10% holds out 406, SE 0.025, and 5 SE would sit where the pilot's curves
# flatten). tests/experiments/test_sweep_files.py checks 841 is the whole held-out set.
HOLDOUT_FRACTION = 0.2
HELD_OUT_QUESTIONS = 841
TARGET_METRIC = "eval/greedy_accuracy"
TARGET_VALUE = 0.60  # 5.3 SE above the warm start 0.509 on 841 prompts (SE 0.0172), after the pilot
PILOT = """\
The pilot (2026-12-01): the 20 runs of `:pilot` (RL seeds 0-3 on one warm start, `none` and
`sqrt` at B = 64, 256, 1024, lr0 5e-5, 65,536 responses) on the design before two changes: the
held-out set was the default 10% (406 questions, SE 0.025 at the warm start's 0.510) and the
verifier was the one before issue 23 (its last-number fallback then also rewarded an answer with
trailing junk, e.g. " 9=" for 9). Its runs are kept apart (experiments/results/batch_lr_pilot/)
and not reused.
- Learning: every run learns beyond noise; after 65,536 responses held-out greedy accuracy is
  0.62-0.74 at B = 64, 0.61-0.69 at B0 = 256, 0.62-0.67 at B = 1024 (warm start 0.510).
- Target: at 5 SE on 406 prompts (0.634) B0's seed 2 and two B = 1024 runs never get there
  (their curves flatten at 0.61-0.63), so the study evaluates on a fifth of the question space
  held out (841 questions, SE 0.017): 5 SE above the warm start is then ~0.60, which every pilot
  run reached, B0's sustained crossings at 16,800-22,200 responses (26-34% of the budget).
- Spread (target 0.60): the sd over seeds of the paired log N* ratio against B = 64 was 0.17 and
  0.59 (`none`, B = 256 and 1024), 0.26 and 0.22 (`sqrt`); median ~0.25. The invariance
  difference sqrt - none was -0.0053 [-0.0129, 0.0023] over 4 seeds (sd per seed ~0.005).
- Power: a 95% t interval of half width log(1.15) (+-15%) needs t(n-1) 0.25 / sqrt(n) <= 0.140,
  n = 17 seeds (8 at sd 0.17, 71 at 0.59). At ~55 s of the 2-core machine per run that is ~4 h
  for the sweep alone, before the validation runs, beyond this study's ~4-hour budget. With 8
  seeds the half width is t(7) 0.25 / sqrt(8) = 0.21: ratios known to about x/1.23, so the
  smallest effect this study reports is ~25%; an invariance difference of 0.005 resolves with 7.
- Cost: 20 runs with --parallel=2 in 35 min on 2 cores shared with other work (load 5-7).
"""
SMOKE_LR0 = 3e-3  # large, so a few smoke steps move the held-out curves


def check_arg(arg, allowed=(None, "smoke")):
  if arg not in allowed:
    raise ValueError(f"sweep argument {arg!r} is not one of {list(allowed)}")


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


ARGS = (None, "smoke", "pilot")


def get_config(arg=None):
  """Base run config of the sweep: the main job with the design above (the pilot's too)."""
  check_arg(arg, ARGS)
  config = load_config_file(os.path.join(CONFIGS, "default.py"))
  config.optim.learning_rate = LR0
  config.optim.reference_batch = REFERENCE_BATCH
  config.optim.schedule_unit = "samples"  # warmup and decay in responses consumed
  config.rl.group_size = 8
  config.sft.seed = 0  # one warm start shared by every RL seed
  config.train.measure_noise_scale = True
  config.task.holdout_fraction = HOLDOUT_FRACTION
  config.task.eval_size = HELD_OUT_QUESTIONS
  set_budget(config, TOTAL_SAMPLES, EVAL_EVERY_SAMPLES)
  config.train.checkpoint_every = 100
  if arg == "smoke":
    shrink_for_smoke(config)
  return config


def get_target(arg=None):
  """The pre-registered target (rlscale.scaling.target): metric and value."""
  check_arg(arg, ARGS)
  if arg == "smoke":
    return {"metric": TARGET_METRIC, "value": 0.2}
  if arg == "pilot" or TARGET_VALUE is None:
    return None  # the pilot fixes it
  return {"metric": TARGET_METRIC, "value": TARGET_VALUE}


def study_runs(seeds, sft_seed=0):
  """Every batch x (none, sqrt, sqrt_adam, the sqrt grid) for `seeds` on warm start `sft_seed`
  (sqrt_adam only at the extremes, where it differs from sqrt)."""
  runs = batch_lr_grid(prompts_per_step=PROMPTS_PER_STEP, seeds=seeds, learning_rate=LR0,
                       rules=("none", "sqrt"), grid_prompts=PROMPTS_PER_STEP,
                       grid_multipliers=LR_MULTIPLIERS)
  extremes = (PROMPTS_PER_STEP[0], PROMPTS_PER_STEP[-1])
  runs += product(sweep("seed", seeds), sweep("rl.prompts_per_step", extremes),
                  fixed("optim.lr_scaling", "sqrt_adam"))
  if sft_seed:
    runs = [{"sft.seed": sft_seed, **r} for r in runs]
  return runs


def robustness_runs():
  """The second warm start (sft.seed = 1): sqrt at B0 and both extremes, ROBUSTNESS_SEEDS."""
  return [{"sft.seed": 1, **r} for r in product(
      sweep("seed", ROBUSTNESS_SEEDS), sweep("rl.prompts_per_step", PROMPTS_PER_STEP),
      fixed("optim.lr_scaling", "sqrt"))]


def get_sweep(arg=None):
  """The runs as flat override dicts (duplicates with equal effective settings run once); the
  pilot's are the study's runs under `none` and `sqrt` for PILOT_SEEDS."""
  check_arg(arg, ARGS)
  if arg == "pilot":
    return [r for r in study_runs(PILOT_SEEDS) if r["optim.lr_scaling"] in ("none", "sqrt")
            and "optim.learning_rate" not in r]
  if arg == "smoke":
    return batch_lr_grid(prompts_per_step=(2, 4), seeds=(0, 1), learning_rate=SMOKE_LR0,
                         grid_prompts=(4,), grid_multipliers=(2.0,))
  return study_runs(SEEDS) + robustness_runs()
