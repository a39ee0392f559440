"""Writes a report dict (rlscale.scaling.report) as report.json, report.md, CSV tables and PNGs."""

from __future__ import annotations

import csv
import math
import os

from rlscale import outputs
from rlscale.scaling import figures, fits
from rlscale.scaling import run_data

RUN_COLUMNS = ("name", "prompts_per_step", "group_size", "batch_size", "lr_rule", "learning_rate",
               "lr_multiplier", "sft_seed", "seed", "samples_to_target", "samples_to_target_first",
               "censored", "samples_lower_bound",
               "throughput_responses_per_s", "time_to_target_s", "measured_time_to_target_s",
               "run_throughput_responses_per_s", "final_metric", "warm_start_metric",
               "wall_seconds")
DECISION_COLUMNS = ("lr_rule", "base", "candidate", "n_seeds", "throughput_ratio", "samples_ratio",
                    "predicted_time_ratio", "verdict", "censored")
VALIDATION_COLUMNS = ("lr_rule", "base", "candidate", "predicted_time_ratio", "measured_time_ratio",
                      "predicted_verdict", "measured_verdict", "n_seeds", "source")


def _reference(report) -> str:
  """The LR rule's reference batch in responses per step, with the update batch when they differ."""
  per_step = report.get("reference_batch_size", report["reference_batch"])
  if per_step == report["reference_batch"]:
    return str(per_step)
  return (f"{per_step} responses per step ({report['reference_batch']} per optimizer update, the "
          "unit of the LR rule)")


def _fit_text(fit, x="B"):
  """A cost line as text with its R^2, or why there is no usable fit (fits.cost_line_text)."""
  text = fits.cost_line_text(fit, x=x)
  return f"{text} (R^2 {fit['r2']:.3f})" if fits.fit_is_usable(fit) else text


def _write_csv(path, rows, columns):
  with open(path, "w", newline="", encoding="utf-8") as f:
    writer = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
    writer.writeheader()
    for row in rows:
      writer.writerow(row)


