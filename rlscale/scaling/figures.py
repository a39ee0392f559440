"""The study's figures (PNG), each titled with the sweep's name, axes with units.

1. held-out metric vs responses consumed, a line per batch, a panel per LR rule, seed bands;
2. the same vs the runs' own wall-clock seconds;
3. throughput vs batch by phase: measured points and the fitted cost model;
4. samples- and time-to-target vs batch with paired t intervals (from 3 seeds), and the decision
   rule (throughput ratio vs samples ratio) coloured by its three-valued verdict;
5. gradient noise scale B_simple over training, with the batch sizes tried;
6. each phase's share of RL time per batch.
"""

from __future__ import annotations

import os
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top
import numpy as np  # noqa: E402  pylint: disable=g-import-not-at-top

from rlscale.runner.timing import PHASES  # noqa: E402  pylint: disable=g-import-not-at-top
from rlscale.scaling import fits  # noqa: E402  pylint: disable=g-import-not-at-top
from rlscale.scaling import curves as curves_lib  # noqa: E402  pylint: disable=g-import-not-at-top



def _colors(batches):
  cmap = plt.get_cmap("viridis")
  return {b: cmap(i / max(len(batches) - 1, 1)) for i, b in enumerate(batches)}


def _rules(report):
  rules = [r for r in ("none", "sqrt", "sqrt_adam", "linear") if r in report["invariance"]]
  return rules or ["tuned"]


def _save(fig, out_dir, name):
  path = os.path.join(out_dir, name)
  fig.savefig(path, dpi=110, bbox_inches="tight")
  plt.close(fig)
  return path


