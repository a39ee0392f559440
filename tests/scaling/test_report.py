"""The report on hand-made run directories: every number worked out by hand."""

import json
import math
import os
import subprocess
import sys

import pytest

from rlscale.scaling import decision
from rlscale.scaling import figures
from rlscale.scaling import report as report_lib
from rlscale.scaling import report_writer
from rlscale.scaling import run_data
from tests.timeouts import hang_timeout

LR0 = 1e-4


def write_run(root, name, *, prompts, lr_scaling, seed, evals, step_seconds, group=2,
              learning_rate=LR0, reference_batch=8, budget=32, extra=None, minibatches=1):
  """A run directory: config.json and metrics.jsonl with one record per step (B = prompts x group
  responses), evaluations at the sample counts in `evals` ({samples: accuracy}), and
  `step_seconds` = (generation, reward, training) seconds per step."""
  path = os.path.join(root, "runs", name)
  os.makedirs(path)
  config = {"seed": seed, "rl": {"prompts_per_step": prompts, "group_size": group,
                                 "minibatches": minibatches},
            "optim": {"learning_rate": learning_rate, "lr_scaling": lr_scaling,
                      "reference_batch": reference_batch},
            "train": {"total_samples": budget, "total_steps": None}}
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump({"config": config}, f)
  batch = prompts * group
  records = [{"step": 0, "samples": 0, "eval/greedy_accuracy": evals[0],
              "wall/generation": 0.0, "wall/reward": 0.0, "wall/training": 0.0}]
  for step in range(1, budget // batch + 1):
    samples = step * batch
    record = {"step": step, "samples": samples,
              **{f"wall/{p}": s * step for p, s in zip(("generation", "reward", "training"),
                                                       step_seconds)}}
    if samples in evals:
      record["eval/greedy_accuracy"] = evals[samples]
    record.update(extra or {})
    records.append(record)
  with open(os.path.join(path, "metrics.jsonl"), "w") as f:
    f.write("".join(json.dumps(r) + "\n" for r in records))
  return path


@pytest.fixture(name="sweep_dir")
def fixture_sweep_dir(tmp_path):
  root = str(tmp_path)
  # B = 8 (the reference batch: every rule), 2 s per step -> 4 responses/s; reaches 0.5 at 24.
  write_run(root, "a", prompts=4, lr_scaling="none", seed=0,
            evals={0: 0.2, 16: 0.4, 32: 0.6}, step_seconds=(1.0, 0.0, 1.0))
  # B = 16 at lr0 (rule none), 2 s per step -> 8 responses/s; never reaches 0.5: censored at 32.
  write_run(root, "b", prompts=8, lr_scaling="none", seed=0,
            evals={0: 0.2, 16: 0.3, 32: 0.4}, step_seconds=(0.5, 0.5, 1.0))
  # B = 16 at lr0 sqrt(2) (rule sqrt): 0.2 -> 0.6 between 0 and 16 responses: 0.5 at 12.
  write_run(root, "c", prompts=8, lr_scaling="sqrt", seed=0,
            evals={0: 0.2, 16: 0.6, 32: 0.6}, step_seconds=(0.5, 0.5, 1.0))
  return root


def test_samples_and_time_to_target_by_hand(sweep_dir):
  report = report_lib.build_report(sweep_dir, target=0.5, window=1)
  runs = {r["name"]: r for r in report["runs"]}
  assert runs["a"]["samples_to_target"] == pytest.approx(24.0)
  assert runs["a"]["throughput_responses_per_s"] == pytest.approx(4.0)
  assert runs["a"]["time_to_target_s"] == pytest.approx(6.0)
  assert runs["a"]["measured_time_to_target_s"] == pytest.approx(6.0)  # 3 steps of 2 s
  assert runs["b"]["censored"] and runs["b"]["samples_to_target"] is None
  assert runs["b"]["samples_lower_bound"] == 32 and runs["b"]["time_to_target_s"] is None
  assert runs["c"]["samples_to_target"] == pytest.approx(12.0)
  assert runs["c"]["time_to_target_s"] == pytest.approx(1.5)
  assert runs["c"]["learning_rate"] == pytest.approx(LR0 * 2 ** 0.5)
  # LR rules by effective learning rate: the reference-batch run counts for every rule.
  assert runs["a"]["rules"] == ["none", "sqrt", "sqrt_adam", "linear"]
  assert runs["b"]["rules"] == ["none"] and runs["c"]["rules"] == ["sqrt"]


def test_invariance_and_decisions_by_hand(sweep_dir):
  report = report_lib.build_report(sweep_dir, target=0.5, window=1)
  # Grid {16, 32} (the shared 0-sample point left out). none: |0.4 - 0.3|, |0.6 - 0.4| -> 0.15;
  # sqrt: |0.6 - 0.4|, |0.6 - 0.6| -> 0.1. The reference batch is not scored against itself.
  assert report["invariance"]["none"]["scores"]["16"] == pytest.approx(0.15)
  assert report["invariance"]["sqrt"]["scores"]["16"] == pytest.approx(0.1)
  assert "8" not in report["invariance"]["sqrt"]["scores"]
  assert "linear" not in report["invariance"]  # met at one batch only
  decisions = {d["lr_rule"]: d for d in report["decisions"]}
  none, sqrt, tuned = decisions["none"], decisions["sqrt"], decisions["tuned"]
  assert none["throughput_ratio"] == pytest.approx(2.0)
  assert none["samples_ratio"] == pytest.approx(32 / 24) and none["censored"]
  assert none["verdict"] == "unresolved" and "censored" in none["why"]
  # One seed: the point estimate 0.5 / 2 = 0.25, but no interval and so no verdict.
  assert sqrt["samples_ratio"] == pytest.approx(0.5) and sqrt["samples_ratio_ci"] is None
  assert sqrt["predicted_time_ratio"] == pytest.approx(0.25) and sqrt["time_ratio_ci"] is None
  assert sqrt["verdict"] == "unresolved" and sqrt["why"].startswith("1 paired seed")
  assert tuned["samples_ratio"] == pytest.approx(0.5)  # the best LR at B = 16 is sqrt's
  # The sweep ran neither alone nor validated: every validation entry says so.
  assert all(v["source"] == "not run" and v["measured_time_ratio"] is None
             for v in report["validation"])
  # Run clocks: 2 s per step at both batches -> the step cost line t(B) = 2 s + 0 s x B.
  assert report["step_cost_fit"]["intercept"] == pytest.approx(2.0)
  assert report["generation_throughput_ratio"] == pytest.approx((16 / 0.5) / (8 / 1.0))
  assert report["phase_shares"]["8"]["generation"] == pytest.approx(0.5)


def test_grid_run_keeps_its_named_rule_and_multiplier(sweep_dir):
  # B = 4 (half the reference batch 8). "d": sqrt rule with lr0 x 1/sqrt(2), so its learning rate
  # lr0 / sqrt(2) x sqrt(4 / 8) = lr0 / 2 equals what linear gives at B = 4: still a sqrt grid run
  # (multiplier 1/sqrt(2)), in no rule's group. "e": linear's own run at B = 4 (lr0 / 2 too).
  write_run(sweep_dir, "d", prompts=2, lr_scaling="sqrt", seed=0, learning_rate=LR0 / 2 ** 0.5,
            evals={0: 0.2, 16: 0.5, 32: 0.6}, step_seconds=(1.0, 0.0, 1.0))
  write_run(sweep_dir, "e", prompts=2, lr_scaling="linear", seed=0,
            evals={0: 0.2, 16: 0.3, 32: 0.6}, step_seconds=(1.0, 0.0, 1.0))
  report = report_lib.build_report(sweep_dir, target=0.5, window=1)
  runs = {r["name"]: r for r in report["runs"]}
  assert runs["d"]["learning_rate"] == pytest.approx(LR0 / 2)
  assert runs["d"]["lr_rule"] == "sqrt" and runs["d"]["rules"] == []
  assert runs["d"]["lr_multiplier"] == pytest.approx(2 ** -0.5)
  assert runs["e"]["lr_rule"] == "linear" and runs["e"]["rules"] == ["linear"]
  assert runs["e"]["lr_multiplier"] == pytest.approx(1.0)
  assert runs["c"]["lr_multiplier"] == pytest.approx(1.0)  # sqrt's own run at B = 16
  groups = {(g["rule"], g["batch_size"]): g["runs"] for g in report["groups"]}
  assert groups[("linear", 4)] == ["e"] and groups[("sqrt", 8)] == ["a"]
  assert ("sqrt", 4) not in groups  # d is a grid run: sqrt has no own run at B = 4
  # "tuned" compares learning rates, whichever rule named them: d and e share lr0 / 2 and seed 0
  # (duplicates a sweep would have merged): the first is kept.
  assert groups[("tuned", 4)] == ["d"]
  csv_path = report_writer.write_report(report, sweep_dir)["md"].replace("report.md", "runs.csv")
  with open(csv_path) as f:
    header, *lines = f.read().splitlines()
  row = dict(zip(header.split(","), next(line for line in lines if line.startswith("d,")).split(",")))
  assert row["lr_rule"] == "sqrt" and float(row["lr_multiplier"]) == pytest.approx(2 ** -0.5)


def test_profile_throughput_replaces_run_clocks(sweep_dir):
  profile = {"batches": [
      {"batch_size": b, "responses_per_s": b / t,
       "seconds": {p: {"median": t / 3, "iqr": [t / 3, t / 3]} for p in ("generation", "reward", "training")}
       | {"step": {"median": t, "iqr": [t, t]}}} for b, t in ((8, 1.0), (16, 4.0))]}
  report = report_lib.build_report(sweep_dir, profile=profile, target=0.5, window=1)
  runs = {r["name"]: r for r in report["runs"]}
  assert report["throughput_source"] == "profile"
  assert runs["a"]["throughput_responses_per_s"] == pytest.approx(8.0)
  assert runs["c"]["time_to_target_s"] == pytest.approx(12 / 4.0)
  sqrt = next(d for d in report["decisions"] if d["lr_rule"] == "sqrt")
  assert sqrt["throughput_ratio"] == pytest.approx(0.5)
  assert sqrt["predicted_time_ratio"] == pytest.approx(1.0)  # N* ratio 0.5 over q ratio 0.5


def test_default_target_lies_above_every_warm_start(sweep_dir):
  report = report_lib.build_report(sweep_dir, window=1)
  # Highest warm start 0.2; best values 0.6, 0.4, 0.6 -> median 0.6 -> halfway 0.4.
  assert report["target"]["value"] == pytest.approx(0.4)
  assert report["target"]["chosen"].startswith("proposed after the runs, not pre-registered")


def test_written_files(sweep_dir):
  report = report_lib.build_report(sweep_dir, target=0.5, window=1)
  paths = report_writer.write_report(report, sweep_dir)
  assert len(paths["figures"]) >= 5 and all(os.path.exists(p) for p in paths["figures"])
  with open(paths["json"]) as f:
    saved = json.load(f)
  assert {k: saved["target"][k] for k in ("metric", "value", "chosen", "smoothing_window")} == {
      "metric": "eval/greedy_accuracy", "value": 0.5,
      "chosen": "given on the command line (--target)", "smoothing_window": 1}
  for name in ("runs.csv", "decisions.csv", "validation.csv", "groups.csv", "invariance.csv",
               "report.md"):
    assert os.path.exists(os.path.join(sweep_dir, name))
  assert not saved["gns"]["available"]
  assert "B_simple" in open(paths["md"]).read()


def test_target_never_reached_is_a_lower_bound_not_a_time(sweep_dir, tmp_path):
  # Best values 0.6, 0.4, 0.6: no run reaches 0.9, so every run is censored at its budget (32).
  report = report_lib.build_report(sweep_dir, target=0.9, window=1)
  assert all(r["censored"] and r["samples_to_target"] is None and r["time_to_target_s"] is None
             and r["samples_lower_bound"] == 32 for r in report["runs"])
  assert report["groups"] and all(g["censored"] and g["samples_to_target_mean"] == 32
                                  for g in report["groups"])
  paths = report_writer.write_report(report, sweep_dir, str(tmp_path / "out"))
  md = open(paths["md"]).read()
  table = md.split("## Samples- and time-to-target per group")[1].split("##")[0]
  rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| none")]
  # B = 8 (run a): N* >= 32 responses at q = 4 responses/s -> T >= 8 s; one seed: no interval.
  row = next(r for r in rows if r[1] == "8")
  assert row[4] == ">= 32 -" and row[6] == ">= 8"
  with open(os.path.join(tmp_path / "out", "groups.csv")) as f:
    header, *lines = f.read().splitlines()
  assert "censored" in header.split(",") and len(lines) == len(report["groups"])


def test_figure_4_draws_censored_groups_as_lower_bounds_without_lines(sweep_dir, tmp_path,
                                                                      monkeypatch):
  # Target 0.9: every group is censored, so no line may join its points (a trend through lower
  # bounds); each is an open marker with an upward arrow, named in the legend.
  report = report_lib.build_report(sweep_dir, target=0.9, window=1)
  saved = {}
  monkeypatch.setattr(figures, "_save", lambda fig, out_dir, name: saved.setdefault(name, fig))
  figures.target_figure(report, str(tmp_path))
  samples_axis = saved["fig4_target_vs_batch.png"].axes[0]
  points = [line for line in samples_axis.get_lines() if line.get_marker() == "o"]
  assert points and all(line.get_linestyle() == "None" for line in points)
  assert all(line.get_markerfacecolor() == "none" for line in points)
  labels = [t.get_text() for t in samples_axis.get_legend().get_texts()]
  assert labels and all("lower bound" in label for label in labels)


def test_step_cost_fit_with_two_batch_sizes_is_not_reported_as_a_fit(sweep_dir):
  report = report_lib.build_report(sweep_dir, target=0.5, window=1)
  assert report["step_cost_fit"]["n_points"] == 2
  assert "Step cost fit: t(B) = too few batch sizes to fit (n=2)." in report_writer.markdown(
      report, [])


def test_runs_without_an_rl_step_are_left_out(sweep_dir, tmp_path):
  # "d" holds only its warm-start evaluation (0.2 at 0 responses): counted, its lower bound (0)
  # would pull the B = 16 none group's N* from 32 down to 16.
  path = write_run(sweep_dir, "d", prompts=8, lr_scaling="none", seed=1, evals={0: 0.2},
                   step_seconds=(0.5, 0.5, 1.0), budget=0)
  report = report_lib.build_report(sweep_dir, target=0.5, window=1)
  assert report["runs_not_started"] == ["d"] and "d" not in {r["name"] for r in report["runs"]}
  group = next(g for g in report["groups"] if (g["rule"], g["batch_size"]) == ("none", 16))
  assert group["runs"] == ["b"] and group["samples_to_target_mean"] == 32
  md = report_writer.markdown(report, [])
  assert "Left out, no RL step taken yet: d." in md
  only = tmp_path / "only_warm_start"
  os.makedirs(only / "runs")
  os.rename(path, only / "runs" / "d")
  with pytest.raises(ValueError, match="no run has taken an RL step yet: the 1 runs"):
    report_lib.build_report(str(only))


def test_noise_scale_from_logged_parts(tmp_path):
  # |G|^2 = 4, tr(Sigma) = 64 -> |g|^2 = 12 at B_small = 8 (a microbatch), 6 at B_big = 32.
  parts = {"train/gns_grad_sq_small": 12.0, "train/gns_grad_sq_big": 6.0,
           "train/gns_batch_small": 8.0, "train/gns_batch_big": 32.0}
  write_run(str(tmp_path), "a", prompts=16, group=2, lr_scaling="none", seed=0, budget=128,
            evals={0: 0.1, 64: 0.2, 128: 0.3}, step_seconds=(1.0, 0.0, 1.0), extra=parts)
  gns = report_lib.build_report(str(tmp_path), target=0.25, window=1)["gns"]
  # 4 steps at B = 32: each half pools 2 steps, sum tr(Sigma) / sum |G|^2 = 128 / 8 = 16.
  assert gns["available"] and gns["unit"] == "responses"
  for half in ("first_half", "second_half"):
    assert gns["pooled"][half] == {"b_simple": pytest.approx(16.0), "ci": [pytest.approx(16.0)] * 2,
                                   "steps": 2}
  assert gns["per_run"]["a"]["intervals"] == [{"samples": 64, "b_simple": pytest.approx(16.0)},
                                              {"samples": 128, "b_simple": pytest.approx(16.0)}]


def _figures_drawn(monkeypatch):
  """{file name: matplotlib Figure} of every figure write_report saves."""
  drawn = {}
  real_save = figures._save
  def save(fig, out_dir, name):
    drawn[name] = fig
    return real_save(fig, out_dir, name)
  monkeypatch.setattr(figures, "_save", save)
  return drawn


def test_runs_before_the_microbatch_gns_metrics_are_said_in_words(tmp_path, monkeypatch):
  # As the committed batch_lr runs: only the older per-device norms, equal batches on one device.
  parts = {"train/grad_sq_norm_local": 6.0, "train/grad_sq_norm_global": 6.0,
           "train/gns_batch_local": 32.0, "train/gns_batch_global": 32.0}
  write_run(str(tmp_path), "a", prompts=16, group=2, lr_scaling="none", seed=0, budget=64,
            evals={0: 0.1, 64: 0.3}, step_seconds=(1.0, 0.0, 1.0), extra=parts)
  report = report_lib.build_report(str(tmp_path), target=0.25, window=1)
  gns = report["gns"]
  assert not gns["available"]
  assert gns["note"].startswith("no run logged GNS metrics (train/gns_grad_sq_small, ")
  assert "the runs predate them" in gns["note"] and "rl.microbatches >= 2" in gns["note"]
  drawn = _figures_drawn(monkeypatch)
  paths = report_writer.write_report(report, str(tmp_path))
  assert f"B_simple not estimated: {gns['note']}." in open(paths["md"]).read()
  fig5 = drawn["fig5_noise_scale.png"]
  assert fig5.axes == []  # words only, no empty axis
  assert any("the runs predate them" in t.get_text().replace("\n", " ") for t in fig5.texts)


def test_noise_scale_logged_at_one_batch_size(tmp_path):
  # Microbatch metrics with rl.microbatches = 1: B_small = B_big = 32, no estimate.
  parts = {"train/gns_grad_sq_small": 6.0, "train/gns_grad_sq_big": 6.0,
           "train/gns_batch_small": 32.0, "train/gns_batch_big": 32.0}
  write_run(str(tmp_path), "a", prompts=16, group=2, lr_scaling="none", seed=0, budget=64,
            evals={0: 0.1, 64: 0.3}, step_seconds=(1.0, 0.0, 1.0), extra=parts)
  gns = report_lib.build_report(str(tmp_path), target=0.25, window=1)["gns"]
  assert not gns["available"]
  assert gns["note"].startswith("the runs logged the GNS metrics at one batch size only "
                                "(B_small = B_big = 32 responses")


def test_errors_name_the_problem(tmp_path, sweep_dir):
  with pytest.raises(FileNotFoundError, match="no run directories"):
    report_lib.build_report(str(tmp_path / "empty"))
  with pytest.raises(ValueError, match="eval/nothing.*eval/greedy_accuracy"):
    report_lib.build_report(sweep_dir, metric="eval/nothing")


def test_cli_names_a_file_given_as_the_sweep_directory(tmp_path):
  path = tmp_path / "a_file"
  path.write_text("")
  out = subprocess.run([sys.executable, "-m", "rlscale.report", str(path)], capture_output=True,
                       text=True, timeout=hang_timeout(60))
  assert out.returncode == 2
  assert out.stderr == (f"error: sweep directory {str(path)!r} is a file; pass the sweep's "
                        "--workdir\n")


def test_a_report_failing_halfway_keeps_the_previous_one_whole(sweep_dir, tmp_path, monkeypatch):
  report = report_lib.build_report(sweep_dir, target=0.5, window=1)
  paths = report_writer.write_report(report, sweep_dir)
  before = {name: open(os.path.join(sweep_dir, name), "rb").read()
            for name in os.listdir(sweep_dir) if os.path.isfile(os.path.join(sweep_dir, name))}
  all_figures = report_writer.figures.all_figures

  def second_figure_fails(report, runs, out_dir):
    made = all_figures(report, runs, out_dir)
    raise RuntimeError(f"figure {os.path.basename(made[1])} failed")
  monkeypatch.setattr(report_writer.figures, "all_figures", second_figure_fails)
  changed = report_lib.build_report(sweep_dir, target=0.4, window=1)
  with pytest.raises(RuntimeError, match="failed"):
    report_writer.write_report(changed, sweep_dir)
  after = {name: open(os.path.join(sweep_dir, name), "rb").read()
           for name in os.listdir(sweep_dir) if os.path.isfile(os.path.join(sweep_dir, name))}
  assert after == before  # no new figure next to the old report.md, no staging folder
  assert sorted(os.listdir(sweep_dir)) == sorted(list(before) + ["runs"])
  with pytest.raises(RuntimeError):
    report_writer.write_report(changed, sweep_dir, str(tmp_path / "new_out"))
  assert not (tmp_path / "new_out").exists()
  assert os.path.basename(paths["md"]) in before


def test_minibatched_sweep_compares_curves_to_the_reference_batch_per_step(tmp_path):
  # PPO-style: 2 minibatches, the LR rule's reference 4 responses per update = B0 8 per step.
  root = str(tmp_path)
  evals = {0: 0.2, 16: 0.4, 32: 0.6}
  for name, prompts, rule in (("b4", 2, "none"), ("b8", 4, "none"), ("b16", 8, "none")):
    write_run(root, name, prompts=prompts, lr_scaling=rule, seed=0, evals=evals,
              step_seconds=(1.0, 0.0, 1.0), reference_batch=4, minibatches=2)
  report = report_lib.build_report(root, target=0.5, window=1)
  assert report["reference_batch"] == 4 and report["reference_batch_size"] == 8
  none = report["invariance"]["none"]
  assert none["reference_batch"] == 8 and none["scores"] == {"4": 0.0, "16": 0.0}
  assert {r["name"]: r["rules"] for r in report["runs"]}["b8"] == ["none", "sqrt", "sqrt_adam",
                                                                   "linear"]
  assert "8 responses per step (4 per optimizer update" in report_writer.markdown(report, [])


def _set_warm_start(path, *, sft_seed, eval_size):
  """Marks the run at `path` as started from warm start `sft_seed`, evaluated on `eval_size`."""
  with open(os.path.join(path, "config.json")) as f:
    config = json.load(f)
  config["config"]["sft"] = {"seed": sft_seed}
  config["config"]["task"] = {"eval_size": eval_size}
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(config, f)


def _three_seed_sweep(root, *, runs_dir="runs", eval_size=256, seconds=(1.0, 0.0, 1.0)):
  """B = 8 (reference) and B = 16 under `none`, 3 seeds on one warm start (sft.seed 0), budget
  64: the B = 16 runs reach the target with fewer responses (paired ratios 0.5, 0.5, 0.25)."""
  # Evaluations every 16 responses; target 0.5 crossed (window 1) where each curve hits 0.5.
  base = {0: {0: 0.2, 16: 0.3, 32: 0.5, 48: 0.6, 64: 0.6},   # N* 32
          1: {0: 0.2, 16: 0.3, 32: 0.4, 48: 0.5, 64: 0.6},   # N* 48
          2: {0: 0.2, 16: 0.3, 32: 0.4, 48: 0.4, 64: 0.5}}   # N* 64
  cand = {0: {0: 0.2, 16: 0.5, 32: 0.6, 48: 0.6, 64: 0.6},   # N* 16 -> 0.5
          1: {0: 0.2, 16: 0.4, 32: 0.6, 48: 0.6, 64: 0.6},   # N* 24 -> 0.5
          2: {0: 0.2, 16: 0.5, 32: 0.6, 48: 0.6, 64: 0.6}}   # N* 16 -> 0.25
  for seed in range(3):
    for name, prompts, evals in (("b8", 4, base[seed]), ("b16", 8, cand[seed])):
      path = write_run(os.path.join(root, runs_dir, "..") if runs_dir != "runs" else root,
                       f"{name},seed={seed}", prompts=prompts, lr_scaling="none", seed=seed,
                       evals=evals, step_seconds=seconds, budget=64,
                       extra={"response/length_mean": 3.0})
      _set_warm_start(path, sft_seed=0, eval_size=eval_size)


def test_three_seeds_give_paired_intervals_and_verdicts(tmp_path):
  root = str(tmp_path)
  _three_seed_sweep(root)  # 2 s per step at both batches: q ratio 2 on the runs' clocks
  report = report_lib.build_report(root, target=0.5, window=1, allow_weak_target=True)
  d = next(d for d in report["decisions"] if d["lr_rule"] == "none")
  # Paired N* ratios 0.5, 0.5, 0.25: logs -ln2, -ln2, -2 ln2; mean -(4/3) ln2, sd ln2 / sqrt(3).
  mean, half = -4 / 3 * math.log(2), 4.302652729911275 * math.log(2) / 3
  assert d["n_seeds"] == 3 and d["samples_ratio"] == pytest.approx(math.exp(mean))
  assert d["samples_ratio_ci"] == pytest.approx([math.exp(mean - half), math.exp(mean + half)])
  # Time ratio = N* ratio / 2: interval [0.079, 0.546] / 2 lies below 1 -> faster.
  assert d["time_ratio_ci"] == pytest.approx([math.exp(mean - half) / 2, math.exp(mean + half) / 2])
  assert d["verdict"] == "faster" and d["why"] is None
  # Power: sd of the paired log ratios ln2 x sd([1, 1, 2]) = ln2 / sqrt(3).
  power = next(p for p in report["power"] if p["lr_rule"] == "none")
  assert power["n"] == 3 and power["sd_log_ratio"] == pytest.approx(math.log(2) / math.sqrt(3))
  assert power["seeds_for_15_percent"] == decision.seeds_needed(math.log(2) / math.sqrt(3),
                                                                math.log(1.15))
  # Three RL seeds on one warm start: the floor is the mean gap over the 3 pairs of seeds at the
  # reference batch, 0-sample point left out, over evaluations at 16, 32, 48, 64:
  # seeds 0-1: 0, .1, .1, 0 -> 0.05; 0-2: 0, .1, .2, .1 -> 0.1; 1-2: 0, 0, .1, .1 -> 0.05.
  floor = report["invariance"]["none"]["noise_floor"]
  assert floor == pytest.approx(0.2 / 3) and report["invariance"]["none"]["noise_floor_pairs"] == 3
  assert report["response_tokens"] == {"8": 3.0, "16": 3.0}


def _speed_up_clocks(root, prefix, factor):
  """Divides the phase clocks (wall/generation, wall/training) of the runs under root/runs whose
  name starts with `prefix` by `factor`."""
  for name in os.listdir(os.path.join(root, "runs")):
    if name.startswith(prefix):
      path = os.path.join(root, "runs", name, "metrics.jsonl")
      records = [json.loads(line) for line in open(path)]
      for r in records:
        for p in ("generation", "training"):
          r[f"wall/{p}"] = r[f"wall/{p}"] / factor
      with open(path, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))


