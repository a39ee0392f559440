"""A sweep directory -> the study's numbers: the report dict, assembled from the analyses.

`build_report(sweep_dir, ...)` reads whatever run directories exist under `<sweep_dir>/runs`
(metrics.jsonl, config.json, summary.json; a run still going counts with the evaluations it has,
one with no RL step yet is left out and named in report['runs_not_started']), the validation runs
under `<sweep_dir>/validation/runs` when they exist, and an optional throughput profile
(`rlscale.scaling.throughput`), and returns the report dict that
`rlscale.scaling.report_writer.write_report` saves as report.json, report.md, CSV tables and
figures.

Each step is a module of its own:
- reading the runs and sweep.json (`rlscale.scaling.run_data`);
- the target is the one the sweep file states, at least 3 binomial standard errors above the warm
  start (`rlscale.scaling.target`);
- q(B) from the profile or the runs' clocks (`rlscale.scaling.throughput_model`);
- a row per run and per group: samples-to-target is the sustained crossing of the centred running
  mean, the first crossing beside it (`rlscale.scaling.rows`, `rlscale.scaling.curves`);
- LR-rule groups and the tuned group per batch, with `bracketed` and leave-one-seed-out selection
  (`rlscale.scaling.groups`), the tuned LR's exponent in B (`rlscale.scaling.tuned_lr`);
- invariance of the sample-indexed curves across batches (`rlscale.scaling.curves`);
- ratios are paired over seed keys (the warm start's seed, the RL seed) with t intervals on log
  ratios, none below 3 seeds, every decision is "faster", "slower" or "unresolved", and the
  seeds a decision needs (`rlscale.scaling.decision`);
- predicted time ratios (profile q, sweep N*) are checked against measured ones from runs executed
  alone on the machine (`rlscale.scaling.validation`);
- N*(B) = N_min (1 + B / B_noise) and the time-optimal batch (`rlscale.scaling.fits`);
- the noise scale is pooled per training phase (`rlscale.scaling.noise_scale`);
- every conclusion is a sentence generated from these numbers, with its interval and whether it
  is resolved (`rlscale.scaling.claims`).
"""

from __future__ import annotations

import os
import statistics

import numpy as np

from rlscale.scaling import claims as claims_lib
from rlscale.scaling import curves as curves_lib
from rlscale.scaling import decision as decision_lib
from rlscale.scaling import fits
from rlscale.scaling import groups as groups_lib
from rlscale.scaling import noise_scale
from rlscale.scaling import rows as rows_lib
from rlscale.scaling import target as target_lib
from rlscale.scaling import throughput_model
from rlscale.scaling import tuned_lr
from rlscale.scaling import validation as validation_lib
from rlscale.scaling.groups import TUNED
from rlscale.scaling.run_data import load_run, load_sweep_meta, run_dirs

DEFAULT_METRIC = "eval/greedy_accuracy"


def _mode(values):
  return statistics.multimode(values)[0]