def learning_curves(report, runs, out_dir, *, x="samples") -> str:
  """Figure 1 (x="samples") or 2 (x="wall/total"): smoothed held-out metric per batch, one panel
  per LR rule, the target as a dashed line. On the sample axis the seed mean with a min-max band
  (every run evaluates at the same counts); on the time axis one line per run (own clocks)."""
  metric, target, window = (report["target"]["metric"], report["target"]["value"],
                            report["target"]["smoothing_window"])
  rules = _rules(report)
  eval_size = report["target"].get("eval_size") if x == "samples" else None
  batches = sorted({r["batch_size"] for r in report["runs"]})
  colors = _colors(batches)
  groups = {(g["rule"], g["batch_size"]): g for g in report["groups"]}
  fig, axes = plt.subplots(1, len(rules), figsize=(5.5 * len(rules), 4.2), squeeze=False,
                           sharey=True)
  for ax, rule in zip(axes[0], rules):
    for batch in batches:
      group = groups.get((rule, batch))
      if not group:
        continue
      curves = []
      for name in group["runs"]:
        xs, ys = runs[name].curve(metric, x)
        curves.append((xs, curves_lib.centred_mean(ys, window)))
      label = f"B={batch} (lr {group['learning_rate']:.2g}, {len(curves)} seeds)"
      if x != "samples":  # each run has its own clock: one line per seed, no band
        for i, (xs, ys) in enumerate(curves):
          ax.plot(xs, ys, color=colors[batch], alpha=0.8, label=label if i == 0 else None)
        continue
      grid = curves_lib.common_grid(curves) if len(curves) > 1 else curves[0][0]
      if grid.size == 0:
        continue
      values = np.stack([np.interp(grid, c[0], c[1]) for c in curves])
      mean = values.mean(0)
      ax.plot(grid, mean, color=colors[batch], label=label)
      if len(curves) > 1:
        ax.fill_between(grid, values.min(0), values.max(0), color=colors[batch], alpha=0.2)
      if eval_size:  # the evaluation's own noise: one binomial SE of the smoothed seed mean
        se = np.sqrt(np.clip(mean * (1 - mean), 0, None) / eval_size / window / len(curves))
        ax.plot(grid, mean + se, color=colors[batch], ls=":", lw=0.7)
        ax.plot(grid, mean - se, color=colors[batch], ls=":", lw=0.7)
    ax.axhline(target, color="k", ls="--", lw=0.8, label=f"target {target:g}")
    ax.set_title(f"LR rule: {rule}")
    ax.set_xlabel("responses consumed" if x == "samples" else "wall-clock time of the run (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
  axes[0][0].set_ylabel(f"{metric} (centred mean over {window} evals)" + (
      "\nband: seed range; dotted: +-1 evaluation SE" if eval_size else ""))
  axis = "responses consumed" if x == "samples" else "wall-clock seconds"
  fig.suptitle(f"{report['sweep']}: held-out {metric} vs {axis}")
  return _save(fig, out_dir, "fig1_curves_vs_samples.png" if x == "samples"
               else "fig2_curves_vs_wall_time.png")


def throughput_figure(report, out_dir) -> str:
  """Figure 3: responses/s per phase and end to end vs batch, measured points and the fitted
  step-cost line (q = B / (a + b B))."""
  rows = report["throughput"]
  batches = np.asarray(sorted(int(b) for b in rows), np.float64)
  fig, ax = plt.subplots(figsize=(6.5, 4.5))
  for phase, marker in zip(PHASES + ("step",), "os^D"):
    rate = [b / rows[str(int(b))]["seconds"][phase] if rows[str(int(b))]["seconds"][phase] else np.nan
            for b in batches]
    label = "end to end" if phase == "step" else phase
    ax.plot(batches, rate, marker=marker, ls="-" if phase == "step" else ":", label=label)
  fit = report.get("step_cost_fit")
  if fit and fits.fit_is_usable(fit):
    grid = np.geomspace(batches.min(), batches.max() * 2, 50)
    ax.plot(grid, grid / (fit["intercept"] + fit["slope"] * grid), "k--", lw=0.8,
            label=f"fit: B / ({fits.cost_line_text(fit)})")
  ax.set_xscale("log", base=2)
  ax.set_yscale("log")
  ax.set_xlabel("batch B (responses per step)")
  ax.set_ylabel("throughput (responses / s)")
  ax.grid(alpha=0.3, which="both")
  ax.legend(fontsize=8)
  ax.set_title(f"{report['sweep']}: throughput vs batch ({report['throughput_source']})")
  return _save(fig, out_dir, "fig3_throughput.png")


def _bounded_points(ax, batches, values, errors, censored, rule, color):
  """One rule's points on `ax`: measured ones joined by a line with their intervals; censored
  ones (some seed never reached the target: the value is a lower bound) as open markers with an
  upward arrow and no connecting line, since a line through lower bounds reads as a trend.
  `color`: the rule's colour on every axis."""
  measured = [i for i, c in enumerate(censored) if not c]
  bounds = [i for i, c in enumerate(censored) if c]
  errors = np.asarray(errors, np.float64).reshape(2, -1)
  if measured:
    ax.errorbar([batches[i] for i in measured], [values[i] for i in measured],
                yerr=errors[:, measured], marker="o", capsize=3, color=color, label=rule)
  if bounds:
    low = np.asarray([values[i] for i in bounds], np.float64)
    ax.errorbar([batches[i] for i in bounds], low, yerr=0.3 * low, lolims=True, ls="none",
                marker="o", mfc="none", color=color,
                label=f"{rule}: censored, lower bound (>=)")


def target_figure(report, out_dir) -> str:
  """Figure 4: samples- and time-to-target vs batch per rule (95% t intervals over seeds from 3
  seeds; open markers with an upward arrow and no connecting line: some seed censored, a lower
  bound), and the decisions coloured by verdict (a decision with a censored side drawn apart, as an
  open marker: it is unresolved)."""
  fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
  rules = sorted({g["rule"] for g in report["groups"]})
  for k, rule in enumerate(rules):
    rows = sorted((g for g in report["groups"] if g["rule"] == rule), key=lambda g: g["batch_size"])
    b = [g["batch_size"] for g in rows]
    n = [g["samples_to_target_mean"] for g in rows]
    err = np.asarray([np.abs(np.asarray(g["samples_to_target_ci"]) - g["samples_to_target_mean"])
                      if g["samples_to_target_ci"] else [0, 0] for g in rows]).T
    t = [g["time_to_target_s"] if g["time_to_target_s"] is not None else np.nan for g in rows]
    terr = np.asarray([np.abs(np.asarray(g["time_to_target_ci"]) - g["time_to_target_s"])
                       if g["time_to_target_ci"] else [0, 0] for g in rows]).T
    for ax, values, errors in ((axes[0], n, err), (axes[1], t, terr)):
      _bounded_points(ax, b, values, errors, [g["censored"] for g in rows], rule, f"C{k}")
  for ax, label in ((axes[0], "samples-to-target N* (responses)"),
                    (axes[1], "time-to-target T = N*/q (s)")):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch B (responses per step)")
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, title="LR rule\n(open, arrow up: censored,\na lower bound)", title_fontsize=7, loc="best", framealpha=0.6)
  ax = axes[2]
  dec = [d for d in report["decisions"] if d["throughput_ratio"] and d["samples_ratio"]]
  # Marker = LR rule, colour = measured outcome; one label per candidate batch (its decisions share
  # the profile's throughput ratio, so they lie on one horizontal line), at its leftmost point.
  markers = dict(zip(sorted({d["lr_rule"] for d in dec}), "osD^v<>"))
  for rule, marker in markers.items():
    ax.scatter([], [], marker=marker, facecolor="none", edgecolor="k", label=rule)
  labels = {}
  for d in dec:
    color = {"faster": "tab:green", "slower": "tab:red", "unresolved": "tab:gray"}[d["verdict"]]
    ax.scatter(d["samples_ratio"], d["throughput_ratio"], s=40, marker=markers[d["lr_rule"]],
               alpha=0.8, **({"facecolor": "none", "edgecolor": color} if d["censored"]
                             else {"color": color}))
    key = (d["candidate"], d["base"])
    labels[key] = min(labels.get(key, (np.inf, 0)), (d["samples_ratio"], d["throughput_ratio"]))
  # Candidates' throughput ratios are often close: stagger the labels so none covers another.
  for i, ((candidate, base), (x, y)) in enumerate(sorted(labels.items(), key=lambda kv: kv[1][1])):
    ax.annotate(f"B={candidate} vs {base}", (x, y), fontsize=7, xytext=(-6, 6 + 10 * i),
                textcoords="offset points", ha="right",
                arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "0.5"})
  if markers:
    ax.legend(fontsize=7, title="LR rule", title_fontsize=7, loc="lower right", framealpha=0.6)
  if dec:
    hi = max(max(d["samples_ratio"], d["throughput_ratio"]) for d in dec) * 1.2
    ax.plot([0, hi], [0, hi], "k--", lw=0.8)
    ax.fill_between([0, hi], [0, hi], [hi, hi], color="tab:green", alpha=0.07)
  ax.set_xlabel("samples ratio N*(cand) / N*(base)")
  ax.set_ylabel("throughput ratio q(cand) / q(base)")
  ax.set_title("decision rule: above the diagonal = faster at the point estimate\n"
               "colour = verdict from the 95% interval (green faster, red slower, grey unresolved;\n"
               "open = a side censored)", fontsize=8)
  ax.grid(alpha=0.3)
  fig.suptitle(f"{report['sweep']}: samples- and time-to-target vs batch "
               f"(target {report['target']['metric']} = {report['target']['value']:g})", y=1.06)
  return _save(fig, out_dir, "fig4_target_vs_batch.png")


