"""Device-count invariance of the update step jitted over meshes of simulated CPU devices, and the
same update on one mesh across two processes joined by jax.distributed on localhost. Both run in
subprocesses: XLA_FLAGS must be set before JAX starts."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.timeouts import hang_timeout
from tests.train import two_processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env(num_devices: int) -> dict:
  env = dict(os.environ)
  env.update(XLA_FLAGS=f"--xla_force_host_platform_device_count={num_devices}", JAX_PLATFORMS="cpu",
             PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
  return env


@pytest.fixture(scope="module")
def device_results():
  out = subprocess.run([sys.executable, "-m", "tests.train.update_worker", "devices"], cwd=ROOT,
                       env=_env(8), capture_output=True, text=True, timeout=hang_timeout(300), check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_same_update_on_1_2_4_8_devices_and_4_microbatches(device_results):
  results = device_results
  assert set(results) == {"grpo_D2", "grpo_D4", "grpo_D8", "grpo_D2_micro4", "ppo_D4",
                          "grpo_D4_mini2_micro2"}
  for case, diffs in results.items():
    assert diffs["metric_keys_equal"], case
    assert diffs["params"] < 1e-6, (case, diffs)
    assert diffs.get("critic_params", 0.0) < 1e-6, (case, diffs)
    worst = max(diffs["metrics"], key=diffs["metrics"].get)
    assert diffs["metrics"][worst] < 1e-5, (case, worst, diffs["metrics"][worst])
  # B_small of the noise-scale estimate is the rows of a microbatch, whatever the device count:
  # one microbatch of the 16 responses (no estimate), or 16 / 4.
  assert [results[f"grpo_D{d}"]["gns_batch_small"] for d in (2, 4, 8)] == [16.0, 16.0, 16.0]
  assert results["grpo_D2_micro4"]["gns_batch_small"] == 4.0


@pytest.mark.slow
def test_minibatch_shuffling_and_noise_scale_do_not_depend_on_the_device_count(device_results):
  # rl.minibatches = 2 (one permutation of the global rows per epoch) and rl.microbatches = 2
  # (the noise scale's small batches) on 4 devices: the same minibatches, the same small
  # batches, so the same parameters and the same gns_* metrics as on 1 device.
  diffs = device_results["grpo_D4_mini2_micro2"]
  assert diffs["gns_batch_small"] == 4.0  # minibatch 8 rows / 2 microbatches
  for key in ("gns_grad_sq_small", "gns_grad_sq_big", "gns_batch_small", "gns_batch_big"):
    assert diffs["metrics"][key] < 1e-5, (key, diffs["metrics"][key])
  assert diffs["params"] < 1e-6, diffs


@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
  # Two processes x 2 devices, the mesh {data: 4} over all of them, each process passing only
  # its half of the rows: the parameters and loss of the one-process one-device step.
  saved = two_processes.run("tests.train.update_worker", tmp_path, devices_per_process=2,
                            timeout_s=150)
  two_processes.assert_match_one_process(saved, params_atol=1e-6)
  for out in saved:  # the log-prob pass's rows read back by each process: its own
    np.testing.assert_allclose(out["__own_logp__"], out["__expected_logp__"], atol=1e-5)
