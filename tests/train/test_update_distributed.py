"""Device-count invariance on simulated CPU devices, and the same update across two processes joined
by jax.distributed on localhost. Both run in subprocesses: XLA_FLAGS must be set before JAX starts."""

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests.train import update_problem as problem
from tests.timeouts import hang_timeout

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


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
  port = _free_port()
  outs = [str(tmp_path / f"process{i}.npz") for i in range(2)]
  procs = [subprocess.Popen([sys.executable, "-m", "tests.train.update_worker", "process", str(i),
                             str(port), outs[i]], cwd=ROOT, env=_env(2), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True) for i in range(2)]
  logs = [p.communicate(timeout=hang_timeout(150))[0] for p in procs]
  assert all(p.returncode == 0 for p in procs), "\n".join(log[-2000:] for log in logs)
  reference = problem.run_updates(problem.rl_config("grpo", kl_coef=0.1))
  flat = {jax.tree_util.keystr(path): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_flatten_with_path(reference.params)[0]}
  for out in outs:
    saved = np.load(out)
    assert max(float(np.max(np.abs(saved[k] - flat[k]))) for k in flat) < 1e-6
    np.testing.assert_allclose(saved["__loss__"], reference.metrics[-1]["loss"][0], rtol=1e-5)
