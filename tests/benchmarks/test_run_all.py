"""The benchmark scripts' code paths at tiny sizes (no timing assertions): W2's rl_step.py, with
TRL when it is installed, and run_all.py's summary."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from tests.timeouts import hang_timeout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--rounds", "2", "--hidden_size", "32", "--intermediate_size", "64", "--num_layers", "1",
        "--num_heads", "2", "--num_kv_heads", "1", "--head_dim", "16", "--vocab_size", "128",
        "--new_tokens", "8", "--prompts", "2", "--group", "2"]
HAVE_TRL = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "trl", "datasets"))


def _run(script, *args):
  env = {**os.environ, "PYTHONPATH": ROOT}
  return subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), *args],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=hang_timeout(300))


@pytest.mark.slow
def test_rl_step_tiny(tmp_path):
  done = _run("rl_step.py", "--out", str(tmp_path), *TINY)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  report = json.load(open(tmp_path / "rl_step.json"))
  rl = report["rlscale"]
  assert len(rl["steps"]) == 2 and set(rl["splits"]) == {
      "generation", "reward", "forward", "backward_optimizer"}
  # Exactly new_tokens per response (EOS disabled): 2 prompts x 2 samples x 8 tokens.
  assert all(s["tokens_generated"] == 32 for s in rl["steps"])
  assert report["compiles_after_warmup"] == 0
  assert len(report["machine"]["loadavg_before"]) == 3
  # rlscale at host_threads 1 and the CPU count; its figure is the faster of them.
  by_threads = report["rlscale_by_host_threads"]
  assert set(by_threads) == {"1", str(os.cpu_count())}
  assert rl["seconds_per_step"] == min(s["seconds_per_step"] for s in by_threads.values())
  assert by_threads[str(rl["host_threads"])]["seconds_per_step"] == rl["seconds_per_step"]
  if HAVE_TRL:
    assert report["trl_status"] == "ran" and report["trl"]["seconds_per_step"] > 0
    assert report["ratio_trl_over_rlscale"] > 0
    for steps in report["trl_by_threads"].values():
      assert steps is None or len(steps["steps"]) == 2
  else:
    assert report["trl"] is None and report["trl_status"].startswith("not installed")


@pytest.mark.slow
def test_run_all_summarises_what_ran(tmp_path):
  done = _run("run_all.py", "--out", str(tmp_path), "--only", "rl_step",
              "--extra", "rl_step=" + " ".join(TINY + ["--no_trl"]))
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  results = json.load(open(tmp_path / "results.json"))
  assert {"machine", "w1", "w2", "update_step", "verifier", "matmul_peak_flops", "peak_rss_mib",
          "goals"} <= set(results)
  assert results["w1"] is None and results["update_step"] is None  # not run
  assert results["w2"]["rlscale"]["seconds_per_step"] > 0
  assert results["w2"]["trl"] is None and results["w2"]["trl_status"] == "not run (--no_trl)"
  assert results["peak_rss_mib"]["rl_step"] > 50  # a JAX process holds well over 50 MiB
  assert results["status"] == {"rl_step": "ok"}
  table = open(tmp_path / "results.md").read()
  assert "| W2 RL step | TRL / rlscale (goal >= 2) | not run (--no_trl) |" in table


def test_run_all_rejects_unknown_names(tmp_path):
  done = _run("run_all.py", "--out", str(tmp_path), "--only", "nope")
  assert done.returncode == 2 and "--only must name" in done.stderr


@pytest.mark.slow
def test_train_phase_ab_smoke(tmp_path):
  """The training-phase A/B on the main job's smoke config: the variants that change nothing
  numerically agree with the baseline, and no compile happens after the warm-up."""
  done = _run("train_phase_ab.py", "--out", str(tmp_path), "--config",
              "experiments/configs/default.py:smoke", "--rounds", "2", "--batches", "1",
              "--variants", "baseline,full_prompt,step_only")
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  report = json.load(open(tmp_path / "train_phase_ab.json"))
  assert set(report["median_seconds"]) == {"baseline", "full_prompt", "step_only"}
  assert all(len(v) == 2 for v in report["seconds"].values())
  assert all(check["allclose"] for check in report["numerical_check_vs_baseline"].values())
  # The smoke's two-term chain_sum prompts ("7 - 3 =", 7 characters) in the sampler's 16-column
  # bucket train on 8 columns.
  workload = report["workload"]
  assert workload["prompt_bucket"] == 16 and workload["prompt_real_tokens_max"] == 7
  assert [w[0] for w in workload["trained_widths_prompt_response"]] == [8]
  assert report["compiles_after_warmup"] == 0


@pytest.mark.slow
def test_profiles_split_op_time_by_category(tmp_path):
  """profile_update.py --w2 and profile_sampler.py: the categories' shares sum to 1, matmul among
  them, on the shapes they say."""
  done = _run("profile_update.py", "--w2", "--steps", "1", "--out", str(tmp_path))
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  update = json.load(open(tmp_path / "update_profile.json"))
  # The runner's default on a CPU: the most slices of >= 1,024 tokens, 4 of 16 x 72 here.
  assert (update["rows"], update["tokens"], update["microbatches"]) == (64, 64 * 72, 4)
  done = _run("profile_sampler.py", "--batch", "2", "--calls", "1", "--out", str(tmp_path))
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  sampler = json.load(open(tmp_path / "sampler_profile.json"))
  assert sampler["new_tokens_per_s"] == pytest.approx(2 * 64 / sampler["wall_seconds_per_call"])
  for report in (update, sampler):
    shares = [c["share"] for c in report["categories"].values()]
    assert sum(shares) == pytest.approx(1.0) and "matmul" in report["categories"]
