"""Device-count invariance on simulated CPU devices, and the same update across two processes joined
by jax.distributed on localhost. Both run in subprocesses: XLA_FLAGS must be set before JAX starts."""

import json
import os
import subprocess
import sys

import pytest

from tests.timeouts import hang_timeout
from tests.train import two_processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env(num_devices: int) -> dict:
  env = dict(os.environ)
  env.update(XLA_FLAGS=f"--xla_force_host_platform_device_count={num_devices}", JAX_PLATFORMS="cpu",
             PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
  return env


@pytest.mark.slow
def test_same_update_on_1_2_4_8_devices_and_4_microbatches():
  out = subprocess.run([sys.executable, "-m", "tests.train.update_worker", "devices"], cwd=ROOT,
                       env=_env(8), capture_output=True, text=True, timeout=hang_timeout(300), check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  results = json.loads(out.stdout.strip().splitlines()[-1])
  assert set(results) == {"grpo_D2", "grpo_D4", "grpo_D8", "grpo_D2_micro4", "ppo_D4"}
  for case, diffs in results.items():
    assert diffs["params"] < 1e-6, (case, diffs)
    assert diffs.get("critic_params", 0.0) < 1e-6, (case, diffs)
    worst = max(diffs["metrics"], key=diffs["metrics"].get)
    assert diffs["metrics"][worst] < 1e-5, (case, worst, diffs["metrics"][worst])
  # B_small of the noise-scale estimate is the per-device share of the 16 responses.
  assert [results[f"grpo_D{d}"]["gns_batch_small"] for d in (2, 4, 8)] == [8.0, 4.0, 2.0]



@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
  saved = two_processes.run("tests.train.update_worker", tmp_path, devices_per_process=2,
                            timeout_s=150)
  two_processes.assert_match_one_process(saved, params_atol=1e-6)
