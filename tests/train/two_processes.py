"""Two worker processes joined by jax.distributed on localhost, checked against the one-process
update of the shared tiny problem (tests/train/update_problem.py). Used by the multi-process tests
of tests/train and tests/parallel (data-only and data x fsdp meshes); each worker module takes
`process ID PORT OUT` and saves the parameters after two steps and the last loss (`__loss__`) to
OUT (.npz)."""

import os
import socket
import subprocess
import sys

import jax
import numpy as np

from tests.timeouts import hang_timeout
from tests.train import update_problem as problem

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def run(worker: str, tmp_path, devices_per_process: int, timeout_s: float) -> list:
  """Runs `python -m worker process i PORT OUT` for i = 0, 1 with `devices_per_process` host
  devices each; returns their loaded .npz files. Fails the test with both logs on an error."""
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS=f"--xla_force_host_platform_device_count={devices_per_process}",
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  port = _free_port()
  outs = [str(tmp_path / f"process{i}.npz") for i in range(2)]
  procs = [subprocess.Popen([sys.executable, "-m", worker, "process", str(i), str(port), outs[i]],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True) for i in range(2)]
  logs = [p.communicate(timeout=hang_timeout(timeout_s))[0] for p in procs]
  assert all(p.returncode == 0 for p in procs), "\n".join(log[-2000:] for log in logs)
  return [np.load(out) for out in outs]


def assert_match_one_process(saved: list, params_atol: float) -> None:
  """Each process's saved params within params_atol of the one-process GRPO run's, and its last
  loss within 1e-5 (relative)."""
  reference = problem.run_updates(problem.rl_config("grpo", kl_coef=0.1))
  flat = {jax.tree_util.keystr(path): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_flatten_with_path(reference.params)[0]}
  for out in saved:
    assert max(float(np.max(np.abs(out[k] - flat[k]))) for k in flat) < params_atol
    np.testing.assert_allclose(out["__loss__"], reference.metrics[-1]["loss"], rtol=1e-5)
