"""Runner behaviour across processes: SIGTERM checkpoints and exits with status 75; a run saved
on 2 simulated devices resumes on 1 and logs what an uninterrupted 1-device run logs."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from rlscale.runner.interrupts import EXIT_INTERRUPTED
from rlscale.runner.loop import train_and_evaluate
from rlscale.runner.metrics_log import read_metrics
from tests.runner.runner_configs import comparable, tiny_config
from tests.timeouts import hang_timeout

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONFIG = os.path.join(REPO, "experiments", "configs", "default.py")
TINY_FLAGS = [
    "--config.model.hidden_size=32", "--config.model.intermediate_size=64",
    "--config.model.num_layers=1", "--config.model.num_heads=2", "--config.model.num_kv_heads=1",
    "--config.model.head_dim=16", "--config.sft.steps=5", "--config.sft.batch_size=8",
    "--config.rl.prompts_per_step=2", "--config.rl.group_size=2", "--config.rl.batch_size=4",
    "--config.rollout.max_new_tokens=4", "--config.task.eval_size=4", "--config.eval.pass_k=2",
    "--config.train.eval_every=2", "--config.train.checkpoint_every=2",
]


def _main(workdir, *extra, devices=1):
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
  return subprocess.Popen(
      [sys.executable, "-m", "rlscale.main", f"--config={CONFIG}:smoke", f"--workdir={workdir}",
       *TINY_FLAGS, *extra], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
      text=True)


@pytest.mark.slow
def test_sigterm_writes_checkpoint_and_exits_75(tmp_path):
  proc = _main(tmp_path, "--config.train.total_steps=100000")
  metrics = tmp_path / "metrics.jsonl"
  deadline = time.time() + 240
  while time.time() < deadline and proc.poll() is None:
    if metrics.exists() and any(r["step"] >= 1 for r in read_metrics(str(metrics))):
      break
    time.sleep(0.5)
  assert proc.poll() is None, proc.communicate()[0]
  proc.send_signal(signal.SIGTERM)
  output, _ = proc.communicate(timeout=hang_timeout(60))
  # Not 0: a scheduler must not take a preempted run for a finished one (EX_TEMPFAIL).
  assert proc.returncode == EXIT_INTERRUPTED == 75, output
  assert "interrupted: checkpoint written at step" in output
  last_logged = read_metrics(str(metrics))[-1]["step"]
  assert str(last_logged) in os.listdir(tmp_path / "checkpoints")


@pytest.mark.slow
def test_checkpoint_from_two_devices_resumes_on_one(tmp_path):
  """A 2-device run checkpoints steps 2 and 4; with step 4 dropped, a 1-device run restores the
  step-2 state (host arrays, no device topology) and continues to step 4."""
  proc = _main(tmp_path, "--config.train.total_steps=4", devices=2)
  output, _ = proc.communicate(timeout=hang_timeout(150))
  assert proc.returncode == 0, output
  assert "2 device(s)" in output
  checkpoints = tmp_path / "checkpoints"
  assert sorted(os.listdir(checkpoints)) == ["2", "4"]
  shutil.rmtree(checkpoints / "4")
  two_device = read_metrics(str(tmp_path / "metrics.jsonl"))
  summary = train_and_evaluate(tiny_config(), str(tmp_path))
  assert summary["steps"] == 4 and summary["num_devices"] == 1
  records = read_metrics(str(tmp_path / "metrics.jsonl"))
  assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
  assert comparable(records[:3]) == comparable(two_device[:3])
  assert [r["samples"] for r in records[1:]] == [4, 8, 12, 16]
