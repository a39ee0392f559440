"""Non-finite training stops the run cleanly (issue 39, item 3): one line naming the step, the
last good checkpoint kept, no checkpoint of a non-finite state, no policy exported."""

import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from rlscale.cli import EXIT_DIVERGED, TrainingDiverged
from rlscale.runner import loop
from rlscale.runner.loop import train_and_evaluate
from rlscale.runner.metrics_log import read_metrics
from rlscale.runner.rl_step import (all_finite, divergence_message, host_tree_finite,
                                    nonfinite_training_values)
from rlscale.runner.run_dir import export_policy
from tests.runner.runner_configs import tiny_config
from tests.timeouts import hang_timeout

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NAN, INF = float("nan"), float("inf")
ADVICE = ("the same command would diverge again: lower optim.learning_rate or clip harder "
          "(optim.grad_clip_norm) and start a new --workdir")


@pytest.fixture(scope="module")
def sft_cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp("sft_cache"))


def test_nonfinite_training_values_are_losses_and_gradient_norms():
  record = {"train/loss": NAN, "train/grad_norm": 1.0, "train/value_loss": INF,
            "train/critic_grad_norm": -INF, "train/entropy": NAN, "reward/mean": NAN,
            "train/approx_kl_old": 0.5, "step": 3}
  # Entropy and rewards are not what diverges the update (a NaN reward is counted apart).
  assert nonfinite_training_values(record) == [
      "train/loss", "train/value_loss", "train/critic_grad_norm"]
  assert nonfinite_training_values({"train/loss": 0.1, "train/grad_norm": 2.0}) == []


def test_divergence_message():
  record = {"train/loss": NAN, "train/grad_norm": NAN}
  assert divergence_message(7, record, ["train/loss", "train/grad_norm"], 6, "/w/checkpoints") == (
      "step 7: the loss is nan (grad norm nan); the run stopped and exported no policy, its last "
      f"good checkpoint (step 6) is kept in /w/checkpoints; {ADVICE}")
  record = {"train/loss": -0.0460517, "train/grad_norm": INF, "train/value_loss": NAN}
  assert divergence_message(1, record, ["train/grad_norm", "train/value_loss"], None, "/c") == (
      "step 1: the gradient norm is inf (loss -0.0460517); also non-finite: train/value_loss = "
      f"nan; the run stopped and exported no policy, no checkpoint was written before it; {ADVICE}")


def test_all_finite_checks_float_leaves_only():
  tree = {"w": jnp.ones((2, 3)), "b": np.zeros(3, np.float32), "count": jnp.array(7),
          "key": jax.random.key(0), "none": None}
  assert all_finite(tree) and host_tree_finite({"w": np.ones(3), "count": np.arange(3)})
  assert not all_finite({**tree, "b": np.array([0.0, math.nan], np.float32)})
  assert not all_finite({**tree, "w": jnp.array([1.0, jnp.inf], jnp.bfloat16)})
  assert all_finite({"count": jnp.array(7)})  # no float leaf at all
  assert not host_tree_finite({"w": np.array([1.0, -np.inf], ml_dtypes.bfloat16)})
  assert not host_tree_finite({"w": np.array([math.nan])})


def test_a_nonfinite_policy_is_never_exported(tmp_path):
  params = {"embed": np.ones((4, 2), np.float32), "norm": np.array([1.0, math.nan], np.float32)}
  with pytest.raises(TrainingDiverged, match="the policy's parameters are not all finite: it is "
                     f"not exported to {tmp_path}/policy"):
    export_policy(str(tmp_path), None, params)
  assert os.listdir(tmp_path) == []  # neither policy/ nor policy.tmp


def _with_bad_step(monkeypatch, step, bad):
  """The runner's rl_step, with `bad(record, state) -> (record, state)` applied at RL step
  `step` (1-based)."""
  real = loop.rl_step
  calls = []

  def rl_step(*args):
    record, state = real(*args)
    calls.append(1)
    return bad(record, state) if len(calls) == step else (record, state)
  monkeypatch.setattr(loop, "rl_step", rl_step)