def build_report(sweep_dir: str, *, profile: dict | None = None, metric: str | None = None,
                 target: float | None = None, window: int = 3, name: str | None = None,
                 allow_weak_target: bool = False) -> dict:
  """The study's numbers for a sweep directory (see the module docstring and report.json keys).

  Args:
    sweep_dir: the sweep's --workdir (runs/, sweep.json, validation/runs/ when validated).
    profile: a throughput profile (rlscale.scaling.throughput), or None for the runs' clocks.
    metric, target: the target's metric and value; None = the sweep file's
      (target.resolve_target).
    window: centred running-mean window in evaluations.
    allow_weak_target: report a target less than 3 SE above the warm start (flagged).
  Raises FileNotFoundError for a directory without runs, ValueError for a metric no run logs or
  when no run has taken an RL step, target.WeakTargetError for a target inside the noise."""
  runs = [load_run(d) for d in run_dirs(sweep_dir)]
  meta = load_sweep_meta(sweep_dir)
  metric = metric or (meta.get("target") or {}).get("metric") or DEFAULT_METRIC
  logged = sorted({k for r in runs for rec in r.records for k in rec if k.startswith("eval/")})
  runs = [r for r in runs if r.curve(metric)[0].size]
  if not runs:
    raise ValueError(f"no run logs the target metric {metric!r}; the runs log {logged} "
                     "(--target_metric)")
  # A run that has taken no RL step yet holds only its warm-start evaluation: it says nothing on
  # N* (its lower bound would be 0 responses) nor on throughput, so it is listed, not counted.
  not_started = sorted(r.name for r in runs if r.samples_consumed == 0)
  runs = [r for r in runs if r.samples_consumed > 0]
  if not runs:
    raise ValueError(f"no run has taken an RL step yet: the {len(not_started)} runs under "
                     f"{sweep_dir!r} hold only their warm-start evaluation; report again later")
  tgt = target_lib.resolve_target(runs, meta, metric=metric, value=target, window=window)
  # A smoke sweep checks the pipeline; its report carries a banner saying so instead.
  allow_weak_target = allow_weak_target or meta.get("arg") == "smoke"
  tgt.update(target_lib.check_target_on_runs(tgt, runs, allow_weak_target),
             smoothing_window=window, smoothing="centred running mean (looks ahead: the curves are complete)")
  base_lr = meta.get("base_learning_rate") or _mode([r.get("optim.learning_rate") for r in runs])
  reference_batch = meta.get("reference_batch") or _mode([r.get("optim.reference_batch") for r in runs])
  memberships = rows_lib.rule_memberships(runs, base_lr, reference_batch)
  throughput = throughput_model.Throughput(profile, runs)
  row_args = dict(metric=tgt["metric"], target=tgt["value"], window=window, throughput=throughput,
                  base_lr=base_lr)
  run_rows = [rows_lib.run_row(run, rules=memberships[run.name], **row_args) for run in runs]
  per_run = {run.name: run for run in runs}

  groups = groups_lib.rule_groups(run_rows)
  grid = groups_lib.grid_rows(run_rows)
  tuned = groups_lib.tuned_groups(grid)
  for batch, group in tuned.items():
    groups[(TUNED, batch)] = group.rows
  # reference_batch counts responses per optimizer update (the LR rule's unit); the curves are
  # grouped by responses per step, minibatches x that (PPO's 2 minibatches: 128 -> B0 = 256).
  minibatches = _mode([run.batch_size // run.update_batch for run in runs])
  invariance = curves_lib.invariance(groups, per_run, tgt["metric"], window,
                                     reference_batch * minibatches)
  group_stats = rows_lib.group_stats(groups, tuned, throughput)
  decisions = decision_lib.decisions(groups, throughput)
  decisions_by_warm_start = decision_lib.decisions_by_warm_start(groups, throughput)
  validation = validation_lib.validation_rows(sweep_dir, meta, decisions, groups, memberships,
                                              row_args, runs)
  scaling_fit = fits.scaling_fit(group_stats, throughput)
  gns = noise_scale.gns_report(runs)
  if scaling_fit.get(TUNED):
    scaling_fit[TUNED]["b_simple"] = (gns.get("pooled") or {}).get("second_half", {}).get("b_simple")
  report = {
      "sweep": name or os.path.basename(os.path.abspath(sweep_dir)),
      "sweep_dir": os.path.abspath(sweep_dir),
      "smoke": meta.get("arg") == "smoke",
      "target": tgt,
      "base_learning_rate": base_lr, "reference_batch": reference_batch,
      "reference_batch_size": reference_batch * minibatches,
      "throughput_source": throughput.source, "throughput_device": throughput.device,
      "throughput_estimate": throughput.estimate,
      "seeds": sorted({tuple(r["seed_key"]) for r in run_rows}),
      "runs": run_rows,
      "runs_not_started": not_started,
      "groups": group_stats,
      "invariance": invariance,
      "decisions": decisions,
      "decisions_by_warm_start": decisions_by_warm_start,
      "validation": validation,
      "generation_throughput_ratio": throughput_model.generation_ratio(throughput),
      "throughput": {str(b): throughput.by_batch[b] for b in sorted(throughput.by_batch)},
      "phase_shares": throughput_model.phase_shares(throughput),
      "step_cost_fit": (throughput.step_line._asdict() if throughput.step_line else None),
      # The profile's own fits (generation a + b B and where b B = a, training vs tokens).
      "profile_fits": (profile or {}).get("fits"),
      "scaling_fit": scaling_fit,
      "tuned_lr_exponent": tuned_lr.lr_exponent(grid, reference_batch * minibatches),
      "gns": gns,
      "response_tokens": _response_tokens(run_rows),
  }
  report["power"] = decision_lib.power(groups, decisions)
  report["claims"] = claims_lib.claims(report)
  return report


def _response_tokens(run_rows) -> dict:
  """Mean response length in tokens per batch (over its runs' steps), from the data."""
  out = {}
  for batch in sorted({r["batch_size"] for r in run_rows}):
    lengths = [r["mean_response_tokens"] for r in run_rows
               if r["batch_size"] == batch and r["mean_response_tokens"] is not None]
    out[str(batch)] = float(np.mean(lengths)) if lengths else None
  return out
