"""The update step jitted over meshes of 8 simulated CPU devices (data, fsdp, tensor, remat)
equals the step jitted on one device (run in a subprocess: the device count must be set before
JAX starts)."""

import json
import os
import subprocess
import sys

import pytest

from tests.timeouts import hang_timeout
from tests.train import two_processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA_ONLY = ("data1", "data2", "data4", "data8")
SHARDED = ("mesh241", "mesh222", "mesh118", "mesh181", "mesh122_minibatches2_micro2", "ppo_mesh222",
           "mesh241_remat", "mesh122_remat_checkpoint")


@pytest.fixture(scope="module")
def results():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, "-m", "tests.parallel.sharded_update_worker"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=hang_timeout(900),
                       check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_loss_gradients_and_metrics_equal_one_device(results):
  assert set(results) == set(DATA_ONLY + SHARDED)
  for case, r in results.items():
    assert r["metric_keys_equal"], case
    assert r["loss"] < 1e-5 and r["grads"] < 1e-5 and r["metrics"] < 1e-5, (case, r)


@pytest.mark.slow
def test_params_after_two_steps(results):
  for case in DATA_ONLY:
    assert results[case]["params"] < 1e-6, (case, results[case])
  for case in SHARDED:
    assert results[case]["params"] < 1e-4 and results[case]["critic_params"] < 1e-4, (case, results[case])


@pytest.mark.slow
def test_state_keeps_its_sharding_and_is_sharded(results):
  assert all(r["shardings_kept"] for r in results.values()), results
  # q_proj kernel [hidden 32, H * D = 32]: (fsdp, tensor) -> 32 / fsdp x 32 / tensor per device.
  expected = {"data8": [32, 32], "mesh241": [8, 32], "mesh222": [16, 16], "mesh118": [32, 4],
              "mesh181": [4, 32]}
  assert {k: results[k]["q_proj_shard"] for k in expected} == expected
  # 16 rows over data x fsdp: 16 / 8 = 2 on (2, 4, 1), 16 / 4 = 4 on (2, 2, 2), all 16 on (1, 1, 8).
  rows = {k: results[k]["rows_per_device"] for k in ("mesh241", "mesh222", "mesh118", "data1")}
  assert rows == {"mesh241": [2], "mesh222": [4], "mesh118": [16], "data1": [16]}



@pytest.mark.slow
def test_two_processes_on_one_mesh_match_one_device(tmp_path):
  # Two processes x 2 devices, a {data: 2, fsdp: 2} mesh over all 4, each process passing only
  # its half of the rows: the same params after two steps as the one-process one-device step.
  saved = two_processes.run("tests.parallel.sharded_update_worker", tmp_path,
                            devices_per_process=2, timeout_s=300)
  two_processes.assert_match_one_process(saved, params_atol=1e-4)
  for out in saved:
    assert list(out["__rows_per_device__"]) == [4]  # 16 rows over data x fsdp = 4 devices
