"""The cost-model throughput profile (`rlscale.aot.profile`, `rlscale.aot.programs`): the roofline
by hand, the per-batch row and its report on hand-made costs, and (where libtpu loads) the
built-in model's loop-free programs compiled for a v5p-8 slice (v5p:2x2x1, 4 chips): decode
flops linear in rows, prefill flops near 2 x parameters x tokens, a written profile the report
and `fit_profile` read, a refused program recorded as a batch that does not fit.

About 50 s of CPU on 2 cores, most of it compiling the built-in model's programs at 2 batches
(twice: the module's profile and the refused one).
"""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from experiments.configs.default import get_config
from rlscale.aot import measure
from rlscale.aot import profile as profile_lib
from rlscale.aot.topology import libtpu_unavailable_reason
from rlscale.scaling import report as report_lib
from rlscale.scaling import report_writer
from rlscale.scaling.throughput import fit_profile
from rlscale.scaling.throughput_model import Throughput
from tests.scaling.test_report import write_run
from tests.timeouts import hang_timeout

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
pytestmark = pytest.mark.filterwarnings(
    "ignore:Error reading persistent compilation cache entry:UserWarning")


def test_roofline_is_the_slower_of_compute_and_memory():
  # 2e12 FLOP at 1e12 FLOP/s = 2 s against 1e9 B at 1e12 B/s = 1 ms: compute-bound.
  assert profile_lib.roofline_seconds(2e12, 1e9, 1e12, 1e12) == pytest.approx(2.0)
  # 1e9 FLOP = 1 ms against 3e12 B at 1e12 B/s = 3 s: memory-bound.
  assert profile_lib.roofline_seconds(1e9, 3e12, 1e12, 1e12) == pytest.approx(3.0)
  # v5p: 459 TFLOP/s and 2,765 GB/s; 4.59e11 FLOP = 1 ms, 5.53e9 B = 2 ms.
  assert profile_lib.roofline_seconds(4.59e11, 5.53e9, *profile_lib.CHIP_PEAKS["v5p"]) == \
      pytest.approx(2e-3)
  assert profile_lib.roofline_seconds(0.0, 0.0, 1.0, 1.0) == 0.0
  with pytest.raises(ValueError, match="peaks must be > 0"):
    profile_lib.roofline_seconds(1.0, 1.0, 0.0, 1.0)
  with pytest.raises(ValueError, match=">= 0"):
    profile_lib.roofline_seconds(-1.0, 1.0, 1.0, 1.0)


def test_topology_names_are_checked_against_the_chips_with_peaks():
  assert profile_lib.check_topology_name("v5p:2x2x2") == "v5p"
  for bad in ("local", "h100:8", "v5p", ""):
    with pytest.raises(ValueError, match=r"chip one of v4, v5e, v5p, v6e \(e\.g\. v5p:2x2x2"):
      profile_lib.check_topology_name(bad)


class _FakeTopology:
  """What `device_peaks` reads of a Topology."""

  def __init__(self, chip, devices_per_chip):
    self.chip, self.devices_per_chip, self.kind, self.name = chip, devices_per_chip, chip, chip


def test_device_peaks_share_a_chip_between_its_devices():
  assert profile_lib.device_peaks(_FakeTopology("v5e", 1)) == (197e12, 819e9)
  assert profile_lib.device_peaks(_FakeTopology("v4", 2)) == (137.5e12, 600e9)
  with pytest.raises(ValueError, match="no published peaks"):
    profile_lib.device_peaks(_FakeTopology("NVIDIA H100", 1))


def _cost(phase, seconds_per_step, optimal=None, repeats=1):
  """A program's cost entry as `program_cost` makes it, by hand."""
  return {"phase": phase, "repeats": repeats, "seconds_per_step": seconds_per_step,
          "flops_per_step": 10.0 * seconds_per_step, "bytes_per_step": 2.0 * seconds_per_step,
          "cost_model_seconds": optimal, "compile_seconds": 1.0, "peak_bytes": 100, "fits": True}