def gns_figure(report, out_dir) -> str:
  """Figure 5: B_simple per evaluation interval of each run, with the batch sizes tried. When no
  run gives B_simple, the figure says why in words (report["gns"]["note"]) and draws no axes."""
  gns = report["gns"]
  if not gns["available"]:
    fig = plt.figure(figsize=(6.5, 2.5))
    fig.text(0.5, 0.5, "B_simple not estimated: " + textwrap.fill(gns["note"], 80), ha="center",
             va="center", fontsize=9, wrap=True)
    fig.suptitle(f"{report['sweep']}: gradient noise scale B_simple")
    return _save(fig, out_dir, "fig5_noise_scale.png")
  fig, ax = plt.subplots(figsize=(6.5, 4.5))
  batches = sorted({r["batch_size"] for r in report["runs"]})
  colors = _colors(batches)
  for entry in gns["per_run"].values():
    pts = [(p["samples"], p["b_simple"]) for p in entry["intervals"] if p["b_simple"]]
    if pts:
      ax.plot(*zip(*pts), color=colors[entry["batch_size"]], alpha=0.6, lw=1)
  ax.set_yscale("log")
  for b in batches:
    ax.axhline(b, color=colors[b], ls="--", lw=0.8, label=f"B={b} tried")
  ax.set_xlabel("responses consumed")
  ax.set_ylabel("B_simple (responses)")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  ax.set_title(f"{report['sweep']}: gradient noise scale B_simple (EMA-smoothed)")
  return _save(fig, out_dir, "fig5_noise_scale.png")


