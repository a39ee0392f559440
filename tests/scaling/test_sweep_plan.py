"""The sweep's plan: runs merged by their effective settings, one run's command, the validation's
runs in seed-key order (rlscale.scaling.sweep_plan)."""

import os

from rlscale.scaling import sweep_plan

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
BATCH_LR = os.path.join(ROOT, "experiments", "sweeps", "batch_lr.py")


def _plan(arg, tmp_path):
  base = sweep_plan.load_sweep_module(BATCH_LR).get_config(arg)
  return sweep_plan.plan(base, sweep_plan.get_sweep(BATCH_LR, arg), str(tmp_path))


def test_batch_lr_plan_merges_runs_with_equal_learning_rates(tmp_path):
  runs = _plan(None, tmp_path)
  names = {r.name: r for r in runs}
  # At the reference batch every rule gives lr0; at B = 64 none's lr0 is the sqrt grid's x2.
  assert names["seed=0,prompts_per_step=32,lr_scaling=none"].aliases == [
      "seed=0,prompts_per_step=32,lr_scaling=sqrt"]
  assert names["seed=0,prompts_per_step=8,lr_scaling=none"].aliases == [
      "seed=0,prompts_per_step=8,lr_scaling=sqrt,learning_rate=0.0001"]
  # sqrt_adam equals sqrt only at k = 1, where the sweep does not ask for it.
  assert "seed=0,prompts_per_step=8,lr_scaling=sqrt_adam" in names


def test_run_command_reproduces_the_run(tmp_path):
  run = _plan("smoke", tmp_path)[1]
  argv = sweep_plan.run_command(run, f"{BATCH_LR}:smoke", str(tmp_path), {"rl.group_size": 2})
  assert argv[1:3] == ["-m", "rlscale.main"]
  assert f"--workdir={tmp_path}/runs/{run.name}" in argv
  assert "--config.rl.group_size=2" in argv and "--config.optim.lr_scaling=none" in argv
  assert sweep_plan.shell_command(argv).startswith("python -m rlscale.main --config=")


def test_validation_goes_seed_key_by_seed_key():
  import ml_collections
  def run(name, seed, sft_seed=0):
    config = ml_collections.ConfigDict({"seed": seed, "sft": {"seed": sft_seed}})
    return sweep_plan.Run(name, {}, config)
  # Sweep order: batch by batch; the validation pairs whole seed keys first.
  runs = [run("b4s0", 0), run("b4s1", 1), run("b4w1", 0, sft_seed=1), run("b8s0", 0),
          run("b8s1", 1), run("other", 0)]
  report = {"groups": [{"rule": "none", "batch_size": 4, "runs": ["b4s0", "b4s1", "b4w1"]},
                       {"rule": "none", "batch_size": 8, "runs": ["b8s0", "b8s1"]}],
            "decisions": [{"lr_rule": "none", "base": 4, "candidate": 8}]}
  assert [r.name for r in sweep_plan.validation_runs(runs, report)] == [
      "b4s0", "b8s0", "b4s1", "b8s1", "b4w1"]
  assert sweep_plan.seed_key(runs[2].config) == (1, 0)