def _clean(value):
  """JSON-safe: non-finite floats -> None."""
  if isinstance(value, float) and not math.isfinite(value):
    return None
  if isinstance(value, dict):
    return {k: _clean(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_clean(v) for v in value]
  return value


def _fmt(x, digits=3):
  if x is None:
    return "-"
  if isinstance(x, bool):
    return "yes" if x else "no"
  if isinstance(x, float):
    return f"{x:.{digits}g}"
  return str(x)


def _lower_bound(x, censored: bool) -> str:
  """`x` formatted, as ">= x" when a censored run (budget reached before the target) went into
  it: the value is then a lower bound, never a measured samples- or time-to-target."""
  return (">= " if censored and x is not None else "") + _fmt(x)


def _ci(ci) -> str:
  """"[lo, hi]" (an infinite end, None in JSON, as inf), or "-" where there is no interval."""
  if not ci:
    return "-"
  return "[" + ", ".join("inf" if c is None else _fmt(c) for c in ci) + "]"


SMOKE_BANNER = ("> **Smoke sweep: this report checks the pipeline only.** Its runs are too short, "
                "too small and too few to answer anything; no number below is a result.")


def _header(report) -> list[str]:
  t = report["target"]
  z = t.get("standard_errors_above_warm_start")
  weak = ("**WEAK TARGET: fewer than 3 standard errors above the warm start, reported only "
          + ("because this is a smoke sweep.** " if report.get("smoke") else
             "because --allow_weak_target was given.** ") if t.get("weak") else "")
  measured = ("measured alone on the machine" if not report.get("throughput_estimate") else
              f"a {report['throughput_estimate']}")
  source = (measured + (f" ({report['throughput_device']})" if report.get("throughput_device")
                        else "")
            if report["throughput_source"] == "profile" else
            "the runs' own clocks; runs of a parallel sweep share cores")
  lines = [f"# Batch-size study: {report['sweep']}", ""]
  if report.get("smoke"):
    lines += [SMOKE_BANNER, ""]
  if report.get("throughput_device"):
    lines += [f"Decisions for the machine of the throughput profile: {report['throughput_device']}"
              " (N* comes from the runs, on the sample axis; q from the profile).", ""]
  lines += [f"{weak}Target: {t['metric']} >= {t['value']:g} ({t['chosen']}; "
            + (f"{z:.1f} binomial standard errors above the warm start {t['warm_start']:.3f} on "
               f"{t['eval_size']} prompts" if z is not None else "distance from the warm start unknown")
            + f"). N* is the sustained crossing of the {t['smoothing']} over "
            f"{t['smoothing_window']} evaluations (first crossing in runs.csv). Base learning rate "
            f"{report['base_learning_rate']:g} at reference batch {_reference(report)}. Seed keys "
            f"(warm-start seed, RL seed): {len(report['seeds'])}; intervals are paired t intervals "
            f"on log ratios, none below 3 seeds. Throughput from: {report['throughput_source']} "
            f"({source}).", ""]
  if report.get("runs_not_started"):
    lines += [f"Left out, no RL step taken yet: {', '.join(report['runs_not_started'])}.", ""]
  return lines


def _claims(report) -> list[str]:
  mark = {True: "resolved", False: "not resolved", None: "measured"}
  return ["## Conclusions (generated from the numbers below)", "",
          *[f"- [{mark[c['resolved']]}] {c['text']}" for c in report["claims"]], ""]


def _invariance(report) -> list[str]:
  inv = {k: v for k, v in report["invariance"].items() if k != "comparisons"}
  if not inv:
    return []
  all_b = sorted({int(b) for r in inv.values() for b in r["scores"]})
  lines = ["## Invariance (mean |gap| of the smoothed held-out curve to the reference batch's,"
           " same seed key, 0-sample point left out, averaged over seeds; 0 = identical)", "",
           "| rule | reference B | " + " | ".join(f"B={b}" for b in all_b)
           + " | mean | noise floor (RL seeds, same warm start) |",
           "|" + "---|" * (len(all_b) + 4)]
  for rule, entry in inv.items():
    cells = [_fmt(entry["scores"].get(str(b))) for b in all_b]
    floor = (_fmt(entry["noise_floor"]) if entry["noise_floor"] is not None
             else "- (no two RL seeds share a warm start)")
    lines.append(f"| {rule} | {entry['reference_batch']} | " + " | ".join(cells) +
                 f" | {_fmt(entry['mean_score'])} | {floor} |")
  for name, c in (report["invariance"].get("comparisons") or {}).items():
    lines += ["", f"{name.replace('_minus_', ' minus ')}: {c['difference']:+.4f} {_ci(c['ci'])} over "
              f"{c['n']} seed(s): **{'resolved' if c['resolved'] else 'not resolved'}**."]
  return lines + [""]


def _throughput(report) -> list[str]:
  ratio = report["generation_throughput_ratio"]
  lines = ["## Throughput", "",
           f"Generation throughput ratio, largest over smallest batch measured: **{_fmt(ratio)}x**.",
           "", "| B | responses/s | s/step generation | reward | training | share generation | "
           "reward | training | response tokens |", "|---|---|---|---|---|---|---|---|---|"]
  for b, row in report["throughput"].items():
    sh = report["phase_shares"][b]
    sec = row["seconds"]
    lines.append(f"| {b} | {_fmt(row['responses_per_s'])} | {_fmt(sec['generation'])} | "
                 f"{_fmt(sec['reward'])} | {_fmt(sec['training'])} | {_fmt(sh['generation'], 2)} | "
                 f"{_fmt(sh['reward'], 2)} | {_fmt(sh['training'], 2)} | "
                 f"{_fmt(report['response_tokens'].get(b))} |")
  if report["step_cost_fit"]:
    lines += ["", f"Step cost fit: t(B) = {_fit_text(report['step_cost_fit'])}."]
  pf = report.get("profile_fits") or {}
  if pf:
    g, t = pf["generation"], pf["training"]
    lines += ["", f"Profile fits: generation {_fit_text(g)} per step; training "
              f"{_fit_text(t, x='tokens trained')}."]
  return lines


def _decisions(report) -> list[str]:
  lines = ["", "## Decisions (each larger batch vs the smallest; predicted T ratio = N* ratio / q ratio)",
           "", "| rule | base | candidate | seeds | q ratio | N* ratio [95% CI] | predicted T ratio "
           "[95% CI] | verdict | why unresolved |", "|---|---|---|---|---|---|---|---|---|"]
  for d in report["decisions"]:
    lines.append(f"| {d['lr_rule']} | {d['base']} | {d['candidate']} | {d['n_seeds']} | "
                 f"{_fmt(d['throughput_ratio'])} | {_fmt(d['samples_ratio'])} "
                 f"{_ci(d['samples_ratio_ci'])} | {_fmt(d['predicted_time_ratio'])} "
                 f"{_ci(d['time_ratio_ci'])} | **{d['verdict']}** | {d.get('why') or ''} |")
  if report.get("power"):
    lines += ["", "## Power (from this study's own seeds)", "",
              "| rule | base | candidate | paired seeds | sd of log N* ratio | seeds for a 95% "
              "interval of +-15% |", "|---|---|---|---|---|---|"]
    for p in report["power"]:
      lines.append(f"| {p['lr_rule']} | {p['base']} | {p['candidate']} | {p['n']} | "
                   f"{_fmt(p['sd_log_ratio'])} | {p['seeds_for_15_percent']} |")
  lines += ["", "## Validation (measured time ratio on runs executed alone)", "",
            "| rule | base | candidate | predicted T ratio | measured T ratio [95% CI] | predicted "
            "| measured | seeds | clocks |", "|---|---|---|---|---|---|---|---|---|"]
  for v in report["validation"]:
    lines.append(f"| {v['lr_rule']} | {v['base']} | {v['candidate']} | "
                 f"{_fmt(v['predicted_time_ratio'])} {_ci(v['predicted_time_ratio_ci'])} | "
                 f"{_fmt(v['measured_time_ratio'])} {_ci(v['measured_time_ratio_ci'])} | "
                 f"{v['predicted_verdict']} | {v['measured_verdict'] or '-'} | {v['n_seeds']} | "
                 f"{v['source']} |")
  return lines


def _groups(report) -> list[str]:
  lines = ["", "## Samples- and time-to-target per group", "",
           "| rule | B | lr | seeds | N* mean [95% CI] | censored runs | T = N*/q (s) | "
           "bracketed (tuned) | LRs tried |", "|---|---|---|---|---|---|---|---|---|"]
  for g in report["groups"]:
    tried = g.get("learning_rates_tried")
    lines.append(f"| {g['rule']} | {g['batch_size']} | {g['learning_rate']:.3g} | {g['n_seeds']} | "
                 f"{_lower_bound(g['samples_to_target_mean'], g['censored'])} "
                 f"{_ci(g['samples_to_target_ci'])} | {g['censored_runs']} | "
                 f"{_lower_bound(g['time_to_target_s'], g['censored'])} | "
                 f"{_fmt(g['bracketed']) if g['bracketed'] is not None else ''}"
                 f"{' **not bracketed**' if g['bracketed'] is False else ''} | "
                 f"{', '.join(f'{x:.3g}' for x in tried) if tried else ''} |")
  lines += ["", "## Critical batch", ""]
  for rule, fit in report["scaling_fit"].items():
    if "note" in fit:
      lines.append(f"- {rule}: {fit['note']}.")
      continue
    lines.append(f"- {rule}: N*(B) = N_min (1 + B / B_noise), n = {fit['n']} batch sizes: N_min = "
                 f"{_fmt(fit.get('n_min'))}, B_noise = {_fmt(fit.get('b_noise'))} (R^2 "
                 f"{_fmt(fit.get('r2'))}, n = {fit['n']}); predicted time-optimal batch "
                 f"{_fmt(fit.get('predicted_time_optimal_batch'))}, measured best "
                 f"{_fmt(fit.get('measured_best_batch'))}"
                 + (f", B_simple (pooled, second half) {_fmt(fit.get('b_simple'))}"
                    if "b_simple" in fit else "")
                 + (f"; censored left out: {fit['censored_left_out']}"
                    if fit.get("censored_left_out") else "") + ".")
  gns = report["gns"]
  lines += ["", "## Gradient noise scale", ""]
  if gns["available"]:
    for phase, p in gns["pooled"].items():
      lines.append(f"- {phase.replace('_', ' ')}: B_simple {_fmt(p['b_simple'])} {gns['unit']} "
                   f"{_ci(p['ci'])} over {p['steps']} steps (pooled over runs; inf / - = "
                   "noise-dominated).")
  else:
    lines.append(f"B_simple not estimated: {gns['note']}.")
  return lines


def markdown(report, figure_paths) -> str:
  """report.md: what was measured and the answers, with intervals and verdicts."""
  lines = _header(report) + _claims(report) + _invariance(report) + _throughput(report)
  lines += _decisions(report) + _groups(report) + ["", "## Figures", ""]
  lines += [f"![{os.path.basename(p)}]({os.path.basename(p)})" for p in figure_paths]
  lines += ["", "## Runs", "", "| " + " | ".join(RUN_COLUMNS) + " |",
            "|" + "---|" * len(RUN_COLUMNS)]
  for r in report["runs"]:
    lines.append("| " + " | ".join(_fmt(r.get(c)) for c in RUN_COLUMNS) + " |")
  return "\n".join(lines) + "\n"


def write_report(report: dict, sweep_dir: str, out_dir: str | None = None) -> dict[str, str]:
  """Writes report.json, report.md, runs.csv, decisions.csv, groups.csv, invariance.csv and the
  figures into out_dir (default sweep_dir); returns {what: path}.

  All or nothing (`rlscale.outputs.staged_files`): the files are written into a temporary folder
  and moved into out_dir only when every one was written, so a failure (e.g. in a figure) leaves
  a previous report whole and a new out_dir absent."""
  out_dir = out_dir or sweep_dir
  runs = {os.path.basename(d): run_data.load_run(d) for d in run_data.run_dirs(sweep_dir)}
  with outputs.staged_files(out_dir) as staging:
    figure_names = [os.path.basename(p) for p in figures.all_figures(report, runs, staging)]
    outputs.write_json(os.path.join(staging, "report.json"),
                       _clean({**report, "figures": figure_names}), indent=2)
    with open(os.path.join(staging, "report.md"), "w", encoding="utf-8") as f:
      f.write(markdown(report, figure_names))
    _write_csv(os.path.join(staging, "runs.csv"), report["runs"], RUN_COLUMNS)
    _write_csv(os.path.join(staging, "decisions.csv"), report["decisions"], DECISION_COLUMNS)
    _write_csv(os.path.join(staging, "validation.csv"), report["validation"], VALIDATION_COLUMNS)
    _write_csv(os.path.join(staging, "groups.csv"), report["groups"],
               ("rule", "batch_size", "learning_rate", "n_seeds", "samples_to_target_mean",
                "censored_runs", "censored", "throughput_responses_per_s", "time_to_target_s",
                "final_metric_mean", "bracketed"))
    inv_rows = [{"rule": rule, "batch_size": b, "score": s, "reference_batch": e["reference_batch"]}
                for rule, e in report["invariance"].items() if rule != "comparisons"
                for b, s in e["scores"].items()]
    _write_csv(os.path.join(staging, "invariance.csv"), inv_rows,
               ("rule", "batch_size", "reference_batch", "score"))
  return {"json": os.path.join(out_dir, "report.json"), "md": os.path.join(out_dir, "report.md"),
          "figures": [os.path.join(out_dir, name) for name in figure_names]}
