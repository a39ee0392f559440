"""Writes a report dict (rlscale.scaling.report) as report.json, report.md, CSV tables and PNGs."""

from __future__ import annotations

import csv
import math
import os

from rlscale import outputs
from rlscale.scaling import figures, fits
from rlscale.scaling import report as report_lib

RUN_COLUMNS = ("name", "prompts_per_step", "group_size", "batch_size", "lr_rule", "learning_rate",
               "lr_multiplier", "seed", "samples_to_target", "censored", "samples_lower_bound",
               "throughput_responses_per_s", "time_to_target_s", "measured_time_to_target_s",
               "run_throughput_responses_per_s", "final_metric", "warm_start_metric",
               "wall_seconds")
DECISION_COLUMNS = ("lr_rule", "base", "candidate", "throughput_ratio", "samples_ratio",
                    "predicted_faster", "measured_faster", "predicted_time_ratio",
                    "measured_time_ratio", "censored")


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


def markdown(report, figure_paths) -> str:
  """report.md: what was measured and the answers, with numbers."""
  t = report["target"]
  lines = [f"# Batch-size study: {report['sweep']}", "",
           f"Target: {t['metric']} >= {t['value']:g} ({t['chosen']}; running mean over "
           f"{t['smoothing_window']} evaluations). Base learning rate {report['base_learning_rate']:g} "
           f"at reference batch {_reference(report)}. Throughput from: "
           f"{report['throughput_source']} ({'measured alone on the machine' if report['throughput_source'] == 'profile' else 'the runs own clocks; runs of a parallel sweep share cores'}).",
           ""]
  if report.get("runs_not_started"):
    lines += [f"Left out, no RL step taken yet: {', '.join(report['runs_not_started'])}.", ""]
  inv = report["invariance"]
  if inv:
    lines += ["## Invariance (mean |gap| of the smoothed held-out curve to the reference batch's,"
              " same seed, averaged over seeds; 0 = identical)", "",
              "| rule | reference B | " + " | ".join(
                  f"B={b}" for b in sorted({int(b) for r in inv.values() for b in r["scores"]}))
              + " | mean | seed-to-seed gap at reference |", ""]
    lines[-1] = lines[-1].rstrip()
    all_b = sorted({int(b) for r in inv.values() for b in r["scores"]})
    lines.pop()
    lines.append("|" + "---|" * (len(all_b) + 4))
    for rule, entry in inv.items():
      cells = [_fmt(entry["scores"].get(str(b))) for b in all_b]
      lines.append(f"| {rule} | {entry['reference_batch']} | " + " | ".join(cells) +
                   f" | {_fmt(entry['mean_score'])} | {_fmt(entry['noise_floor'])} |")
    if "none" in inv and "sqrt" in inv:
      n, s = inv["none"]["mean_score"], inv["sqrt"]["mean_score"]
      verdict = ("sqrt keeps the curves closer to the reference batch than none"
                 if s < n else "sqrt does NOT keep the curves closer than none")
      lines += ["", f"**{verdict}**: mean gap {s:.4f} (sqrt) vs {n:.4f} (none); seed-to-seed gap "
                f"at the reference batch {_fmt(inv['sqrt']['noise_floor'])}."]
    lines.append("")
  ratio = report["generation_throughput_ratio"]
  lines += ["## Throughput", "",
            f"Generation throughput ratio, largest over smallest batch: **{_fmt(ratio)}x**.", "",
            "| B | responses/s | s/step generation | reward | training | share generation | reward | training |",
            "|---|---|---|---|---|---|---|---|"]
  for b, row in report["throughput"].items():
    sh = report["phase_shares"][b]
    sec = row["seconds"]
    lines.append(f"| {b} | {_fmt(row['responses_per_s'])} | {_fmt(sec['generation'])} | "
                 f"{_fmt(sec['reward'])} | {_fmt(sec['training'])} | {_fmt(sh['generation'], 2)} | "
                 f"{_fmt(sh['reward'], 2)} | {_fmt(sh['training'], 2)} |")
  if report["step_cost_fit"]:
    f = report["step_cost_fit"]
    lines += ["", f"Step cost fit: t(B) = {_fit_text(f)}."]
  pf = report.get("profile_fits") or {}
  if pf:
    g, t = pf["generation"], pf["training"]
    until = g["bandwidth_bound_until_batch"]
    lines += ["", f"Profile fits: generation {_fit_text(g)} per step; the per-row cost equals the fixed cost at B = "
              f"{_fmt(until)}, {'so generation is bandwidth-bound below it' if until else 'no fixed-cost regime found'}"
              f". Training {_fit_text(t, x='tokens trained')}."]
  lines += ["", "## Decisions (each larger batch vs the smallest)", "",
            "| rule | base | candidate | q ratio | N* ratio [95% CI] | predicted faster | measured "
            "faster (runs' clocks) | censored |", "|---|---|---|---|---|---|---|---|"]
  for d in report["decisions"]:
    ci = d["samples_ratio_ci"]
    lines.append(f"| {d['lr_rule']} | {d['base']} | {d['candidate']} | {_fmt(d['throughput_ratio'])}"
                 f" | {_fmt(d['samples_ratio'])} [{_fmt(ci[0])}, {_fmt(ci[1])}] | "
                 f"{_fmt(d['predicted_faster'])} | {_fmt(d['measured_faster'])} | "
                 f"{_fmt(d['censored'])} |")
  groups = {(g["rule"], g["batch_size"]): g for g in report["groups"]}
  compare = []
  for (rule, b), g in sorted(groups.items()):
    if rule == "none" and ("sqrt", b) in groups and g["time_to_target_s"] is not None:
      s = groups[("sqrt", b)]
      if s["time_to_target_s"] is not None and s["runs"] != g["runs"]:
        slower = g["time_to_target_s"] > s["time_to_target_s"]
        compare.append(f"- B={b}: without LR retuning (none) T = "
                       f"{_lower_bound(g['time_to_target_s'], g['censored'])} s vs sqrt "
                       f"{_lower_bound(s['time_to_target_s'], s['censored'])} s: none is "
                       f"{'slower' if slower else 'not slower'}"
                       f"{' (a side is censored: lower bound)' if g['censored'] or s['censored'] else ''}.")
  if compare:
    lines += ["", "Larger batch without LR retuning vs sqrt:", "", *compare]
  lines += ["", "## Samples- and time-to-target per group", "",
            "| rule | B | lr | seeds | N* mean [95% CI] | censored runs | T = N*/q (s) | measured T (s) |",
            "|---|---|---|---|---|---|---|---|"]
  for g in report["groups"]:
    ci = g["samples_to_target_ci"]
    lines.append(f"| {g['rule']} | {g['batch_size']} | {g['learning_rate']:.3g} | {len(g['seeds'])} | "
                 f"{_lower_bound(g['samples_to_target_mean'], g['censored'])} "
                 f"[{_fmt(ci[0])}, {_fmt(ci[1])}] | {g['censored_runs']} | "
                 f"{_lower_bound(g['time_to_target_s'], g['censored'])} | "
                 f"{_lower_bound(g['measured_time_to_target_s'], g['censored'])} |")
  lines += ["", "## Critical batch", ""]
  for rule, fit in report["scaling_fit"].items():
    lines.append(f"- {rule}: N*(B) = N_min (1 + B / B_noise) with N_min = {_fmt(fit.get('n_min'))}, "
                 f"B_noise = {_fmt(fit.get('b_noise'))} (R^2 {_fmt(fit.get('r2'))}); predicted "
                 f"time-optimal batch {_fmt(fit.get('predicted_time_optimal_batch'))}, measured best "
                 f"{_fmt(fit.get('measured_best_batch'))}"
                 + (f", B_simple {_fmt(fit.get('b_simple'))}" if "b_simple" in fit else "") + ".")
  gns = report["gns"]
  lines += ["", "## Gradient noise scale", "",
            (f"B_simple (median over runs): {_fmt(gns['b_simple_median'])} responses, from "
             f"{gns['keys']}." if gns["available"] else f"B_simple not estimated: {gns['note']}."), "",
            "## Figures", ""]
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
  runs = {os.path.basename(d): report_lib.load_run(d) for d in report_lib.run_dirs(sweep_dir)}
  with outputs.staged_files(out_dir) as staging:
    figure_names = [os.path.basename(p) for p in figures.all_figures(report, runs, staging)]
    outputs.write_json(os.path.join(staging, "report.json"),
                       _clean({**report, "figures": figure_names}), indent=2)
    with open(os.path.join(staging, "report.md"), "w", encoding="utf-8") as f:
      f.write(markdown(report, figure_names))
    _write_csv(os.path.join(staging, "runs.csv"), report["runs"], RUN_COLUMNS)
    _write_csv(os.path.join(staging, "decisions.csv"), report["decisions"], DECISION_COLUMNS)
    _write_csv(os.path.join(staging, "groups.csv"), report["groups"],
               ("rule", "batch_size", "learning_rate", "samples_to_target_mean", "censored_runs",
                "censored",
                "throughput_responses_per_s", "time_to_target_s", "measured_time_to_target_s",
                "final_metric_mean"))
    inv_rows = [{"rule": rule, "batch_size": b, "score": s, "reference_batch": e["reference_batch"]}
                for rule, e in report["invariance"].items() for b, s in e["scores"].items()]
    _write_csv(os.path.join(staging, "invariance.csv"), inv_rows,
               ("rule", "batch_size", "reference_batch", "score"))
  return {"json": os.path.join(out_dir, "report.json"), "md": os.path.join(out_dir, "report.md"),
          "figures": [os.path.join(out_dir, name) for name in figure_names]}
