"""benchmarks/update_memory.py --state_table: per-device training-state memory of the Qwen3 sizes
from their parameter counts, checked by hand and against the compiled step's argument bytes."""

import json
import os
import subprocess
import sys

import pytest

from tests.benchmarks import ROOT, load_script
from tests.timeouts import hang_timeout

update_memory = load_script("update_memory")


def test_qwen3_0p6b_state_by_hand():
  # d = 1024, 16 heads, 8 KV heads, head_dim 128, f = 3072, 28 layers, vocab 151,936, tied:
  # attention 1024*2048 + 2*1024*1024 + 2048*1024 + 2*128 (q/k norms) = 6,291,712;
  # block = 6,291,712 + 3*1024*3072 + 2*1024 = 15,730,944;
  # N = 28 * 15,730,944 + 1024 (final norm) + 151,936 * 1024 = 596,049,920.
  n = 596_049_920
  assert update_memory.qwen3("0.6B").num_params() == n
  row = update_memory.state_memory(update_memory.qwen3("0.6B"))
  gib = 2 ** 30
  assert row == {"params_billion": 0.596, "params_gib": round(4 * n / gib, 2),  # 2.22
                 "adam_gib": round(8 * n / gib, 2), "reference_gib": round(4 * n / gib, 2),
                 "gradients_gib": round(4 * n / gib, 2), "ppo_critic_gib": round(12 * n / gib, 2)}
  # The compiled step's arguments (params + Adam state, float32; committed benchmark result).
  with open(os.path.join(ROOT, "benchmarks", "results", "update_memory.json")) as f:
    measured = json.load(f)["results"][0]["argument_gib"]
  assert 12 * n / gib == pytest.approx(measured, abs=0.01)


def test_state_table_script_prints_every_size(tmp_path):
  done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "update_memory.py"),
                         "--out", str(tmp_path), "--state_table"], cwd=ROOT, capture_output=True,
                        text=True, timeout=hang_timeout(120),
                        env={**os.environ, "PYTHONPATH": ROOT})
  assert done.returncode == 0, done.stderr[-2000:]
  rows = json.load(open(tmp_path / "state_memory.json"))["rows"]
  assert [r["model"] for r in rows] == ["Qwen3-0.6B", "Qwen3-1.7B", "Qwen3-4B", "Qwen3-8B"]
  assert [round(r["params_billion"], 1) for r in rows] == [0.6, 1.7, 4.0, 8.2]
  assert done.stdout.count("\n| Qwen3-") == 4
