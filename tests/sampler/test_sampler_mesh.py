"""The Sampler draws the same tokens from one key on 1, 2, 4 and 8 devices and on fsdp / tensor
meshes, equal to `decode.generate`'s on one device; its KV cache is sharded by its logical
names; host-thread chunks spread over a mesh give one device's tokens; two processes on one mesh
sample their rows of the one-process batch (run in subprocesses: the device count must be set
before JAX starts)."""

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.timeouts import hang_timeout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNS = ("temperature_P4_G2/111", "temperature_P4_G2/data2", "temperature_P4_G2/data4",
        "temperature_P4_G2/data8", "temperature_P4_G2/fsdp2_tensor2", "temperature_P4_G2/222",
        "top_k_P2_G4/data4", "top_k_P2_G4/222", "temperature_P1_G2/data2",
        "greedy_P8_G1/fsdp2_tensor2")
# The rows' parts on each mesh (data x fsdp): `Sampler.num_devices`.
BATCH_PARTS = {"111": 1, "data2": 2, "data4": 4, "data8": 8, "fsdp2_tensor2": 2, "222": 4}


@pytest.fixture(scope="module")
def results():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, "-m", "tests.sampler.sampler_mesh_worker"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=hang_timeout(120),
                       check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def _close(r: dict, atol: float = 1e-5) -> bool:
  # Float summation order only (measured <= 1e-6 on the 2-layer model).
  return r["tokens_equal"] and r["masks_equal"] and r["lengths_equal"] and r["numpy"] and (
      r["logp_max_abs"] < atol)


@pytest.mark.slow
def test_same_key_same_tokens_on_every_mesh(results):
  mesh_runs = {k for k in results if "/" in k and k.split("/")[1] in BATCH_PARTS
               and k.split("/")[0] not in ("cache_spec", "host_threads")}
  assert mesh_runs == set(RUNS)
  for run in RUNS:
    r = results[run]
    assert _close(r), (run, r)
    assert r["repeat_equal"] and r["traces"] == 1, (run, r)  # one compile, host params alike
    assert r["num_devices"] == BATCH_PARTS[run.split("/")[1]], run
    assert r["tokens_vary"], run  # responses are not one repeated token
  for case in {run.split("/")[0] for run in RUNS}:  # the reference is generate's, key fold_in 0
    assert _close(results[f"{case}/reference_is_generate"]), case
  assert results["other_key_differs"]


@pytest.mark.slow
def test_kv_cache_sharded_by_its_logical_names(results):
  # keys [B, K, D, S]: rows over data x fsdp, the 2 KV heads over tensor.
  assert results["cache_spec/111"] == "P()"
  assert results["cache_spec/data4"] == "P('data',)"
  assert results["cache_spec/fsdp2_tensor2"] == "P('fsdp', 'tensor')"
  assert results["cache_spec/222"] == "P(('data', 'fsdp'), 'tensor')"


@pytest.mark.slow
def test_host_thread_chunks_on_a_mesh_give_one_devices_tokens(results):
  assert results["host_threads/chunks_differ_from_one_key"]  # each chunk has its own key
  for name in ("data2", "222"):
    r = results[f"host_threads/{name}"]
    assert _close(r) and r["traces"] == 1, (name, r)


@pytest.mark.slow
def test_a_batch_the_mesh_cannot_split_is_refused(results):
  assert results["odd_batch_error"] == (
      "batch size B=3 (prompts x samples_per_prompt) must be divisible by the mesh's batch "
      "parallelism (data x fsdp = 2)")


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_sample_their_rows_of_the_one_process_batch(tmp_path):
  """Two processes (jax.distributed on localhost, 2 CPU devices each) on one {data: 2, fsdp: 2}
  mesh, each passing half of the prompts: their rows in process order are the batch one device
  samples from all the prompts with the same key."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from rlscale.sampler.sampler import Sampler  # pylint: disable=g-import-not-at-top
  from tests.sampler import sampler_mesh_worker as worker  # pylint: disable=g-import-not-at-top
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2",
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  port = _free_port()
  outs = [str(tmp_path / f"process{i}.npz") for i in range(2)]
  procs = [subprocess.Popen([sys.executable, "-m", "tests.sampler.sampler_mesh_worker", "process",
                             str(i), str(port), outs[i]], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for i in range(2)]
  logs = [p.communicate(timeout=hang_timeout(60))[0] for p in procs]
  assert all(p.returncode == 0 for p in procs), "\n".join(log[-3000:] for log in logs)
  saved = [np.load(out) for out in outs]
  one = Sampler(worker.MODEL, worker.TR, worker.TWO_PROCESS_SAMPLING, (1,), 0, prompt_buckets=(8,),
                mesh=worker.make_mesh("111") if len(jax.devices()) > 1 else None)
  for case, (num_prompts, group) in worker.TWO_PROCESS_CASES.items():
    tokens, mask = worker.prompts(num_prompts)
    reference = one(worker.model_params(), tokens, mask, jax.random.key(worker.KEY),
                    samples_per_prompt=group)
    half = num_prompts * group // 2
    for i, out in enumerate(saved):
      rows = slice(i * half, (i + 1) * half)
      np.testing.assert_array_equal(out[f"{case}/tokens"], reference.tokens[rows])
      np.testing.assert_array_equal(out[f"{case}/response_mask"], reference.response_mask[rows])
      np.testing.assert_allclose(out[f"{case}/logp"], reference.logp[rows], atol=1e-5)
      np.testing.assert_array_equal(out[f"{case}/num_steps"], reference.num_steps[rows])
  for out in saved:
    assert int(out["num_devices"]) == 4
    assert "must be 1 on a mesh over 2 processes" in str(out["host_threads_error"])
