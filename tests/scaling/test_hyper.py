"""Sweep combinators, run names and override checks."""

import pytest

from rlscale.runner.config_files import load_config_file
from rlscale.scaling import hyper
from tests.runner.runner_configs import DEFAULT


def test_product_varies_the_first_axis_slowest():
  runs = hyper.product(hyper.sweep("seed", [0, 1]), hyper.sweep("rl.prompts_per_step", [8, 64]))
  assert runs == [{"seed": 0, "rl.prompts_per_step": 8}, {"seed": 0, "rl.prompts_per_step": 64},
                  {"seed": 1, "rl.prompts_per_step": 8}, {"seed": 1, "rl.prompts_per_step": 64}]


def test_zipped_and_fixed():
  runs = hyper.product(hyper.fixed("optim.lr_scaling", "sqrt"),
                       hyper.zipped(hyper.sweep("a", [1, 2]), hyper.sweep("b", [3, 4])))
  assert runs == [{"optim.lr_scaling": "sqrt", "a": 1, "b": 3},
                  {"optim.lr_scaling": "sqrt", "a": 2, "b": 4}]
  with pytest.raises(ValueError, match="equal lengths"):
    hyper.zipped(hyper.sweep("a", [1, 2]), hyper.sweep("b", [3]))
  with pytest.raises(ValueError, match="same field twice"):
    hyper.product(hyper.sweep("a", [1]), hyper.sweep("a", [2]))


def test_run_names():
  assert hyper.run_name({"rl.prompts_per_step": 8, "seed": 0}) == "prompts_per_step=8,seed=0"
  assert hyper.run_name({"optim.learning_rate": 5e-5, "sft.learning_rate": 1e-3}) == (
      "optim.learning_rate=5e-05,sft.learning_rate=0.001")
  assert hyper.run_name({}) == "base"


def test_runs_sharing_a_name_are_rejected():
  with pytest.raises(ValueError, match="share the workdir runs/seed=0"):
    hyper.check_unique_names([{"seed": 0}, {"seed": 1}, {"seed": 0}])


def test_overrides_apply_to_a_copy_and_follow_references():
  base = load_config_file(DEFAULT)
  config = hyper.apply_overrides(base, {"rl.prompts_per_step": 8, "optim.lr_scaling": "sqrt"})
  assert config.rl.batch_size == 64 and config.optim.lr_scaling == "sqrt"
  assert base.rl.prompts_per_step == 32 and base.optim.lr_scaling == "none"


def test_unknown_field_names_the_nearest_one():
  base = load_config_file(DEFAULT)
  with pytest.raises(ValueError, match="'rl.prompt_per_step'.*rl.prompts_per_step"):
    hyper.apply_overrides(base, {"rl.prompt_per_step": 8})
  with pytest.raises(ValueError, match="rl.prompts_per_step='x'"):
    hyper.apply_overrides(base, {"rl.prompts_per_step": "x"})


def test_parse_shard():
  assert hyper.parse_shard("1/3") == (1, 3)
  assert hyper.shard(list(range(7)), 1, 3) == [1, 4]
  for bad in ("3/2", "2/2", "-1/2", "a/b", "1"):
    with pytest.raises(ValueError, match="--shard"):
      hyper.parse_shard(bad)


def test_lr_grid_is_one_call_per_batch_ladder():
  grid = hyper.lr_grid(prompts_per_step=(8, 32), learning_rate=1e-4, multipliers=(0.5, 1, 2))
  assert grid == [{"rl.prompts_per_step": p, "optim.lr_scaling": "sqrt", "optim.learning_rate": lr}
                  for p in (8, 32) for lr in (5e-5, 1e-4, 2e-4)]
  with pytest.raises(ValueError, match="multipliers"):
    hyper.lr_grid(prompts_per_step=(8,), learning_rate=1e-4, multipliers=(0.0,))