def phase_share_figure(report, out_dir) -> str:
  """Figure 6: share of RL time per phase at each batch (stacked bars)."""
  shares = report["phase_shares"]
  batches = sorted(int(b) for b in shares)
  fig, ax = plt.subplots(figsize=(6.5, 4.2))
  bottom = np.zeros(len(batches))
  for phase in PHASES:
    vals = np.asarray([shares[str(b)][phase] or 0.0 for b in batches])
    ax.bar(np.arange(len(batches)), vals, bottom=bottom, label=phase)
    bottom += vals
  ax.set_xticks(np.arange(len(batches)), [str(b) for b in batches])
  ax.set_xlabel("batch B (responses per step)")
  ax.set_ylabel("share of RL time (fraction)")
  ax.set_ylim(0, 1)
  ax.legend(fontsize=8)
  ax.set_title(f"{report['sweep']}: RL time by phase ({report['throughput_source']})")
  return _save(fig, out_dir, "fig6_phase_shares.png")


def throughput_profile_figure(profile, out_dir) -> str:
  """throughput.png of a throughput profile: seconds per step by phase vs batch with the fitted
  lines (left), responses/s by phase and end to end (right); bars are interquartile ranges."""
  rows = sorted(profile["batches"], key=lambda r: r["batch_size"])
  b = np.asarray([r["batch_size"] for r in rows], np.float64)
  fit = profile.get("fits", {})
  fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
  for phase, marker in zip(PHASES + ("step",), "os^D"):
    med = np.asarray([r["seconds"][phase]["median"] for r in rows])
    iqr = np.asarray([r["seconds"][phase]["iqr"] for r in rows]).T
    label = "end to end" if phase == "step" else phase
    left.errorbar(b, med, yerr=np.abs(iqr - med), marker=marker, ls="none", capsize=3, label=label)
    if np.all(med > 0):  # a phase of 0 s (a cost-model estimate's reward) has no rate
      right.plot(b, b / med, marker=marker, label=label)
  grid = np.linspace(b.min(), b.max(), 50)
  if fit:
    g = fit["generation"]
    until = g["bandwidth_bound_until_batch"]
    left.plot(grid, g["intercept"] + g["slope"] * grid, "C0--", lw=0.8,
              label=f"generation fit {fits.cost_line_text(g, slope_format='.2g')}"
              + (f" (bandwidth-bound below B={until:.0f})"
                 if until and g.get("bandwidth_bound_within_measured") else ""))
    st = fit["step"]
    left.plot(grid, st["intercept"] + st["slope"] * grid, "C3--", lw=0.8,
              label=f"step fit {fits.cost_line_text(st, slope_format='.2g')}")
    right.plot(grid, grid / (st["intercept"] + st["slope"] * grid), "k--", lw=0.8,
               label="end-to-end fit B / (alpha + beta B)")
  left.set_xlabel("batch B (responses per step)")
  left.set_ylabel("seconds per RL step (median, IQR)")
  right.set_xlabel("batch B (responses per step)")
  right.set_ylabel("throughput (responses / s)")
  for ax in (left, right):
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
  right.set_yscale("log")
  # An estimate's device already says "cost-model estimate" (`rlscale.aot.profile`).
  how = ("roofline bound, no host or scheduling overheads, not a measurement"
         if profile.get("estimate") else "measured alone")
  fig.suptitle(f"{profile.get('name') or 'throughput'}: seconds per RL step and throughput vs batch "
               f"({profile.get('device', '')}, {how})")
  return _save(fig, out_dir, "throughput.png")


def all_figures(report, runs, out_dir) -> list[str]:
  """Writes every figure into out_dir; returns their paths."""
  return [learning_curves(report, runs, out_dir, x="samples"),
          learning_curves(report, runs, out_dir, x="wall/total"),
          throughput_figure(report, out_dir), target_figure(report, out_dir),
          gns_figure(report, out_dir), phase_share_figure(report, out_dir)]
