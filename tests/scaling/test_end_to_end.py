"""The smoke study end to end: `python -m rlscale.sweep` on a sweep file's :smoke variant, then
`python -m rlscale.report`, checking the report's structure and arithmetic."""

import json
import math
import os
import subprocess
import sys

import pytest
from tests.timeouts import hang_timeout

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
RUN_KEYS = {"name", "prompts_per_step", "group_size", "batch_size", "lr_rule", "learning_rate",
            "seed", "samples_to_target", "censored", "throughput_responses_per_s",
            "time_to_target_s", "final_metric"}
DECISION_KEYS = {"base", "candidate", "lr_rule", "throughput_ratio", "samples_ratio", "n_seeds",
                 "throughput_ratio_ci", "samples_ratio_ci", "predicted_time_ratio",
                 "time_ratio_ci", "verdict", "censored"}


def _run(module, *args, timeout):
  out = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=timeout)
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
  return out


def check_report(sweep_dir):
  """Structure and arithmetic of report.json, and the figures."""
  with open(os.path.join(sweep_dir, "report.json")) as f:
    report = json.load(f)
  assert set(report["target"]) >= {"metric", "value"}
  assert report["runs"] and all(RUN_KEYS <= set(r) for r in report["runs"])
  for run in report["runs"]:
    assert run["batch_size"] == run["prompts_per_step"] * run["group_size"]
    if run["censored"]:
      assert run["samples_to_target"] is None and run["time_to_target_s"] is None
    else:
      assert run["time_to_target_s"] == pytest.approx(
          run["samples_to_target"] / run["throughput_responses_per_s"])
  assert report["decisions"]
  for d in report["decisions"]:
    assert DECISION_KEYS <= set(d)
    assert d["predicted_time_ratio"] == pytest.approx(d["samples_ratio"] / d["throughput_ratio"])
    assert d["verdict"] in ("faster", "slower", "unresolved")
    if d["censored"] or d["n_seeds"] < 3:
      assert d["verdict"] == "unresolved"
  assert report["validation"] and len(report["validation"]) == len(report["decisions"])
  for rule, entry in report["invariance"].items():
    if rule == "comparisons":
      continue
    assert str(entry["reference_batch"]) not in entry["scores"], rule
    assert all(v is None or v >= 0 for v in entry["scores"].values())
  assert math.isfinite(report["generation_throughput_ratio"])
  assert "available" in report["gns"]
  pngs = [f for f in os.listdir(sweep_dir) if f.endswith(".png")]
  assert len(pngs) >= 5
  return report


@pytest.mark.slow
def test_batch_lr_smoke_sweep_then_report(tmp_path):
  sweep_dir = str(tmp_path / "sweep")
  _run("rlscale.sweep", "--config=experiments/sweeps/batch_lr.py:smoke", f"--workdir={sweep_dir}",
       timeout=hang_timeout(450))
  with open(os.path.join(sweep_dir, "sweep.json")) as f:
    statuses = json.load(f)
  assert statuses["failed"] == 0
  assert {r["status"] for r in statuses["runs"]} == {"done"}
  # Rerunning skips the finished runs.
  out = _run("rlscale.sweep", "--config=experiments/sweeps/batch_lr.py:smoke",
             f"--workdir={sweep_dir}", timeout=hang_timeout(60))
  assert "8 of 8 runs already finished" in out.stdout
  _run("rlscale.report", sweep_dir, timeout=hang_timeout(60))
  report = check_report(sweep_dir)
  assert len(report["runs"]) == 8 and report["smoke"]
  assert {d["lr_rule"] for d in report["decisions"]} == {"none", "sqrt", "tuned"}
  assert "checks the pipeline only" in open(os.path.join(sweep_dir, "report.md")).read()


@pytest.mark.slow
@pytest.mark.parametrize("sweep_file, parallel, runs", [
    ("batch_lr_ppo.py", 1, 6),
    # Two run processes at a time, each pinned to its share of the cores.
    ("batch_lr_reasoning.py", 2, 6),
])
def test_other_sweep_files_smoke(tmp_path, sweep_file, parallel, runs):
  sweep_dir = str(tmp_path / "sweep")
  _run("rlscale.sweep", f"--config=experiments/sweeps/{sweep_file}:smoke", f"--workdir={sweep_dir}",
       f"--parallel={parallel}", timeout=hang_timeout(450))
  with open(os.path.join(sweep_dir, "sweep.json")) as f:
    statuses = json.load(f)
  assert [r["status"] for r in statuses["runs"]] == ["done"] * runs
  if parallel > 1:
    assert all(r["command"].startswith("python -m rlscale.main") for r in statuses["runs"])
    assert all(os.path.exists(os.path.join(sweep_dir, "runs", r["name"], "sweep_log.txt"))
               for r in statuses["runs"])
  _run("rlscale.report", sweep_dir, timeout=hang_timeout(60))
  report = check_report(sweep_dir)
  assert len(report["runs"]) == runs


def _failing_sweep(tmp_path, runs, *flags):
  """Runs `python -m rlscale.sweep` (exit status 1 expected) on batch_lr.py:smoke with a budget of
  8 responses and the given runs; returns (sweep dir, sweep.json's entries by name)."""
  sweep_file = tmp_path / "failing.py"
  sweep_file.write_text(
      "from rlscale.scaling.sweep_plan import load_sweep_module\n"
      f"BASE = load_sweep_module({os.path.abspath(os.path.join(ROOT, 'experiments', 'sweeps', 'batch_lr.py'))!r})\n"
      "def get_config(arg=None):\n"
      "  config = BASE.get_config('smoke')\n"
      "  config.train.total_samples = 8\n"
      "  config.train.eval_every_samples = 8\n"
      "  return config\n"
      "def get_sweep(arg=None):\n"
      f"  return {runs!r}\n")
  sweep_dir = str(tmp_path / "sweep")
  out = subprocess.run([sys.executable, "-m", "rlscale.sweep", f"--config={sweep_file}",
                        f"--workdir={sweep_dir}", *flags], cwd=ROOT, capture_output=True,
                       text=True, timeout=hang_timeout(300))
  assert out.returncode == 1, out.stderr[-3000:]  # exit status = failed runs
  with open(os.path.join(sweep_dir, "sweep.json")) as f:
    return sweep_dir, {r["name"]: r for r in json.load(f)["runs"]}


def test_a_failed_run_is_recorded_and_the_others_continue(tmp_path):
  sweep_dir, statuses = _failing_sweep(tmp_path, [{"rl.loss_agg_mode": "bogus"}, {"seed": 0}])
  assert statuses["loss_agg_mode=bogus"]["status"] == "failed"
  assert "bogus" in statuses["loss_agg_mode=bogus"]["error"]
  assert statuses["seed=0"]["status"] == "done"
  # The run that failed at setup left no run directory (the failure is in sweep.json).
  assert sorted(os.listdir(os.path.join(sweep_dir, "runs"))) == ["seed=0"]


def test_a_run_process_failing_at_setup_leaves_no_run_directory(tmp_path):
  """--parallel runs each run as a process logging into its run directory: when it fails before
  writing results, the directory goes and the log's end is kept in sweep.json."""
  sweep_dir, statuses = _failing_sweep(tmp_path, [{"rl.loss_agg_mode": "bogus"}], "--parallel=2")
  entry = statuses["loss_agg_mode=bogus"]
  assert entry["status"] == "failed"
  assert entry["error"].startswith("error: rl.loss_agg_mode='bogus'"), entry
  assert entry["log_tail"].rstrip().endswith(entry["error"])
  assert os.listdir(os.path.join(sweep_dir, "runs")) == []