def test_validation_runs_measure_the_time_ratio_on_their_own_clocks(tmp_path):
  root = str(tmp_path)
  _three_seed_sweep(root)
  # The validation runs: same curves, but the B = 16 runs take 8 s per step alone (4 x slower).
  _three_seed_sweep(os.path.join(root, "validation"), seconds=(4.0, 0.0, 4.0))
  _speed_up_clocks(os.path.join(root, "validation"), "b8", 4)  # the base keeps 2 s per step
  report = report_lib.build_report(root, target=0.5, window=1, allow_weak_target=True)
  v = next(v for v in report["validation"] if v["lr_rule"] == "none")
  # Measured T per seed: base N*/(8 responses per 2 s), candidate N*/(16 per 8 s) -> ratio
  # (N*_c / 2) / (N*_b / 4) = 2 x N* ratio: 1, 1, 0.5 -> geometric mean 2^(-1/3).
  assert v["source"].startswith("validation runs executed one at a time")
  assert v["measured_time_ratio"] == pytest.approx(2 ** (-1 / 3)) and v["n_seeds"] == 3
  assert v["measured_verdict"] == "unresolved"  # [0.24, 1.6] contains 1
  assert v["predicted_verdict"] == "faster"
  md = report_writer.markdown(report, [])
  assert "## Validation (measured time ratio on runs executed alone)" in md