def _hand_profile(batches=((1, 1.0, 3.0), (2, 1.0, 4.0))):
  """An estimated profile of P prompts x 8 with prefill `a` + decode `b` seconds and 4 s of
  training per step at each (P, a, b)."""
  rows = [profile_lib.batch_row(p, 8, 16, 8, {
      "prefill": _cost("generation", a), "decode": _cost("generation", b, optimal=b / 8, repeats=8),
      "update": _cost("training", 4.0)}) for p, a, b in batches]
  return {"name": "hand", "estimate": profile_lib.ESTIMATE, "label": profile_lib.LABEL,
          "device": "v5p:2x2x1: 4 x TPU v5p, cost-model estimate", "batches": rows,
          "not_fitting": [], "fits": fit_profile(rows)}


def test_a_batch_row_sums_its_programs_by_phase():
  row = _hand_profile()["batches"][0]
  assert row["batch_size"] == 8
  seconds = {p: v["median"] for p, v in row["seconds"].items()}
  assert seconds == {"generation": 4.0, "reward": 0.0, "training": 4.0, "step": 8.0}
  assert row["generation_share"] == 0.5
  assert row["responses_per_s"] == 1.0  # 8 responses in 8 s
  assert row["responses_per_s_by_phase"] == {"generation": 2.0, "reward": None, "training": 2.0}
  assert row["tokens_generated_per_step"] == 64 and row["tokens_trained_per_step"] == 8 * 24
  assert row["flops_by_phase"] == {"generation": 40.0, "reward": 0.0, "training": 40.0}
  # The prefill and update have no cost-model seconds: their phases none, a whole phase's sum
  # otherwise (8 decode steps x 3 / 8 s).
  assert row["cost_model_seconds_by_phase"] == {"generation": None, "reward": 0.0,
                                                 "training": None}


def test_an_estimated_profile_is_read_and_labelled_as_an_estimate(tmp_path):
  profile = _hand_profile()
  fits = profile["fits"]
  # Generation 4 s at B = 8 and 5 s at B = 16: 2 and 3.2 responses/s.
  assert fits["generation_throughput_ratio"] == pytest.approx(3.2 / 2.0)
  assert fits["generation"]["slope"] == pytest.approx(1 / 8)
  throughput = Throughput(profile, [])
  assert throughput.estimate == profile_lib.LABEL and throughput.q(16) == pytest.approx(16 / 9)
  assert Throughput({"batches": profile["batches"]}, []).estimate is None  # a measured one
  root = str(tmp_path)
  write_run(root, "a", prompts=4, lr_scaling="none", seed=0, group=2,
            evals={0: 0.2, 16: 0.4, 32: 0.6}, step_seconds=(1.0, 0.0, 1.0))
  write_run(root, "b", prompts=8, lr_scaling="none", seed=0, group=2,
            evals={0: 0.2, 16: 0.6, 32: 0.6}, step_seconds=(1.0, 0.0, 1.0))
  report = report_lib.build_report(root, profile=profile, target=0.5, window=1)
  with open(report_writer.write_report(report, root)["md"], encoding="utf-8") as f:
    text = f.read()
  assert f"Throughput from: profile (a {profile_lib.LABEL} (v5p:2x2x1" in text
  assert "measured alone" not in text


def test_a_bad_topology_is_one_line_naming_the_chips(tmp_path):
  result = subprocess.run(
      [sys.executable, "-m", "rlscale.throughput", "--config=experiments/configs/default.py",
       "--topology=h100:8", f"--out={tmp_path / 'out'}"], cwd=REPO, capture_output=True,
      text=True, timeout=hang_timeout(30), env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
      "error: --topology='h100:8': a cost-model profile is for a TPU slice <chip>:<shape> with "
      f"chip one of v4, v5e, v5p, v6e (e.g. {profile_lib.EXAMPLE_NAMES})"]
  assert not (tmp_path / "out").exists()


# --- compiled for a v5p-8 slice (skipped where libtpu cannot load) ---

@pytest.fixture(name="compiled_profile", scope="module")
def fixture_compiled_profile(tmp_path_factory):
  """The default config's profile (the built-in model, G = 8, 16-token prompts, 8-token
  responses, data parallelism) at P = 4, 16 (B = 32, 128) on v5p:2x2x1, written to a folder."""
  reason = libtpu_unavailable_reason()
  if reason is not None:
    pytest.skip(f"libtpu cannot load here: {reason}")
  config = get_config()
  out = str(tmp_path_factory.mktemp("profile"))
  profile = profile_lib.estimate_profile(config, "v5p:2x2x1", [16, 4], name="default",
                                         log=lambda line: None)
  return profile_lib.write_profile(profile, out), out, config


