"""The batch-size study's sweep file: the pre-registered design as planned runs."""

import os

import pytest

from rlscale.scaling import sweep
from rlscale.tasks.factory import make_task

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
BATCH_LR = os.path.join(ROOT, "experiments", "sweeps", "batch_lr.py")
MODULE = sweep.load_sweep_module(BATCH_LR)


def _effective_lrs(runs, seed, prompts):
  from rlscale.train.optimizer import scaled_learning_rate
  return sorted(round(scaled_learning_rate(r.config.optim, prompts * 8), 12) for r in runs
                if (r.config.sft.seed, r.config.seed, r.config.rl.prompts_per_step) == (0, seed, prompts)
                and r.config.optim.lr_scaling != "sqrt_adam")


def test_design_spans_16x_with_a_factor_2_grid_containing_none_and_sqrt(tmp_path):
  _, runs, _ = sweep.plan_sweep(BATCH_LR, str(tmp_path))
  batches = sorted({r.config.rl.prompts_per_step * r.config.rl.group_size for r in runs})
  assert batches == [64, 256, 1024]
  lr0 = MODULE.LR0
  # At B = 64 the sqrt value is lr0 / 2 and none's lr0 is x2 on its grid; at 1024 sqrt = 2 lr0.
  assert _effective_lrs(runs, 0, 8) == pytest.approx([lr0 / 8, lr0 / 4, lr0 / 2, lr0, 2 * lr0])
  assert _effective_lrs(runs, 0, 32) == pytest.approx([lr0 / 4, lr0 / 2, lr0, 2 * lr0, 4 * lr0])
  assert _effective_lrs(runs, 0, 128) == pytest.approx([lr0 / 2, lr0, 2 * lr0, 4 * lr0, 8 * lr0])
  # Per RL seed on the shared warm start: 15 grid points + sqrt_adam at both extremes.
  for seed in MODULE.SEEDS:
    assert sum((r.config.sft.seed, r.config.seed) == (0, seed) for r in runs) == 17
  assert {r.config.sft.cache_dir for r in runs} == {os.path.abspath(os.path.join(tmp_path, "sft"))}
  assert {sweep.budget_samples(r.config) for r in runs} == {MODULE.TOTAL_SAMPLES}
  assert {r.config.optim.schedule_unit for r in runs} == {"samples"}
  assert all(r.config.train.measure_noise_scale for r in runs)
  # Two warm starts in all (the robustness check on the second).
  assert {sweep.warm_start_signature(r.config) for r in runs}.__len__() == 2


def test_target_is_stated_five_standard_errors_above_the_warm_start():
  # Warm start 0.509 on the 841 held-out prompts (measured before the study's runs):
  # SE = sqrt(0.509 x 0.491 / 841) = 0.01724; (0.60 - 0.509) / 0.01724 = 5.3.
  from rlscale.scaling import target
  stated = sweep.get_target(BATCH_LR, None)
  assert stated == {"metric": "eval/greedy_accuracy", "value": 0.60}
  assert target.standard_errors_above(0.60, 0.509, MODULE.HELD_OUT_QUESTIONS) >= 5
  assert sweep.get_target(BATCH_LR, "pilot") is None


def test_pilot_runs_are_runs_of_the_study(tmp_path):
  _, study, _ = sweep.plan_sweep(BATCH_LR, str(tmp_path))
  _, pilot, _ = sweep.plan_sweep(BATCH_LR, str(tmp_path), arg="pilot")
  assert len(pilot) == 20 and {r.name for r in pilot} <= {r.name for r in study}


def test_evaluation_is_the_whole_held_out_set():
  config = MODULE.get_config()
  task = make_task(config.task, seed=0)
  assert len(task.eval_examples(MODULE.HELD_OUT_QUESTIONS)) == MODULE.HELD_OUT_QUESTIONS
  with pytest.raises(ValueError, match=f"only {MODULE.HELD_OUT_QUESTIONS} distinct held-out"):
    task.eval_examples(MODULE.HELD_OUT_QUESTIONS + 1)


PPO = os.path.join(ROOT, "experiments", "sweeps", "batch_lr_ppo.py")


def test_ppo_design_follows_the_grpo_rules_and_keeps_its_pilot(tmp_path):
  module = sweep.load_sweep_module(PPO)
  base, pilot, _ = sweep.plan_sweep(PPO, str(tmp_path), arg="pilot")
  # 4 seeds x (3 batches x {none, sqrt}, merged at B0 where both give lr0) = 20 runs.
  assert len(pilot) == 20
  assert sorted({r.config.rl.prompts_per_step * r.config.rl.group_size for r in pilot}) == [
      64, 256, 1024]
  assert {sweep.budget_samples(r.config) for r in pilot} == {MODULE.TOTAL_SAMPLES}
  assert base.rl.minibatches == 2 and base.optim.reference_batch == 128
  assert base.task.eval_size == MODULE.HELD_OUT_QUESTIONS and base.sft.seed == 0
  # The study's grid per seed: 5 sqrt-grid LRs per batch (none on it at the extremes) and
  # sqrt_adam at both extremes, planned from the same function the full sweep will use.
  runs = sweep.plan(base, module.study_runs((0,)), str(tmp_path))
  assert len(runs) == 17
  _, study, _ = sweep.plan_sweep(PPO, str(tmp_path))
  assert len(study) == 17 * len(module.SEEDS)
  # The pilot's runs are runs of the study, under the same names, so its workdir is reused.
  assert {r.name for r in pilot} <= {r.name for r in study}
  assert sweep.get_target(PPO, "pilot") is None
  assert sweep.get_target(PPO, None) == {"metric": MODULE.TARGET_METRIC,
                                         "value": module.TARGET_VALUE}
  # Pre-registered at least 5 standard errors above the pilot's warm start on 841 questions.
  warm_start = 0.509
  standard_error = (warm_start * (1 - warm_start) / MODULE.HELD_OUT_QUESTIONS) ** 0.5
  assert module.TARGET_VALUE >= warm_start + 5 * standard_error