def test_stated_target_is_used_and_a_weak_one_refused_in_one_line(tmp_path):
  root = str(tmp_path)
  _three_seed_sweep(root, eval_size=64)
  with open(os.path.join(root, "sweep.json"), "w") as f:
    json.dump({"target": {"metric": "eval/greedy_accuracy", "value": 0.5}, "parallel": 2,
               "arg": None}, f)
  # Warm start 0.2 on 64 prompts: SE sqrt(0.16 / 64) = 0.05; 0.5 is 6 SE above.
  report = report_lib.build_report(root, window=1)
  assert report["target"]["value"] == 0.5
  assert report["target"]["chosen"] == "pre-registered in the sweep file (get_target)"
  assert report["target"]["standard_errors_above_warm_start"] == pytest.approx(6.0)
  # 0.3 is 2 SE above: refused, one line, exit 2 from the command line.
  out = subprocess.run([sys.executable, "-m", "rlscale.report", root, "--target=0.3"],
                       capture_output=True, text=True, timeout=hang_timeout(60))
  assert out.returncode == 2 and out.stderr.count("\n") == 1
  assert out.stderr.startswith("error: target eval/greedy_accuracy >= 0.3 is 2.00 standard errors")
  allowed = report_lib.build_report(root, target=0.3, window=1, allow_weak_target=True)
  assert "**WEAK TARGET" in report_writer.markdown(allowed, [])