def test_decode_flops_grow_with_rows_and_its_bytes_less(compiled_profile):
  profile, _, _ = compiled_profile
  small, large = (r["programs"]["decode"] for r in profile["batches"])
  assert (small["repeats"], large["repeats"]) == (8, 8)  # Tr = 8 decode steps
  # Every flop of a decode step is per row (matmuls of [rows, hidden], the draw over [rows, V]):
  # 4x the rows, 4x the flops (10%: index arithmetic that does not scale).
  assert large["flops"] / small["flops"] == pytest.approx(4.0, rel=0.1)
  # The weights are read once whatever the rows: the bytes grow less than the rows.
  assert 1.0 < large["bytes_accessed"] / small["bytes_accessed"] < 4.0


def test_prefill_flops_are_about_two_per_parameter_and_token(compiled_profile):
  profile, _, config = compiled_profile
  m = config.model
  h, hd, layers = m.hidden_size, m.head_dim, m.num_layers
  qkv = h * (m.num_heads + 2 * m.num_kv_heads) * hd  # parameters of q, k, v: 32,768
  rest = h * m.num_heads * hd + 3 * h * m.intermediate_size  # o, gate, up, down: 163,840
  # Attention over the cache's 16 + 8 slots: q . k and p . v, 2 x 2 x 24 x heads x head_dim.
  attention = 4 * 24 * m.num_heads * hd
  for row in profile["batches"]:
    rows = row["prompts_per_step"] // 4  # the prompts are sharded over the 4 devices
    tokens = rows * 16
    # 2 flops per parameter and token, but the last layer (last_only) runs o and the MLP on the
    # last position alone; the embedding is a lookup, the head's one position is 0.1% here.
    matmuls = 2 * tokens * (layers * qkv + (layers - 1) * rest) + 2 * rows * rest
    expected = matmuls + layers * tokens * attention  # 7.67e6 + 0.39e6 per prompt
    # What is left are norms, rope, SiLU and softmax: a few flops per element against the
    # matmuls' 2 x 128 or more per element (1% measured): within 5%.
    assert row["programs"]["prefill"]["flops"] == pytest.approx(expected, rel=0.05)


def test_the_written_profile_is_a_throughput_json(compiled_profile):
  profile, out, _ = compiled_profile
  with open(os.path.join(out, "throughput.json"), encoding="utf-8") as f:
    written = json.load(f)
  assert written["estimate"] == "cost model" and written["label"] == profile_lib.LABEL
  assert written["topology"] == "v5p:2x2x1" and written["chips"] == 4
  assert [r["batch_size"] for r in written["batches"]] == [32, 128] and not written["not_fitting"]
  assert fit_profile(written["batches"]) == written["fits"] and written["fits"]
  for row in written["batches"]:
    assert set(row["programs"]) == {"prefill", "decode", "update"}
    assert row["seconds"]["reward"]["median"] == 0.0
    assert row["seconds"]["step"]["median"] == pytest.approx(
        sum(p["seconds_per_step"] for p in row["programs"].values()))
    assert row["cost_model_seconds_by_phase"]["generation"] > 0  # v5p's cost model is valid
  assert os.path.isfile(os.path.join(out, "throughput.png"))
  assert Throughput(written, []).estimate == profile_lib.LABEL


def test_a_program_the_compiler_refuses_leaves_its_batch_out(compiled_profile, monkeypatch):
  _, _, config = compiled_profile
  real = measure.compile_step

  def refuse_large_decodes(step, topology):
    result = real(step, topology)
    if step.name == "decode" and step.rows > 32:
      return dataclasses.replace(result, compiled=False, flops=None,
                                 program_bytes=2 * result.hbm_bytes,
                                 message="RESOURCE_EXHAUSTED: Ran out of memory")
    return result
  monkeypatch.setattr(measure, "compile_step", refuse_large_decodes)
  profile = profile_lib.estimate_profile(config, "v5p:2x2x1", [4, 16], log=lambda line: None)
  assert [r["batch_size"] for r in profile["batches"]] == [32]
  (refused,) = profile["not_fitting"]
  assert refused["batch_size"] == 128 and list(refused["programs"]) == ["decode"]
  assert refused["programs"]["decode"]["message"].startswith("RESOURCE_EXHAUSTED")
  assert profile["fits"] == {}  # one batch left: no line through it
