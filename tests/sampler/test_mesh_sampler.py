"""The mesh sampler draws the same tokens from one key on every mesh, and the tokens of the
one-device pmapped Sampler; its KV cache is sharded by its logical names (run in a subprocess:
the device count must be set before JAX starts)."""

import json
import os
import subprocess
import sys

import pytest

from tests.timeouts import hang_timeout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNS = ("temperature_P4_G2/111", "temperature_P4_G2/data4", "temperature_P4_G2/fsdp2_tensor2",
        "temperature_P4_G2/222", "top_k_P2_G4/data4", "top_k_P2_G4/222",
        "greedy_P8_G1/fsdp2_tensor2")


@pytest.fixture(scope="module")
def results():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, "-m", "tests.sampler.mesh_sampler_worker"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=hang_timeout(900),
                       check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_same_key_same_tokens_on_every_mesh(results):
  assert {k for k in results if "/" in k and not k.startswith("cache_spec")} == set(RUNS)
  for run in RUNS:
    r = results[run]
    assert r["tokens_equal"] and r["masks_equal"] and r["lengths_equal"], (run, r)
    assert r["repeat_equal"] and r["traces"] == 1, (run, r)  # one compile, deterministic
    assert r["tokens_vary"], run  # responses are not one repeated token
    # Float summation order only (measured <= 7.2e-7 on the 2-layer model).
    assert r["logp_max_abs"] < 1e-5, (run, r)
  assert results["other_key_differs"]


@pytest.mark.slow
def test_kv_cache_sharded_by_its_logical_names(results):
  # keys [B, K, D, S]: rows over data x fsdp, the 2 KV heads over tensor.
  assert results["cache_spec/111"] == "P()"
  assert results["cache_spec/data4"] == "P('data',)"
  assert results["cache_spec/fsdp2_tensor2"] == "P('fsdp', 'tensor')"
  assert results["cache_spec/222"] == "P(('data', 'fsdp'), 'tensor')"


def _one_device_mesh():
  import jax  # pylint: disable=g-import-not-at-top
  from rlscale.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  return mesh_lib.make_mesh({"data": 1, "fsdp": 1, "tensor": 1}, jax.devices()[:1])


def test_refuses_replicated_params_long_prompts_and_bad_group():
  import numpy as np  # pylint: disable=g-import-not-at-top
  from rlscale.sampler.mesh_sampler import MeshSampler  # pylint: disable=g-import-not-at-top
  from rlscale.sampler.strategies import SamplingConfig  # pylint: disable=g-import-not-at-top
  from tests.sampler.mesh_sampler_worker import MODEL  # pylint: disable=g-import-not-at-top
  sampler = MeshSampler(MODEL, 4, SamplingConfig(temperature=1.0), (1,), 0, _one_device_mesh(),
                        prompt_buckets=(8,))
  tokens, mask = np.full((2, 3), 5, np.int32), np.ones((2, 3), np.int32)
  with pytest.raises(ValueError, match="params_replicated=True is the pmap layout"):
    sampler({}, tokens, mask, None, params_replicated=True)
  with pytest.raises(ValueError, match="exceeds the largest prompt bucket"):
    sampler({}, np.full((2, 9), 5, np.int32), np.ones((2, 9), np.int32), None)
  assert sampler.num_devices == 1
  with pytest.raises(ValueError, match="samples_per_prompt must be an int >= 1"):
    sampler({}, tokens, mask, None, samples_per_prompt=0)