def test_smoke_report_carries_a_banner(sweep_dir):
  with open(os.path.join(sweep_dir, "sweep.json"), "w") as f:
    json.dump({"arg": "smoke"}, f)
  report = report_lib.build_report(sweep_dir, target=0.5, window=1)
  assert report["smoke"]
  assert report_writer.SMOKE_BANNER in report_writer.markdown(report, [])


def test_claims_never_state_a_direction_without_an_interval(sweep_dir):
  report = report_lib.build_report(sweep_dir, target=0.5, window=1)
  texts = [c for c in report["claims"] if c["topic"] in ("decision", "retuning", "invariance")]
  assert texts and all(not c["resolved"] for c in texts)
  assert any(c["text"].startswith("1 seed key(s): no interval") for c in report["claims"])


def _profile(device, seconds_by_batch):
  """A throughput profile measured on `device`: {B: seconds per step}, split evenly by phase."""
  return {"device": device, "backend": device.split(":")[0], "batches": [
      {"batch_size": b, "responses_per_s": b / t,
       "seconds": {p: {"median": t / 3, "iqr": [t / 3, t / 3]}
                   for p in ("generation", "reward", "training")} | {"step": {"median": t, "iqr": [t, t]}}}
      for b, t in seconds_by_batch.items()]}


def test_decisions_for_another_machine_from_its_profile(tmp_path):
  # N* on the sample axis does not depend on the hardware: 32 responses at B = 8 and 48 at B = 16
  # for each of 3 seeds (paired ratio 1.5 exactly). A CPU-like profile with equal q at both batches
  # predicts T ratio 1.5 (slower); a GPU-like one where B = 16 steps take 2/3 s against 1 s at
  # B = 8 (q ratio 3) predicts 0.5 (faster): same runs, other machine, other decision.
  root = str(tmp_path)
  for seed in range(3):
    for name, prompts, evals in (("b8", 4, {0: 0.2, 16: 0.3, 32: 0.5, 48: 0.6, 64: 0.6}),
                                 ("b16", 8, {0: 0.2, 16: 0.3, 32: 0.4, 48: 0.5, 64: 0.6})):
      write_run(root, f"{name},seed={seed}", prompts=prompts, lr_scaling="none", seed=seed,
                evals=evals, step_seconds=(1.0, 0.0, 1.0), budget=64)
  kwargs = dict(target=0.5, window=1, allow_weak_target=True)
  cpu = report_lib.build_report(root, profile=_profile("cpu:0", {8: 1.0, 16: 2.0}), **kwargs)
  gpu = report_lib.build_report(root, profile=_profile("cuda:0", {8: 1.0, 16: 2 / 3}), **kwargs)
  d_cpu, d_gpu = (next(d for d in r["decisions"] if d["lr_rule"] == "none") for r in (cpu, gpu))
  assert d_cpu["samples_ratio"] == pytest.approx(1.5) == d_gpu["samples_ratio"]
  assert d_cpu["predicted_time_ratio"] == pytest.approx(1.5) and d_cpu["verdict"] == "slower"
  assert d_gpu["predicted_time_ratio"] == pytest.approx(0.5) and d_gpu["verdict"] == "faster"
  assert gpu["throughput_device"] == "cuda:0"
  assert "Decisions for the machine of the throughput profile: cuda:0" in report_writer.markdown(
      gpu, [])
  # From the command line: the committed N* with another machine's profile, written elsewhere.
  with open(tmp_path / "gpu_profile.json", "w") as f:
    json.dump(_profile("cuda:0", {8: 1.0, 16: 2 / 3}), f)
  out = subprocess.run([sys.executable, "-m", "rlscale.report", root, "--target=0.5", "--smooth=1",
                        "--allow_weak_target", f"--throughput={tmp_path / 'gpu_profile.json'}",
                        f"--out={tmp_path / 'gpu'}"], capture_output=True, text=True,
                       timeout=hang_timeout(120))
  assert out.returncode == 0, out.stderr
  with open(tmp_path / "gpu" / "report.json") as f:
    saved = json.load(f)
  assert saved["throughput_device"] == "cuda:0"
  assert next(d for d in saved["decisions"] if d["lr_rule"] == "none")["verdict"] == "faster"
  assert "(decisions for cuda:0)" in out.stdout