def _tree(root):
  return sorted(os.path.relpath(os.path.join(d, n), root)
                for d, dirs, files in os.walk(root) for n in dirs + files)


def test_a_nan_loss_stops_at_its_step_and_keeps_the_last_good_checkpoint(tmp_path, sft_cache,
                                                                          monkeypatch):
  _with_bad_step(monkeypatch, 3, lambda record, state: (
      {**record, "train/loss": NAN, "train/grad_norm": NAN}, state))
  workdir = str(tmp_path / "run")
  with pytest.raises(TrainingDiverged) as stopped:
    train_and_evaluate(tiny_config(sft__cache_dir=sft_cache), workdir)  # checkpoints every 2
  assert str(stopped.value) == (
      "step 3: the loss is nan (grad norm nan); the run stopped and exported no policy, its "
      f"last good checkpoint (step 2) is kept in {workdir}/checkpoints; {ADVICE}")
  assert os.listdir(os.path.join(workdir, "checkpoints")) == ["2"]
  records = read_metrics(os.path.join(workdir, "metrics.jsonl"))
  assert [r["step"] for r in records] == [0, 1, 2, 3]  # the bad step's record, for the user
  assert records[-1]["train/loss"] is None and "eval/greedy_accuracy" not in records[-1]
  names = os.listdir(workdir)
  assert not {"policy", "policy.tmp", "summary.json", ".lock"} & set(names), names


def test_a_nonfinite_state_is_never_checkpointed(tmp_path, sft_cache, monkeypatch):
  """A finite loss and gradient norm whose update left NaN parameters (step 2): the checkpoint
  of step 2 is not written, step 1's stays the last good one."""
  _with_bad_step(monkeypatch, 2, lambda record, state: (
      record, state.replace(params=jax.tree.map(lambda x: x * jnp.nan, state.params))))
  workdir = str(tmp_path / "run")
  config = tiny_config(sft__cache_dir=sft_cache, train__checkpoint_every=1)
  with pytest.raises(TrainingDiverged, match=r"^step 2: the parameters or optimizer state are not "
                     r"finite after the update \(loss -?[0-9.e-]+, grad norm [0-9.e-]+\); the run "
                     r"stopped and exported no policy, its last good checkpoint \(step 1\)"):
    train_and_evaluate(config, workdir)
  assert os.listdir(os.path.join(workdir, "checkpoints")) == ["1"]
  assert not os.path.exists(os.path.join(workdir, "policy"))


@pytest.mark.slow
def test_a_huge_learning_rate_stops_the_command_in_one_line(tmp_path, sft_cache):
  """Through the CLI, with config fields that exist: lr 1e30 (and an entropy bonus, so the
  tiny model's all-zero rewards still give a gradient) overflows the parameters at step 1, so
  step 2's gradient is NaN; exit status 3, one line, step 1's checkpoint kept, no policy."""
  workdir = tmp_path / "run"
  env = {k: v for k, v in os.environ.items() if k != "RLSCALE_VERBOSE"}
  config = tmp_path / "tiny_config.py"
  config.write_text("from tests.runner.runner_configs import tiny_config\n"
                    "def get_config(arg=None):\n"
                    f"  return tiny_config(sft__cache_dir={sft_cache!r})\n")
  result = subprocess.run(
      [sys.executable, "-m", "rlscale.main", f"--config={config}", f"--workdir={workdir}",
       "--config.optim.learning_rate=1e30", "--config.rl.entropy_coef=0.01",
       "--config.train.checkpoint_every=1"],
      cwd=REPO, env=dict(env, JAX_PLATFORMS="cpu"), capture_output=True, text=True,
      timeout=hang_timeout(60))
  assert result.returncode == EXIT_DIVERGED, result.stderr
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
  assert errors[0].startswith("error: step 2: the ")
  assert errors[0].endswith(f"its last good checkpoint (step 1) is kept in {workdir}/checkpoints; "
                            f"{ADVICE}")
  assert os.listdir(workdir / "checkpoints") == ["1"]
  assert not os.path.exists(workdir / "policy") and not os.path.exists(workdir / "summary.json")
