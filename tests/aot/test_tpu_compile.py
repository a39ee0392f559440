"""The main job's steps compiled by the real TPU compiler (libtpu, `pip install "rlscale[tpu]"`)
for a v5e-8 slice (v5e:2x4, 8 chips) and a v5p-8 slice (v5p:2x2x1, 4 chips), with abstract
inputs on this CPU: every step must lower and fit. A change that breaks TPU lowering (an op the
TPU cannot lower, a sharding the partitioner refuses) fails here. Skipped, with the reason, only
where libtpu cannot load (not installed, not Linux x86-64).

About 40 s on 2 cores; the 2-layer Qwen3-8B shape (real widths, vocabulary, bfloat16, remat,
fsdp) is marked slow: its update step alone takes 40-80 s to compile here.
"""

import json
import os
import subprocess
import sys

import pytest

from experiments.configs.default import get_config
from rlscale.aot.topology import libtpu_unavailable_reason
from tests.timeouts import hang_timeout

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MAIN_JOB_STEPS = ["update", "sample", "eval_sample", "eval_greedy"]
# tests/conftest.py's persistent compilation cache cannot reload compile-only TPU executables;
# jax warns and compiles them again (the entries it writes are a few MB each).
pytestmark = pytest.mark.filterwarnings(
    "ignore:Error reading persistent compilation cache entry:UserWarning")
ROW_KEYS = {"model", "topology", "chips", "mesh", "step", "peak_bytes", "hbm_bytes", "fits",
            "layers", "flops", "seconds"}


@pytest.fixture(scope="module", autouse=True)
def libtpu():
  reason = libtpu_unavailable_reason()
  if reason is not None:
    pytest.skip(f"libtpu cannot load here: {reason}")


def _compile(config, topology, **kwargs):
  from rlscale.aot.run import compile_run  # pylint: disable=g-import-not-at-top
  return compile_run(config, topology, **kwargs)


def test_the_main_job_compiles_for_a_v5e_8_and_fits_from_the_command_line(tmp_path):
  out = tmp_path / "rows.json"
  result = subprocess.run(
      [sys.executable, "-m", "rlscale.aot", "--config=experiments/configs/default.py",
       "--topology=v5e:2x4", f"--json={out}"], cwd=REPO, capture_output=True, text=True,
      timeout=hang_timeout(60), env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert result.returncode == 0, result.stdout + result.stderr
  assert "topology: v5e:2x4, 8 chips of TPU v5 lite" in result.stdout
  assert "does not fit" not in result.stdout
  rows = json.loads(out.read_text())["rows"]
  assert [r["step"] for r in rows] == MAIN_JOB_STEPS
  for row in rows:
    assert ROW_KEYS <= set(row), row
    assert row["fits"] and row["chips"] == 8 and row["layers"] == 2
    assert 0 < row["peak_bytes"] <= row["hbm_bytes"] == int(15.75 * 2**30)
    assert row["flops"] > 0
  assert rows[0]["mesh"] == {"data": 8, "fsdp": 1, "tensor": 1}


def test_the_main_job_compiles_for_a_v5p_8_with_fsdp_and_fits():
  config = get_config()
  config.mesh.data, config.mesh.fsdp = 1, -1  # parameters and Adam moments sharded over 4 chips
  compiled = _compile(config, "v5p:2x2x1", eval_steps=False)  # v5e's test compiles them
  assert [r.step for r in compiled.results] == ["update", "sample"]
  assert compiled.fits, compiled.table()
  assert dict(compiled.run.mesh.shape) == {"data": 1, "fsdp": 4, "tensor": 1}
  update = compiled.results[0]
  assert update.seconds is not None and update.seconds > 0  # v5p's cost model is valid


def test_a_step_that_does_not_fit_is_one_line_saying_what_to_change():
  config = get_config()
  config.mesh.data, config.mesh.fsdp = 1, -1
  config.rl.prompts_per_step, config.rl.group_size = 4, 8  # 32 rows of 4,096 tokens, no remat
  config.rollout.max_prompt_tokens = config.rollout.max_new_tokens = 2048
  config.model.remat = False
  config.model.attention_impl = "standard"  # dense [B, heads, T, S] scores: far past the HBM
  compiled = _compile(config, "v5e:2x4", shape="qwen3-8b", layers=2, only=["update"])
  (update,) = compiled.results
  assert not update.compiled and not update.fits
  assert update.program_bytes > update.hbm_bytes
  lines = [line for line in compiled.table().splitlines() if "does not fit" in line]
  assert len(lines) == 1
  assert lines[0].startswith("update does not fit v5e:2x4 (TPU v5 lite): the compiler refused "
                             "it: needs ")
  assert "a device has 15.75 GiB" in lines[0]
  assert "--config.model.remat=True" in lines[0] and "--config.rl.microbatches=2" in lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("topology, step", [("v5p:2x2x1", "update"), ("v5e:2x4", "sample")])
def test_a_two_layer_qwen3_8b_compiles_and_fits(topology, step):
  config = get_config()
  config.model.dtype = "bfloat16"
  config.mesh.data, config.mesh.fsdp = 1, -1
  config.rl.prompts_per_step, config.rl.group_size = 2, 4
  config.rollout.max_prompt_tokens = config.rollout.max_new_tokens = 64
  compiled = _compile(config, topology, shape="qwen3-8b", layers=2, only=[step])
  assert compiled.fits, compiled.table()
  assert compiled.run.model_config.remat and compiled.rows()[0]["full_layers"] == 36


def test_an_axis_of_8_on_a_4x4x4_v5p_slice_splits_a_physical_axis():
  from rlscale.aot.topology import topology_devices  # pylint: disable=g-import-not-at-top
  from rlscale.parallel.mesh import make_mesh  # pylint: disable=g-import-not-at-top
  devices = topology_devices("v5p:4x4x4")
  mesh = make_mesh({"data": 1, "fsdp": -1, "tensor": 1, "expert": 8}, devices)
  assert dict(mesh.shape) == {"data": 1, "fsdp": 8, "tensor": 1, "expert": 8}
  assert sorted(d.id for d in mesh.devices.flat) == sorted(d.id for d in devices)