def test_validation_claim_counts_only_resolved_measurements(tmp_path):
  # Validation runs at 8 s per step at both batches: measured T ratio = N* ratio / 2 per seed
  # (0.25, 0.25, 0.125), interval below 1: faster, as predicted, for none and tuned (2 decisions).
  root = str(tmp_path)
  _three_seed_sweep(root)
  _three_seed_sweep(os.path.join(root, "validation"), seconds=(4.0, 0.0, 4.0))
  report = report_lib.build_report(root, target=0.5, window=1, allow_weak_target=True)
  claim = next(c for c in report["claims"] if c["topic"] == "validation")
  assert "2 of 2 decisions resolved on the runs' own clocks, 2 of them as predicted" in claim["text"]
  assert claim["resolved"] is True
  # With the base's clock 4x faster (test above), the measured interval contains 1: 0 resolved.
  _speed_up_clocks(os.path.join(root, "validation"), "b8", 4)
  report = report_lib.build_report(root, target=0.5, window=1, allow_weak_target=True)
  claim = next(c for c in report["claims"] if c["topic"] == "validation")
  assert "0 of 2 decisions resolved" in claim["text"] and claim["resolved"] is False


def test_validation_counts_censoring_on_paired_seed_keys_only(tmp_path):
  # As above (8 s per step at both batches: faster), plus a base run on a second warm start that
  # never reaches the target, alone and in the sweep; the candidate has no twin of it, so it is
  # out of the ratio and does not make the measurement censored.
  root = str(tmp_path)
  _three_seed_sweep(root)
  _three_seed_sweep(os.path.join(root, "validation"), seconds=(4.0, 0.0, 4.0))
  for where, seconds in ((root, (1.0, 0.0, 1.0)), (os.path.join(root, "validation"), (4.0, 0.0, 4.0))):
    path = write_run(where, "b8w1,seed=0", prompts=4, lr_scaling="none", seed=0,
                     evals={0: 0.2, 16: 0.3, 32: 0.3, 48: 0.4, 64: 0.4}, step_seconds=seconds,
                     budget=64, extra={"response/length_mean": 3.0})
    _set_warm_start(path, sft_seed=1, eval_size=256)
  report = report_lib.build_report(root, target=0.5, window=1, allow_weak_target=True)
  v = next(v for v in report["validation"] if v["lr_rule"] == "none")
  # Per seed (N*_c / 2) / N*_b on the equal clocks: 0.25, 0.25, 0.125.
  assert v["n_seeds"] == 3 and v["measured_time_ratio"] == pytest.approx(2 ** (-7 / 3))
  assert v["measured_verdict"] == "faster"


