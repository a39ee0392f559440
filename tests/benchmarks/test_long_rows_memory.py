"""benchmarks/long_rows_memory.py (issue 42's memory goals on the compilers' figures): its cases'
configs, goal checks, the guard on a child that grows past its memory limit, and the committed
result's rows. Nothing is compiled here (the full-model compiles take minutes)."""

import json
import os
import subprocess
import sys

import pytest

from tests.benchmarks import ROOT, load_script

long_rows = load_script("long_rows_memory")
GIB = 2 ** 30
RESULT = os.path.join(ROOT, "benchmarks", "results", "long_rows_memory.json")


@pytest.mark.parametrize("name", sorted(long_rows.CASES))
def test_case_configs(name):
  case = long_rows.CASES[name]
  config = long_rows.case_config(case)
  assert config.rl.prompts_per_step * config.rl.group_size == case.prompts * case.group
  assert config.rollout.max_prompt_tokens + config.rollout.max_new_tokens == case.tokens
  assert config.rl.microbatches == 1
  assert config.model.attention_impl == case.attention_impl
  assert (config.model.dtype, config.model.remat) == ("bfloat16", True)


def test_goal_check():
  check = long_rows.goal_check
  goal = "temporaries_bytes <= 8589934592"
  row = {"layers": 28, "full_layers": 28, "compiled": True, "fits": True,
         "temporaries_bytes": 8 * GIB, "peak_bytes": 10 * GIB, "hbm_bytes": 16 * GIB}
  assert check(goal, row) == (True, 0)
  assert check(goal, {**row, "temporaries_bytes": 9 * GIB}) == (False, GIB)
  assert check("fits", row) == (True, -6 * GIB)
  refused = {**row, "compiled": False, "fits": False, "peak_bytes": 17 * GIB}
  assert check("fits", refused) == (False, GIB)
  assert check(goal, {**refused, "temporaries_bytes": None}) == (False, None)
  # No figure for the model: fewer layers compiled, or no compile at all; a contrast row.
  assert check("fits", {**row, "layers": 2}) == (None, None)
  assert check("fits", {"layers": None, "full_layers": None, "status": "skipped: ..."}) == (
      None, None)
  assert check(None, row) == (None, None)


def test_guard_stops_a_child_past_its_memory(monkeypatch):
  grow = "import time; x = b'1' * (300 * 2 ** 20); time.sleep(60)"  # 300 MiB written
  real_popen = subprocess.Popen
  monkeypatch.setattr(long_rows.subprocess, "Popen",
                      lambda argv, **kw: real_popen([sys.executable, "-c", grow], **kw))
  monkeypatch.setattr(long_rows, "POLL_SECONDS", 0.05)
  row = long_rows.run_case("a_cpu", None, guard_rss=100 * 2 ** 20, guard_seconds=50)
  assert row["status"].startswith("skipped: host memory past 0.1 GiB"), row
  assert row["goal_met"] is None and row["wall_seconds"] < 50
  assert row["host_peak_rss_bytes"] > 100 * 2 ** 20


def test_unknown_case_is_refused(tmp_path):
  with pytest.raises(SystemExit):
    long_rows.main(["--out", str(tmp_path), "--cases", "a_blockwise,nope"])


def _refused_temporaries(row):
  """The compiler's "HLO temporaries (N G)" figure of a refused row, in bytes."""
  number = row["message"].split("HLO temporaries (")[1].split("G)")[0]
  return int(float(number) * GIB)


def test_committed_result():
  result = json.load(open(RESULT))
  assert result["command"] == "python benchmarks/long_rows_memory.py --out benchmarks/results"
  assert result["jax"] and result["libtpu"] and len(result["git_commit"]) == 40
  rows = {r["case"]: r for r in result["rows"]}
  assert list(rows) == list(long_rows.DEFAULT_CASES)
  for name, row in rows.items():
    case = long_rows.CASES[name]
    assert (row["model"], row["topology"], row["attention_impl"], row["tokens"], row["rows"]) == (
        case.model, case.topology, case.attention_impl, case.tokens, case.prompts * case.group)
    assert row["goal"] == case.goal
    assert (row["goal_met"], row["goal_gap_bytes"]) == long_rows.goal_check(case.goal, row)
    if "fits" in row:  # compiled or refused for memory: every layer, one microbatch
      assert row["layers"] == row["full_layers"] and row["microbatches"] == 1
      assert row["peak_bytes"] == row["program_bytes"] + row["resident_bytes"]
      assert row["temporaries_bytes"] == (row["temp_bytes"] if row["compiled"]
                                          else _refused_temporaries(row))
  assert rows["b_splash"]["rows_per_device"] == 1
