"""Throughput profile: spreads and fits on synthetic timings, and one real smoke profile."""

import json
import os
import subprocess
import sys

import pytest

from rlscale.scaling import throughput
from tests.timeouts import hang_timeout

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _row(batch, generation, training, tokens):
  seconds = {"generation": throughput.spread([generation] * 3),
             "reward": throughput.spread([0.0] * 3),
             "training": throughput.spread([training] * 3),
             "step": throughput.spread([generation + training] * 3)}
  return {"batch_size": batch, "seconds": seconds, "tokens_trained_per_step": tokens}


def test_spread_median_and_interquartile_range():
  s = throughput.spread([1.0, 2.0, 3.0, 4.0, 100.0])
  assert s["median"] == 3.0 and s["iqr"] == [2.0, 4.0]


def test_fit_profile_recovers_synthetic_costs():
  # Generation 1 s + 0.005 s per row: bandwidth-bound up to B = 200; training 0.1 s + 1 ms per
  # trained token at 24 tokens per response.
  rows = [_row(b, 1.0 + 0.005 * b, 0.1 + 0.001 * 24 * b, 24 * b) for b in (64, 128, 256, 512)]
  fit = throughput.fit_profile(rows)
  assert fit["generation"]["intercept"] == pytest.approx(1.0)
  assert fit["generation"]["slope"] == pytest.approx(0.005)
  assert fit["generation"]["bandwidth_bound_until_batch"] == pytest.approx(200.0)
  assert fit["generation"]["bandwidth_bound_within_measured"]  # 64 <= 200 <= 512
  assert fit["training"]["slope"] == pytest.approx(0.001)
  assert fit["training"]["intercept"] == pytest.approx(0.1)
  assert fit["step"]["intercept"] == pytest.approx(1.1)
  assert fit["generation_throughput_ratio"] == pytest.approx((512 / 3.56) / (64 / 1.32))
  assert throughput.fit_profile(rows[:1]) == {}
  # Measured only from B = 256 up, the crossover at 200 is an extrapolation: not claimed.
  assert not throughput.fit_profile(rows[2:])["generation"]["bandwidth_bound_within_measured"]


@pytest.mark.slow
def test_smoke_profile_writes_json_and_plot(tmp_path):
  out = subprocess.run(
      [sys.executable, "-m", "rlscale.throughput", "--config=experiments/sweeps/batch_lr.py:smoke",
       "--prompts_per_step=2,4", f"--out={tmp_path}", "--warmup=1", "--repeats=2"],
      cwd=ROOT, capture_output=True, text=True, timeout=hang_timeout(150))
  assert out.returncode == 0, out.stderr[-3000:]
  with open(tmp_path / "throughput.json") as f:
    profile = json.load(f)
  assert [r["batch_size"] for r in profile["batches"]] == [4, 8]
  for row in profile["batches"]:
    assert len(row["seconds"]["step"]["values"]) == 2
    assert row["responses_per_s"] == pytest.approx(row["batch_size"] / row["seconds"]["step"]["median"])
    assert row["peak_rss_mib"] > 0
  assert set(profile["fits"]) == {"generation", "training", "step", "generation_throughput_ratio"}
  assert os.path.exists(tmp_path / "throughput.png")


def test_a_profile_failing_at_setup_leaves_no_output_folder(tmp_path):
  from rlscale.runner.config_files import load_config_file  # pylint: disable=g-import-not-at-top
  config = load_config_file(os.path.join(ROOT, "experiments", "sweeps", "batch_lr.py"), "smoke")
  config.rl.loss_agg_mode = "bogus"
  with pytest.raises(ValueError, match="bogus"):
    throughput.profile(config, [2], str(tmp_path / "new" / "throughput"))
  assert os.listdir(tmp_path) == []