def test_decisions_split_by_warm_start(tmp_path):
  root = str(tmp_path)
  _three_seed_sweep(root)
  # A second warm start (sft.seed 1), 3 seeds, on which B = 16 never reaches 0.5 (censored).
  for seed in range(3):
    for name, prompts, evals in (("b8w1", 4, {0: 0.2, 16: 0.3, 32: 0.5, 48: 0.6, 64: 0.6}),
                                 ("b16w1", 8, {0: 0.2, 16: 0.3, 32: 0.4, 48: 0.4, 64: 0.4})):
      path = write_run(root, f"{name},seed={seed}", prompts=prompts, lr_scaling="none",
                       seed=seed, evals=evals, step_seconds=(1.0, 0.0, 1.0), budget=64)
      _set_warm_start(path, sft_seed=1, eval_size=256)
  report = report_lib.build_report(root, target=0.5, window=1, allow_weak_target=True)
  pooled = next(d for d in report["decisions"] if d["lr_rule"] == "none")
  assert pooled["n_seeds"] == 6 and pooled["censored"] and pooled["verdict"] == "unresolved"
  split = report["decisions_by_warm_start"]
  first = next(d for d in split["0"] if d["lr_rule"] == "none")
  second = next(d for d in split["1"] if d["lr_rule"] == "none")
  # Warm start 0 alone is the three-seed sweep: ratios 0.5, 0.5, 0.25 at q ratio 2 -> faster.
  assert first["n_seeds"] == 3 and first["verdict"] == "faster"
  assert first["samples_ratio"] == pytest.approx(math.exp(-4 / 3 * math.log(2)))
  # Warm start 1: B = 16 is censored at its budget 64, ratio 64 / 32 = 2 as a lower bound.
  assert second["censored"] and second["verdict"] == "unresolved"
  assert second["samples_ratio"] == pytest.approx(2.0)
  texts = [c["text"] for c in report["claims"] if c["topic"] == "decision_by_warm_start"]
  assert any(t.startswith("Warm start 1 alone, none: B = 16 vs 8") and "unresolved" in t
             for t in texts)


def test_a_sweep_of_gzipped_logs_gives_the_same_report(tmp_path):
  import gzip
  import shutil
  plain, archived = str(tmp_path / "plain"), str(tmp_path / "archived")
  _three_seed_sweep(plain)
  shutil.copytree(plain, archived)
  for d in run_data.run_dirs(archived):
    with open(os.path.join(d, "metrics.jsonl"), "rb") as f, gzip.open(
        os.path.join(d, "metrics.jsonl.gz"), "wb") as g:
      g.write(f.read())
    os.remove(os.path.join(d, "metrics.jsonl"))
  a = report_lib.build_report(plain, target=0.5, window=1, allow_weak_target=True)
  b = report_lib.build_report(archived, target=0.5, window=1, allow_weak_target=True)
  assert len(b["runs"]) == 6 and b["decisions"] == a["decisions"] and b["claims"] == a["claims"]
