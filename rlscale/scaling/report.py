"""A sweep directory -> the study's numbers: samples-, time-to-target, invariance, decisions, GNS.

`build_report(sweep_dir, ...)` reads whatever run directories exist under `<sweep_dir>/runs`
(metrics.jsonl, config.json, summary.json; a run still going counts with the evaluations it has,
one with no RL step yet is left out and named in report['runs_not_started'])
and an optional throughput profile (`rlscale.scaling.throughput`), and returns the report dict
that `write_report` saves as report.json, report.md, CSV tables and figures.

Groups. A run is at batch B = P * G with effective learning rate lr(B). Its LR rule is the one
its config names (optim.lr_scaling, as the sweep override set it) and its LR multiplier is its
optim.learning_rate over the sweep's base learning rate lr0 (1 for a rule's own run, e.g. 0.5 or 2
for a run of an LR grid). A run belongs to the group of its rule when its multiplier is 1; the run
at the reference batch B0 with multiplier 1 belongs to every rule's group (every rule gives lr0
there). A grid run belongs to no rule's group, even when its learning rate happens to equal what
another rule gives (sqrt x 0.5 at B0/4 equals linear): it is never relabelled by its value.
"tuned" is, at each batch, the learning rate with the lowest mean samples-to-target among all runs
at that batch (the retuned LR of the study). Seeds are the repeats of a group.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import statistics
import types
from typing import Any, Sequence

import numpy as np

from rlscale.runner.metrics_log import read_metrics
from rlscale.scaling import curves as curves_lib
from rlscale.scaling import decision as decision_lib
from rlscale.scaling import fits
from rlscale.scaling import noise_scale
from rlscale.scaling.throughput import PHASES
from rlscale.train.optimizer import scaled_learning_rate

DEFAULT_METRIC = "eval/greedy_accuracy"
LR_RULES = ("none", "sqrt", "linear")
TUNED = "tuned"
# (|g_small|^2, |g_big|^2, B_small, B_big) metric keys logged by the update step, newest first:
# small = a microbatch on one device, a device's part on several (rlscale/train/update.py); the
# older per-device names carry no information on one device (B_small = B_big).
GNS_KEYS = (
    ("train/gns_grad_sq_small", "train/gns_grad_sq_big", "train/gns_batch_small",
     "train/gns_batch_big"),
    ("train/grad_sq_norm_local", "train/grad_sq_norm_global", "train/gns_batch_local",
     "train/gns_batch_global"),
)


@dataclasses.dataclass
class RunData:
  """One run directory, read."""
  name: str
  path: str
  config: dict
  records: list
  summary: dict | None

  def get(self, dotted: str, default=None):
    node = self.config
    for key in dotted.split("."):
      if not isinstance(node, dict) or key not in node:
        return default
      node = node[key]
    return node

  @property
  def prompts_per_step(self) -> int:
    return int(self.get("rl.prompts_per_step"))

  @property
  def group_size(self) -> int:
    return int(self.get("rl.group_size"))

  @property
  def batch_size(self) -> int:
    return self.prompts_per_step * self.group_size

  @property
  def update_batch(self) -> int:
    """Responses per optimizer update (the batch the LR rule scales with)."""
    return self.batch_size // int(self.get("rl.minibatches", 1) or 1)

  @property
  def seed(self) -> int:
    return int(self.get("seed", 0))

  @property
  def effective_lr(self) -> float:
    return scaled_learning_rate(_optim(self.get("optim.learning_rate"), self.get("optim.lr_scaling"),
                                       self.get("optim.reference_batch")), self.update_batch)

  def curve(self, metric: str, x_key: str = "samples") -> tuple[np.ndarray, np.ndarray]:
    """(x [n], metric [n]) over the records that hold the metric (evaluations)."""
    points = [(r[x_key], r[metric]) for r in self.records
              if r.get(metric) is not None and r.get(x_key) is not None]
    xs = np.asarray([p[0] for p in points], np.float64)
    ys = np.asarray([p[1] for p in points], np.float64)
    keep = np.concatenate([[True], np.diff(xs) > 0]) if xs.size else xs.astype(bool)
    return xs[keep], ys[keep]

  def rl_seconds_curve(self) -> tuple[np.ndarray, np.ndarray]:
    """(samples [n], RL seconds so far [n]): generation + reward + training from the run's own
    clock (evaluation excluded), one point per record."""
    pts = [(r["samples"], sum(r.get(f"wall/{p}", 0.0) or 0.0 for p in PHASES))
           for r in self.records if "samples" in r]
    return np.asarray([p[0] for p in pts], np.float64), np.asarray([p[1] for p in pts], np.float64)

  def phase_seconds(self) -> dict[str, float]:
    """Cumulative seconds per phase at the last record."""
    last = self.records[-1] if self.records else {}
    return {p: float(last.get(f"wall/{p}", 0.0) or 0.0) for p in PHASES + ("evaluation",)}

  @property
  def samples_consumed(self) -> int:
    return int(self.records[-1].get("samples", 0)) if self.records else 0

  @property
  def budget(self) -> int:
    total = self.get("train.total_samples")
    if total:
      return int(total)
    steps = self.get("train.total_steps")
    return int(steps) * self.batch_size if steps else self.samples_consumed


def _optim(learning_rate, lr_scaling, reference_batch):
  return types.SimpleNamespace(learning_rate=learning_rate, lr_scaling=lr_scaling,
                               reference_batch=reference_batch)


def run_dirs(sweep_dir: str) -> list[str]:
  """Run directories of a sweep: <sweep_dir>/runs/* (or <sweep_dir>/* without runs/) holding a
  config.json and a metrics.jsonl. Raises FileNotFoundError when there are none."""
  root = os.path.join(sweep_dir, "runs")
  if not os.path.isdir(root):
    root = sweep_dir
  found = sorted(d for d in glob.glob(os.path.join(root, "*"))
                 if os.path.isfile(os.path.join(d, "config.json"))
                 and os.path.isfile(os.path.join(d, "metrics.jsonl")))
  if not found:
    raise FileNotFoundError(f"no run directories under {root!r} (a run directory holds "
                            "config.json and metrics.jsonl; run `python -m rlscale.sweep` first)")
  return found


def load_run(path: str) -> RunData:
  with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
    config = json.load(f)["config"]
  summary = None
  if os.path.exists(os.path.join(path, "summary.json")):
    with open(os.path.join(path, "summary.json"), encoding="utf-8") as f:
      summary = json.load(f)
  return RunData(os.path.basename(path), path, config,
                 read_metrics(os.path.join(path, "metrics.jsonl")), summary)


def load_sweep_meta(sweep_dir: str) -> dict:
  path = os.path.join(sweep_dir, "sweep.json")
  if not os.path.exists(path):
    return {}
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _mode(values):
  return statistics.multimode(values)[0]


def lr_multiplier(run: RunData, base_lr: float) -> float:
  """The run's optim.learning_rate over the sweep's base learning rate lr0 (from its config.json,
  so runs written before the report knew about multipliers get theirs too): 1 for a rule's own
  run, the grid factor (e.g. 0.5, 2) for a run of an LR grid."""
  return float(run.get("optim.learning_rate")) / base_lr


def rule_memberships(runs: Sequence[RunData], base_lr: float, reference_batch: int) -> dict[str, list[str]]:
  """{run name: LR rule groups it belongs to} (the module docstring's "Groups"): [its named rule]
  when its LR multiplier is 1 (relative tolerance 1e-6), every rule for such a run at the
  reference batch (update batch == reference_batch, where every rule gives lr0), [] for a grid run
  (multiplier != 1) whatever rule its learning rate happens to coincide with."""
  out = {}
  for run in runs:
    rule = run.get("optim.lr_scaling")
    if not math.isclose(lr_multiplier(run, base_lr), 1.0, rel_tol=1e-6):
      out[run.name] = []
    elif run.update_batch == reference_batch:
      out[run.name] = list(LR_RULES)
    else:
      out[run.name] = [rule] if rule in LR_RULES else []
  return out


def default_target(runs: Sequence[RunData], metric: str, window: int) -> tuple[float, str]:
  """A target above every run's warm start (so every N* > 0): halfway from the highest warm-start
  value to the median over runs of the best smoothed value, so about half the runs reach it within
  their budget. When the median run does not beat the highest warm start, the lowest best value
  that does (at least one run reaches it); when none does, just above the highest warm start
  (every run censored). Returns (target, how it was chosen)."""
  warm, best = [], []
  for run in runs:
    _, v = run.curve(metric)
    warm.append(float(v[0]))
    best.append(float(np.max(curves_lib.running_mean(v, window))))
  w, b = max(warm), float(np.median(best))
  if b > w:
    return round(w + 0.5 * (b - w), 4), (f"halfway from the highest warm start ({w:.3f}) to the "
                                         f"median best smoothed value over runs ({b:.3f})")
  above = [x for x in best if x > w]
  if above:
    return min(above), (f"the median run does not beat the highest warm start ({w:.3f}); the "
                        "lowest best smoothed value above it")
  return w + 1e-6, f"no run beats the highest warm start ({w:.3f}): every run censored"


def _finite_or_none(x):
  return None if x is None or not math.isfinite(x) else float(x)


class Throughput:
  """q(B) responses/s end to end and per-phase seconds per step, from a throughput profile
  (measured alone on the machine) or, without one, from the runs' own clocks."""

  def __init__(self, profile: dict | None, runs: Sequence[RunData]):
    self.profile = profile
    self.source = "profile" if profile else "runs"
    self.by_batch: dict[int, dict] = {}
    if profile:
      for row in profile["batches"]:
        self.by_batch[int(row["batch_size"])] = {
            "responses_per_s": row["responses_per_s"],
            "seconds": {p: row["seconds"][p]["median"] for p in PHASES + ("step",)},
            "iqr": row["seconds"]["step"]["iqr"]}
    else:
      per_batch: dict[int, list] = {}
      for run in runs:
        secs = run.phase_seconds()
        steps = max(sum(1 for r in run.records if r.get("step", 0) > 0), 1)
        per_batch.setdefault(run.batch_size, []).append({p: secs[p] / steps for p in PHASES})
      for batch, rows in per_batch.items():
        seconds = {p: float(np.mean([r[p] for r in rows])) for p in PHASES}
        seconds["step"] = sum(seconds[p] for p in PHASES)
        self.by_batch[batch] = {"responses_per_s": batch / seconds["step"] if seconds["step"] else None,
                                "seconds": seconds, "iqr": None}
    batches = sorted(self.by_batch)
    self.step_line = None
    if len(batches) >= 2:
      self.step_line = fits.fit_line(batches, [self.by_batch[b]["seconds"]["step"] for b in batches])

  def q(self, batch: int) -> float | None:
    """Responses per second at `batch`: measured, else from the fitted step-cost line."""
    if batch in self.by_batch:
      return self.by_batch[batch]["responses_per_s"]
    if self.step_line is not None and self.step_line(batch) > 0:
      return float(batch / self.step_line(batch))
    return None

  def run_q(self, run: RunData) -> float | None:
    """A run's own responses per second (RL phases of its clock)."""
    rl = sum(run.phase_seconds()[p] for p in PHASES)
    return run.samples_consumed / rl if rl > 0 else None


def _group_value(entries, key):
  return [e[key] for e in entries]


def build_report(sweep_dir: str, *, profile: dict | None = None, metric: str = DEFAULT_METRIC,
                 target: float | None = None, window: int = 3, name: str | None = None) -> dict:
  """The study's numbers for a sweep directory (see the module docstring and report.json keys).

  Runs that have taken no RL step yet are left out (named in "runs_not_started"). Raises
  FileNotFoundError for a directory without runs, ValueError for a metric no run logs or when no
  run has taken an RL step."""
  runs = [load_run(d) for d in run_dirs(sweep_dir)]
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
  meta = load_sweep_meta(sweep_dir)
  base_lr = meta.get("base_learning_rate") or _mode([r.get("optim.learning_rate") for r in runs])
  reference_batch = meta.get("reference_batch") or _mode([r.get("optim.reference_batch") for r in runs])
  how = "given (--target)"
  if target is None:
    target, how = default_target(runs, metric, window)
  memberships = rule_memberships(runs, base_lr, reference_batch)
  throughput = Throughput(profile, runs)

  # Per run: samples-to-target, censoring, time-to-target.
  run_rows, per_run = [], {}
  for run in runs:
    s, v = run.curve(metric)
    crossing = curves_lib.samples_to_target(s, v, target, window=window)
    q = throughput.q(run.batch_size)
    t_s, t_w = run.rl_seconds_curve()
    measured = (float(np.interp(crossing.samples, t_s, t_w))
                if not crossing.censored and t_s.size else None)
    lr_rule = run.get("optim.lr_scaling")
    row = {
        "name": run.name, "prompts_per_step": run.prompts_per_step, "group_size": run.group_size,
        "batch_size": run.batch_size, "lr_rule": lr_rule, "rules": memberships[run.name],
        "learning_rate": run.effective_lr, "lr_multiplier": lr_multiplier(run, base_lr),
        "seed": run.seed, "samples_to_target": crossing.samples, "censored": crossing.censored,
        "samples_lower_bound": crossing.bound, "budget_samples": run.budget,
        "samples_consumed": run.samples_consumed, "finished": run.summary is not None,
        "throughput_responses_per_s": q,
        "time_to_target_s": crossing.samples / q if (not crossing.censored and q) else None,
        "measured_time_to_target_s": measured,
        "run_throughput_responses_per_s": throughput.run_q(run),
        "final_metric": float(v[-1]), "warm_start_metric": float(v[0]),
        "wall_seconds": run.records[-1].get("wall/total") if run.records else None,
    }
    run_rows.append(row)
    per_run[run.name] = (run, row)

  groups = _groups(run_rows)
  batches = sorted({r["batch_size"] for r in run_rows})
  # reference_batch counts responses per optimizer update (the LR rule's unit); the curves are
  # grouped by responses per step, minibatches x that (PPO's 2 minibatches: 128 -> B0 = 256).
  minibatches = _mode([run.batch_size // run.update_batch for run in runs])
  invariance = _invariance(groups, per_run, metric, window, reference_batch * minibatches)
  group_stats = _group_stats(groups, per_run, throughput)
  decisions = _decisions(groups, group_stats, throughput)
  gen_ratio = _generation_ratio(throughput, batches)
  scaling_fit = _scaling_fit(group_stats, throughput)
  gns = _gns(runs)
  if scaling_fit.get(TUNED):
    scaling_fit[TUNED]["b_simple"] = gns.get("b_simple_median")
  return {
      "sweep": name or os.path.basename(os.path.abspath(sweep_dir)),
      "sweep_dir": os.path.abspath(sweep_dir),
      "target": {"metric": metric, "value": target, "chosen": how, "smoothing_window": window},
      "base_learning_rate": base_lr, "reference_batch": reference_batch,
      "reference_batch_size": reference_batch * minibatches,
      "throughput_source": throughput.source,
      "runs": run_rows,
      "runs_not_started": not_started,
      "groups": group_stats,
      "invariance": invariance,
      "decisions": decisions,
      "generation_throughput_ratio": gen_ratio,
      "throughput": {str(b): throughput.by_batch[b] for b in sorted(throughput.by_batch)},
      "phase_shares": _phase_shares(throughput),
      "step_cost_fit": (throughput.step_line._asdict() if throughput.step_line else None),
      # The profile's own fits (generation a + b B and where b B = a, training vs tokens).
      "profile_fits": (profile or {}).get("fits"),
      "scaling_fit": scaling_fit,
      "gns": gns,
  }


def _groups(run_rows) -> dict[tuple[str, int], list[dict]]:
  """{(rule, batch): runs} for each LR rule a run follows, plus "tuned" (best LR per batch)."""
  groups: dict[tuple[str, int], list[dict]] = {}
  for row in run_rows:
    for rule in row["rules"]:
      groups.setdefault((rule, row["batch_size"]), []).append(row)
  for rule in LR_RULES:  # a rule met at one batch only (e.g. linear at B0) compares nothing
    if sum(r == rule for r, _ in groups) < 2:
      groups = {k: v for k, v in groups.items() if k[0] != rule}
  for batch in sorted({r["batch_size"] for r in run_rows}):
    by_lr: dict[float, list[dict]] = {}
    for row in (r for r in run_rows if r["batch_size"] == batch):
      key = next((k for k in by_lr if math.isclose(k, row["learning_rate"], rel_tol=1e-6)),
                 row["learning_rate"])
      by_lr.setdefault(key, []).append(row)
    # Lowest mean samples-to-target (censored runs at their budget), then highest final metric.
    best = min(by_lr.values(), key=lambda rows: (np.mean([r["samples_lower_bound"] for r in rows]),
                                                 -np.mean([r["final_metric"] for r in rows])))
    groups[(TUNED, batch)] = best
  return groups


def _group_stats(groups, per_run, throughput) -> list[dict]:
  out = []
  for (rule, batch), rows in sorted(groups.items()):
    bounds = [r["samples_lower_bound"] for r in rows]
    censored = any(r["censored"] for r in rows)
    mean = float(np.mean(bounds))
    ci = decision_lib.bootstrap_mean_ci(bounds)
    q = throughput.q(batch)
    measured = [r["measured_time_to_target_s"] if not r["censored"] else
                sum(per_run[r["name"]][0].phase_seconds()[p] for p in PHASES) for r in rows]
    out.append({
        "rule": rule, "batch_size": batch, "runs": [r["name"] for r in rows],
        "learning_rate": rows[0]["learning_rate"], "seeds": [r["seed"] for r in rows],
        "samples_to_target_mean": mean, "samples_to_target_ci": list(ci),
        "censored_runs": sum(r["censored"] for r in rows), "censored": censored,
        "throughput_responses_per_s": q,
        "time_to_target_s": mean / q if q else None,
        "time_to_target_ci": [c / q for c in ci] if q else None,
        "measured_time_to_target_s": float(np.mean(measured)),
        "final_metric_mean": float(np.mean([r["final_metric"] for r in rows])),
    })
  return out


def _invariance(groups, per_run, metric, window, reference_batch) -> dict:
  """{rule: {batch: score}} against the reference batch's curve, per seed, averaged; plus the
  seed-to-seed gap at the reference batch (`noise_floor`: what identical settings differ by)."""
  out = {}
  for rule in LR_RULES:
    batches = sorted(b for (r, b) in groups if r == rule)
    if len(batches) < 2:
      continue
    ref = min(batches, key=lambda b: (abs(math.log(b / reference_batch)), b))

    def seed_curves(batch, rule=rule):
      curves = {}
      for row in groups[(rule, batch)]:
        s, v = per_run[row["name"]][0].curve(metric)
        curves.setdefault(row["seed"], (s, curves_lib.running_mean(v, window)))
      return curves

    ref_curves = seed_curves(ref)
    scores = {str(b): curves_lib.invariance_score(seed_curves(b), ref_curves) for b in batches}
    seeds = sorted(ref_curves)
    pairs = [curves_lib.curve_gap(ref_curves[a], ref_curves[b])
             for i, a in enumerate(seeds) for b in seeds[i + 1:]]
    out[rule] = {"reference_batch": ref, "scores": scores,
                 "mean_score": float(np.mean([v for k, v in scores.items()
                                              if int(k) != ref and v is not None] or [np.nan])),
                 "noise_floor": float(np.mean(pairs)) if pairs else None}
  return out


def _decisions(groups, group_stats, throughput) -> list[dict]:
  """Every larger batch vs the smallest, per rule: the rule's prediction and the runs' outcome."""
  stats = {(g["rule"], g["batch_size"]): g for g in group_stats}
  out = []
  for rule in LR_RULES + (TUNED,):
    batches = sorted(b for (r, b) in groups if r == rule)
    if len(batches) < 2:
      continue
    base = batches[0]
    base_rows = groups[(rule, base)]
    for cand in batches[1:]:
      cand_rows = groups[(rule, cand)]
      q_b, q_c = throughput.q(base), throughput.q(cand)
      n_b = [r["samples_lower_bound"] for r in base_rows]
      n_c = [r["samples_lower_bound"] for r in cand_rows]
      if min(n_b) <= 0:  # the base met the target at its warm start: no ratio to compare
        continue
      samples_ratio = float(np.mean(n_c) / np.mean(n_b))
      throughput_ratio = q_c / q_b if q_b and q_c else None
      ci = decision_lib.bootstrap_ratio_ci(n_c, n_b)
      tb, tc = stats[(rule, base)], stats[(rule, cand)]
      censored_b, censored_c = tb["censored"], tc["censored"]
      # Measured on the runs' own clocks; a censored side is a lower bound on its time.
      if censored_b and censored_c:
        measured = None
      elif censored_c:
        measured = False if tc["measured_time_to_target_s"] >= tb["measured_time_to_target_s"] else None
      elif censored_b:
        measured = True if tc["measured_time_to_target_s"] <= tb["measured_time_to_target_s"] else None
      else:
        measured = bool(tc["measured_time_to_target_s"] < tb["measured_time_to_target_s"])
      q_ci = None
      if throughput.by_batch.get(base, {}).get("iqr") and throughput.by_batch.get(cand, {}).get("iqr"):
        # Step-time quartiles of the profile: slowest candidate / fastest base and vice versa.
        sb, sc = throughput.by_batch[base]["iqr"], throughput.by_batch[cand]["iqr"]
        q_ci = [(cand / sc[1]) / (base / sb[0]), (cand / sc[0]) / (base / sb[1])]
      out.append({
          "base": base, "candidate": cand, "lr_rule": rule,
          "throughput_ratio": throughput_ratio, "throughput_ratio_ci": q_ci,
          "samples_ratio": _finite_or_none(samples_ratio), "samples_ratio_ci": [
              _finite_or_none(c) for c in ci],
          "censored": bool(censored_b or censored_c),
          "predicted_faster": (decision_lib.predicted_faster(throughput_ratio, samples_ratio)
                               if throughput_ratio is not None else None),
          "predicted_time_ratio": (_finite_or_none(samples_ratio / throughput_ratio)
                                   if throughput_ratio else None),
          "measured_faster": measured,
          "measured_time_ratio": (tc["measured_time_to_target_s"] / tb["measured_time_to_target_s"]
                                  if tb["measured_time_to_target_s"] else None),
      })
  return out


def _generation_ratio(throughput, batches) -> float | None:
  """Generation responses/s at the largest batch over the smallest (measured ones)."""
  measured = sorted(throughput.by_batch)
  if len(measured) < 2:
    return None
  lo, hi = measured[0], measured[-1]
  rate = lambda b: b / throughput.by_batch[b]["seconds"]["generation"]  # noqa: E731
  return float(rate(hi) / rate(lo))


def _phase_shares(throughput) -> dict:
  out = {}
  for batch, row in sorted(throughput.by_batch.items()):
    total = sum(row["seconds"][p] for p in PHASES)
    out[str(batch)] = {p: row["seconds"][p] / total if total else None for p in PHASES}
  return out


def _scaling_fit(group_stats, throughput) -> dict:
  """Per rule: N*(B) = N_min (1 + B / B_noise) over uncensored groups; with the step-cost line,
  the predicted time-optimal batch, beside the measured best batch."""
  out = {}
  for rule in LR_RULES + (TUNED,):
    rows = [g for g in group_stats if g["rule"] == rule]
    if len(rows) < 2:
      continue
    usable = [g for g in rows if not g["censored"]]
    entry: dict[str, Any] = {"batches": [g["batch_size"] for g in usable]}
    timed = [g for g in usable if g["time_to_target_s"] is not None]
    entry["measured_best_batch"] = (min(timed, key=lambda g: g["time_to_target_s"])["batch_size"]
                                    if timed else None)
    if len({g["batch_size"] for g in usable}) >= 2:
      fit = fits.fit_samples_to_target([g["batch_size"] for g in usable],
                                       [g["samples_to_target_mean"] for g in usable])
      entry.update(n_min=fit.n_min, b_noise=_finite_or_none(fit.b_noise), r2=fit.r2)
      if throughput.step_line is not None:
        best = fits.time_optimal_batch(throughput.step_line, fit)
        entry["predicted_time_optimal_batch"] = _describe_optimal_batch(best)
    out[rule] = entry
  return out


def _describe_optimal_batch(best: float | None) -> float | str | None:
  """The fitted time-optimal batch, or words where the fit has no interior optimum: inf when N*
  does not grow with B, 0 when it grows faster than linearly (fits.fit_samples_to_target)."""
  if best is None or (math.isfinite(best) and best > 0):
    return best
  if math.isinf(best):
    return "larger than any tried (no samples penalty)"
  return "smaller than any tried (N* grows faster than linearly in B)"


def _gns(runs: Sequence[RunData]) -> dict:
  """B_simple per evaluation interval of each run (see rlscale.scaling.noise_scale)."""
  per_run, finals, used = {}, [], None
  for run in runs:
    records = [r for r in run.records if r.get("step", 0) > 0]
    for keys in GNS_KEYS:
      if not records or not all(k in records[0] for k in keys):
        continue
      parts = [np.asarray([r.get(k, np.nan) for r in records], np.float64) for k in keys]
      if np.any(parts[3] <= parts[2]):
        continue  # equal batch sizes (one device, one microbatch): no information
      used = keys
      series = noise_scale.b_simple(*parts)
      points = [{"samples": r["samples"], "b_simple": _finite_or_none(float(b))}
                for r, b in zip(records, series) if any(k.startswith("eval/") for k in r)]
      per_run[run.name] = {"batch_size": run.batch_size, "intervals": points,
                           "b_small": float(parts[2][0]), "b_big": float(parts[3][0])}
      half = series[len(series) // 2:]
      finite = half[np.isfinite(half)]
      if finite.size:
        finals.append(float(np.median(finite)))
      break
  if not per_run:
    return {"available": False, "per_run": {}, "b_simple_median": None,
            "note": _gns_missing_note(runs)}
  return {"available": True, "keys": list(used), "per_run": per_run,
          "b_simple_median": float(np.median(finals)) if finals else None,
          "note": "median over runs of each run's median B_simple over its second half"}


def _gns_missing_note(runs: Sequence[RunData]) -> str:
  """Why no run gives B_simple, in words: no run logged the microbatch GNS metrics (runs that
  predate them log at most the per-device norms, one batch size on one device), or they were
  logged at one batch size (rl.microbatches = 1 on one device)."""
  first = [next((r for r in run.records if r.get("step", 0) > 0), {}) for run in runs]
  small, big = GNS_KEYS[0][2], GNS_KEYS[0][3]
  logged = [rec for rec in first if all(k in rec for k in GNS_KEYS[0])]
  if logged:
    sizes = sorted({int(rec[small]) for rec in logged if rec[small] >= rec[big]})
    return (f"the runs logged the GNS metrics at one batch size only (B_small = B_big = "
            f"{', '.join(map(str, sizes))} responses: rl.microbatches = 1 on one device); rerun "
            "with rl.microbatches >= 2 to estimate B_simple")
  older = any(all(k in rec for k in GNS_KEYS[1]) for rec in first)
  return ("no run logged GNS metrics (" + ", ".join(GNS_KEYS[0]) + "); "
          + ("the runs predate them: they log only the per-device norms (train/grad_sq_norm_local, "
             "train/grad_sq_norm_global), one batch size on one device; runs made since with "
             "rl.microbatches >= 2 log them" if older else "runs with rl.microbatches >= 2 log them"))
