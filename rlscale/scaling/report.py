"""A sweep directory -> the study's numbers: samples-, time-to-target, invariance, decisions, GNS.

`build_report(sweep_dir, ...)` reads whatever run directories exist under `<sweep_dir>/runs`
(metrics.jsonl, config.json, summary.json; a run still going counts with the evaluations it has,
one with no RL step yet is left out and named in report['runs_not_started']), the validation runs
under `<sweep_dir>/validation/runs` when they exist, and an optional throughput profile
(`rlscale.scaling.throughput`), and returns the report dict that `write_report` saves as
report.json, report.md, CSV tables and figures.

The rules it follows (each a module of its own):
- the target is the one the sweep file states (`rlscale.scaling.target`), at least 3 binomial
  standard errors above the warm start;
- samples-to-target is the sustained crossing of the centred running mean, the first crossing
  beside it (`rlscale.scaling.curves`);
- LR-rule groups and the tuned group per batch, with `bracketed` and leave-one-seed-out selection
  (`rlscale.scaling.groups`);
- ratios are paired over seed keys (the warm start's seed, the RL seed) with t intervals on log
  ratios, none below 3 seeds, and every decision is "faster", "slower" or "unresolved"
  (`rlscale.scaling.decision`);
- predicted time ratios (profile q, sweep N*) are checked against measured ones from runs executed
  alone on the machine (`rlscale.scaling.validation`);
- the noise scale is pooled per training phase (`rlscale.scaling.noise_scale`);
- every conclusion is a sentence generated from these numbers, with its interval and whether it
  is resolved (`claims`).
"""

from __future__ import annotations

import dataclasses
import glob
import math
import os
import statistics
import types
from typing import Any, Sequence

import numpy as np

from rlscale import inputs
from rlscale.runner.metrics_log import metrics_path, read_metrics
from rlscale.scaling import curves as curves_lib
from rlscale.scaling import decision as decision_lib
from rlscale.scaling import fits
from rlscale.scaling import groups as groups_lib
from rlscale.scaling import noise_scale
from rlscale.scaling import target as target_lib
from rlscale.scaling import tuned_lr
from rlscale.scaling.groups import LR_RULES, TUNED
from rlscale.scaling.throughput import PHASES
from rlscale.train.optimizer import scaled_learning_rate

DEFAULT_METRIC = "eval/greedy_accuracy"
VALIDATION_DIR = "validation"
# (|g_small|^2, |g_big|^2, B_small, B_big) metric keys logged by the update step, newest first:
# small = a microbatch on one device, a device's part on several (rlscale/train/update.py); the
# older per-device names carry no information on one device (B_small = B_big).
GNS_KEYS = (
    ("train/gns_grad_sq_small", "train/gns_grad_sq_big", "train/gns_batch_small",
     "train/gns_batch_big"),
    ("train/grad_sq_norm_local", "train/grad_sq_norm_global", "train/gns_batch_local",
     "train/gns_batch_global"),
)
# Loss aggregations whose gradient is a mean over tokens: the noise scale's examples are tokens.
TOKEN_MEAN_AGGREGATIONS = ("token-mean",)


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
  def sft_seed(self) -> int:
    """The warm start's seed: sft.seed, or the run seed where it is unset (runs before the field)."""
    value = self.get("sft.seed")
    return int(value) if value is not None else self.seed

  @property
  def seed_key(self) -> tuple[int, int]:
    """(warm-start seed, RL seed): runs with equal keys share warm start and prompt stream."""
    return (self.sft_seed, self.seed)

  @property
  def eval_size(self) -> int | None:
    """Held-out prompts per evaluation: logged as eval/num_prompts, else task.eval_size."""
    for record in self.records:
      if record.get("eval/num_prompts"):
        return int(record["eval/num_prompts"])
    size = self.get("task.eval_size")
    return int(size) if size else None

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
    clock (evaluation and compilation excluded), one point per record."""
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

  def mean_response_tokens(self) -> float | None:
    """Mean response length in tokens over the run's steps (response/length_mean)."""
    lengths = [r["response/length_mean"] for r in self.records if "response/length_mean" in r]
    return float(np.mean(lengths)) if lengths else None


def _optim(learning_rate, lr_scaling, reference_batch):
  return types.SimpleNamespace(learning_rate=learning_rate, lr_scaling=lr_scaling,
                               reference_batch=reference_batch)


def run_dirs(sweep_dir: str, *, required: bool = True) -> list[str]:
  """Run directories of a sweep: <sweep_dir>/runs/* (or <sweep_dir>/* without runs/) holding a
  config.json and a metrics.jsonl (or its gzipped archive, as committed results store it).
  Raises FileNotFoundError when there are none and `required`."""
  root = os.path.join(sweep_dir, "runs")
  if not os.path.isdir(root):
    root = sweep_dir
  found = sorted(d for d in glob.glob(os.path.join(root, "*"))
                 if os.path.isfile(os.path.join(d, "config.json"))
                 and metrics_path(d) is not None)
  if not found and required:
    raise FileNotFoundError(f"no run directories under {root!r} (a run directory holds "
                            "config.json and metrics.jsonl; run `python -m rlscale.sweep` first)")
  return found


def load_run(path: str) -> RunData:
  config = inputs.read_json(os.path.join(path, "config.json"))["config"]
  summary = None
  if os.path.exists(os.path.join(path, "summary.json")):
    summary = inputs.read_json(os.path.join(path, "summary.json"))
  return RunData(os.path.basename(path), path, config,
                 read_metrics(metrics_path(path)), summary)


def load_sweep_meta(sweep_dir: str) -> dict:
  path = os.path.join(sweep_dir, "sweep.json")
  if not os.path.exists(path):
    return {}
  return inputs.read_json(path)


def _mode(values):
  return statistics.multimode(values)[0]


def lr_multiplier(run: RunData, base_lr: float) -> float:
  """The run's optim.learning_rate over the sweep's base learning rate lr0 (from its config.json):
  1 for a rule's own run, the grid factor (e.g. 0.5, 2) for a run of an LR grid."""
  return float(run.get("optim.learning_rate")) / base_lr


def rule_memberships(runs: Sequence[RunData], base_lr: float, reference_batch: int) -> dict[str, list[str]]:
  """{run name: LR rule groups it belongs to} (rlscale.scaling.groups, "LR-rule groups")."""
  return groups_lib.rule_memberships({
      run.name: (run.get("optim.lr_scaling"), lr_multiplier(run, base_lr),
                 run.update_batch == reference_batch) for run in runs})


def _finite_or_none(x):
  return None if x is None or not math.isfinite(x) else float(x)


class Throughput:
  """q(B) responses/s end to end and per-phase seconds per step, from a throughput profile
  (measured alone on the machine) or, without one, from the runs' own clocks."""

  def __init__(self, profile: dict | None, runs: Sequence[RunData]):
    self.profile = profile
    self.source = "profile" if profile else "runs"
    self.device = (profile or {}).get("device")
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

  def ratio_ci(self, base: int, cand: int) -> list[float] | None:
    """q(cand) / q(base) from the profile's step-time quartiles, slowest candidate over fastest
    base and the reverse; None without quartiles at both batches."""
    sb, sc = (self.by_batch.get(b, {}).get("iqr") for b in (base, cand))
    if not sb or not sc:
      return None
    return [(cand / sc[1]) / (base / sb[0]), (cand / sc[0]) / (base / sb[1])]

  def run_q(self, run: RunData) -> float | None:
    """A run's own responses per second (RL phases of its clock)."""
    rl = sum(run.phase_seconds()[p] for p in PHASES)
    return run.samples_consumed / rl if rl > 0 else None


def run_row(run: RunData, *, metric: str, target: float, window: int, throughput: Throughput,
            rules: list[str], base_lr: float) -> dict:
  """One run's numbers: samples-to-target (sustained and first), censoring, time-to-target from
  the profile's q and from the run's own clock (at the sustained crossing)."""
  s, v = run.curve(metric)
  crossing = curves_lib.samples_to_target(s, v, target, window=window)
  q = throughput.q(run.batch_size)
  t_s, t_w = run.rl_seconds_curve()
  measured = (float(np.interp(crossing.samples, t_s, t_w))
              if not crossing.censored and t_s.size else None)
  return {
      "name": run.name, "prompts_per_step": run.prompts_per_step, "group_size": run.group_size,
      "batch_size": run.batch_size, "lr_rule": run.get("optim.lr_scaling"), "rules": rules,
      "learning_rate": run.effective_lr, "lr_multiplier": lr_multiplier(run, base_lr),
      "seed": run.seed, "sft_seed": run.sft_seed, "seed_key": list(run.seed_key),
      "samples_to_target": crossing.samples, "samples_to_target_first": crossing.first,
      "censored": crossing.censored, "samples_lower_bound": crossing.bound,
      "budget_samples": run.budget, "samples_consumed": run.samples_consumed,
      "finished": run.summary is not None, "throughput_responses_per_s": q,
      "time_to_target_s": crossing.samples / q if (not crossing.censored and q) else None,
      "measured_time_to_target_s": measured,
      "run_throughput_responses_per_s": throughput.run_q(run),
      "final_metric": float(v[-1]), "warm_start_metric": float(v[0]),
      "wall_seconds": run.records[-1].get("wall/total") if run.records else None,
      "mean_response_tokens": run.mean_response_tokens(),
  }


def _key(row) -> tuple:
  return tuple(row["seed_key"])


def resolve_target(runs: Sequence[RunData], meta: dict, *, metric: str, value: float | None,
                   window: int) -> dict:
  """The target on `metric`: `value` (--target) when given, else the one the sweep file states
  (sweep.json "target", when it names the same metric), else one proposed from the runs
  (labelled so). The runs must log the metric."""
  stated = meta.get("target") or {}
  if value is not None:
    how = "given on the command line (--target)"
  elif stated.get("value") is not None and stated.get("metric", metric) == metric:
    value, how = float(stated["value"]), "pre-registered in the sweep file (get_target)"
  else:
    value, how = target_lib.propose_target(
        [float(r.curve(metric)[1][0]) for r in runs],
        [target_lib.best_smoothed(r.curve(metric)[1], window) for r in runs])
  return {"metric": metric, "value": float(value), "chosen": how}


def _check_target(target: dict, runs: Sequence[RunData], allow_weak: bool) -> dict:
  warm = max(float(r.curve(target["metric"])[1][0]) for r in runs)
  sizes = [r.eval_size for r in runs if r.eval_size]
  if not sizes:
    return {"standard_errors_above_warm_start": None, "warm_start": warm, "eval_size": None,
            "weak": True, "note": "evaluation size unknown (no task.eval_size): not checked"}
  return target_lib.check_target(target["value"], warm, min(sizes), metric=target["metric"],
                                 allow_weak=allow_weak)


def build_report(sweep_dir: str, *, profile: dict | None = None, metric: str | None = None,
                 target: float | None = None, window: int = 3, name: str | None = None,
                 allow_weak_target: bool = False) -> dict:
  """The study's numbers for a sweep directory (see the module docstring and report.json keys).

  Args:
    sweep_dir: the sweep's --workdir (runs/, sweep.json, validation/runs/ when validated).
    profile: a throughput profile (rlscale.scaling.throughput), or None for the runs' clocks.
    metric, target: the target's metric and value; None = the sweep file's (resolve_target).
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
  tgt = resolve_target(runs, meta, metric=metric, value=target, window=window)
  # A smoke sweep checks the pipeline; its report carries a banner saying so instead.
  allow_weak_target = allow_weak_target or meta.get("arg") == "smoke"
  tgt.update(_check_target(tgt, runs, allow_weak_target), smoothing_window=window,
             smoothing="centred running mean (looks ahead: the curves are complete)")
  base_lr = meta.get("base_learning_rate") or _mode([r.get("optim.learning_rate") for r in runs])
  reference_batch = meta.get("reference_batch") or _mode([r.get("optim.reference_batch") for r in runs])
  memberships = rule_memberships(runs, base_lr, reference_batch)
  throughput = Throughput(profile, runs)
  row_args = dict(metric=tgt["metric"], target=tgt["value"], window=window, throughput=throughput,
                  base_lr=base_lr)
  run_rows = [run_row(run, rules=memberships[run.name], **row_args) for run in runs]
  per_run = {run.name: run for run in runs}

  groups = groups_lib.rule_groups(run_rows)
  grid = groups_lib.grid_rows(run_rows)
  tuned = groups_lib.tuned_groups(grid)
  for batch, group in tuned.items():
    groups[(TUNED, batch)] = group.rows
  # reference_batch counts responses per optimizer update (the LR rule's unit); the curves are
  # grouped by responses per step, minibatches x that (PPO's 2 minibatches: 128 -> B0 = 256).
  minibatches = _mode([run.batch_size // run.update_batch for run in runs])
  invariance = _invariance(groups, per_run, tgt["metric"], window, reference_batch * minibatches)
  group_stats = _group_stats(groups, tuned, throughput)
  decisions = _decisions(groups, throughput)
  decisions_by_warm_start = _decisions_by_warm_start(groups, throughput)
  validation = _validation(sweep_dir, meta, decisions, groups, memberships, row_args, runs)
  scaling_fit = _scaling_fit(group_stats, throughput)
  gns = _gns(runs)
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
      "seeds": sorted({tuple(r["seed_key"]) for r in run_rows}),
      "runs": run_rows,
      "runs_not_started": not_started,
      "groups": group_stats,
      "invariance": invariance,
      "decisions": decisions,
      "decisions_by_warm_start": decisions_by_warm_start,
      "validation": validation,
      "generation_throughput_ratio": _generation_ratio(throughput),
      "throughput": {str(b): throughput.by_batch[b] for b in sorted(throughput.by_batch)},
      "phase_shares": _phase_shares(throughput),
      "step_cost_fit": (throughput.step_line._asdict() if throughput.step_line else None),
      # The profile's own fits (generation a + b B and where b B = a, training vs tokens).
      "profile_fits": (profile or {}).get("fits"),
      "scaling_fit": scaling_fit,
      "tuned_lr_exponent": tuned_lr.lr_exponent(grid, reference_batch * minibatches),
      "gns": gns,
      "response_tokens": _response_tokens(run_rows),
  }
  report["power"] = _power(groups, decisions)
  report["claims"] = claims(report)
  return report


POWER_HALF_WIDTH = math.log(1.15)  # a paired N* ratio known to about +-15%


def _power(groups, decisions) -> list[dict]:
  """Per decision with >= 2 paired, uncensored seeds: the spread (sd) of the paired log N* ratios
  and the seeds a 95% t interval needs for a half width of log(1.15), about +-15% on the ratio
  (decision.seeds_needed): the study's power calculation, repeated from its own runs."""
  out = []
  for d in decisions:
    base = {_key(r): r for r in groups[(d["lr_rule"], d["base"])]}
    cand = {_key(r): r for r in groups[(d["lr_rule"], d["candidate"])]}
    logs = [math.log(cand[k]["samples_lower_bound"] / base[k]["samples_lower_bound"])
            for k in sorted(set(base) & set(cand))
            if not cand[k]["censored"] and not base[k]["censored"]
            and cand[k]["samples_lower_bound"] > 0 and base[k]["samples_lower_bound"] > 0]
    if len(logs) < 2:
      continue
    sd = float(np.std(logs, ddof=1))
    out.append({"lr_rule": d["lr_rule"], "base": d["base"], "candidate": d["candidate"],
                "n": len(logs), "sd_log_ratio": sd,
                "seeds_for_15_percent": decision_lib.seeds_needed(sd, POWER_HALF_WIDTH)})
  return out


def _response_tokens(run_rows) -> dict:
  """Mean response length in tokens per batch (over its runs' steps), from the data."""
  out = {}
  for batch in sorted({r["batch_size"] for r in run_rows}):
    lengths = [r["mean_response_tokens"] for r in run_rows
               if r["batch_size"] == batch and r["mean_response_tokens"] is not None]
    out[str(batch)] = float(np.mean(lengths)) if lengths else None
  return out


def _group_stats(groups, tuned, throughput) -> list[dict]:
  """Per (rule, batch): N* over seeds (mean, t interval from 3 seeds), T = N*/q, censoring, and
  for the tuned group its grid (bracketed, LRs tried, selection)."""
  out = []
  for (rule, batch), rows in sorted(groups.items()):
    bounds = [r["samples_lower_bound"] for r in rows]
    mean = float(np.mean(bounds))
    ci = decision_lib.t_interval(bounds)
    q = throughput.q(batch)
    group = tuned.get(batch) if rule == TUNED else None
    out.append({
        "rule": rule, "batch_size": batch, "runs": [r["name"] for r in rows],
        "learning_rate": group.learning_rate if group else rows[0]["learning_rate"],
        "seeds": [r["seed_key"] for r in rows], "n_seeds": len(rows),
        "samples_to_target_mean": mean, "samples_to_target_ci": list(ci) if ci else None,
        "censored_runs": sum(r["censored"] for r in rows),
        "censored": any(r["censored"] for r in rows),
        "throughput_responses_per_s": q,
        "time_to_target_s": mean / q if q else None,
        "time_to_target_ci": [c / q for c in ci] if (q and ci) else None,
        "final_metric_mean": float(np.mean([r["final_metric"] for r in rows])),
        "bracketed": group.bracketed if group else None,
        "learning_rates_tried": group.learning_rates_tried if group else None,
        "selection": group.selection if group else None,
    })
  return out


def _smoothed_curves(rows, per_run, metric, window) -> dict:
  """{seed key: (samples, centred running mean)} of the rows' runs."""
  out = {}
  for row in rows:
    s, v = per_run[row["name"]].curve(metric)
    out.setdefault(_key(row), (s, curves_lib.centred_mean(v, window)))
  return out


def _invariance(groups, per_run, metric, window, reference_batch) -> dict:
  """Per rule: the invariance score of each batch against the reference batch's curve (paired by
  seed key, 0-sample point left out, rlscale.scaling.curves), per seed and averaged; the noise
  floor (the gap between runs at the reference batch on the *same* warm start and different RL
  seeds: what identical settings differ by); and, between rules, the paired difference of the
  per-seed mean scores with its t interval (`comparisons`)."""
  out: dict[str, Any] = {}
  per_seed_means = {}
  for rule in LR_RULES:
    batches = sorted(b for (r, b) in groups if r == rule)
    if len(batches) < 2:
      continue
    ref = min(batches, key=lambda b: (abs(math.log(b / reference_batch)), b))
    ref_curves = _smoothed_curves(groups[(rule, ref)], per_run, metric, window)
    per_seed = {}
    for b in batches:
      if b == ref:
        continue
      cand = _smoothed_curves(groups[(rule, b)], per_run, metric, window)
      per_seed[str(b)] = {k: curves_lib.curve_gap(cand[k], ref_curves[k])
                          for k in sorted(set(cand) & set(ref_curves))}
    scores = {b: (float(np.mean(list(v.values()))) if v else None) for b, v in per_seed.items()}
    keys = sorted({k for v in per_seed.values() for k in v})
    per_seed_means[rule] = {k: float(np.mean([v[k] for v in per_seed.values() if k in v]))
                            for k in keys}
    pairs = [curves_lib.curve_gap(ref_curves[a], ref_curves[b])
             for i, a in enumerate(sorted(ref_curves)) for b in sorted(ref_curves)[i + 1:]
             if a[0] == b[0]]  # same warm start, different RL seed
    out[rule] = {"reference_batch": ref, "scores": scores,
                 "per_seed": {b: {repr(k): g for k, g in v.items()} for b, v in per_seed.items()},
                 "mean_score": _finite_or_none(float(np.mean(
                     [v for v in scores.values() if v is not None] or [np.nan]))),
                 "noise_floor": float(np.mean(pairs)) if pairs else None,
                 "noise_floor_pairs": len(pairs)}
  comparisons = {}
  for a, b in (("sqrt", "none"), ("sqrt_adam", "none"), ("sqrt_adam", "sqrt")):
    if a in per_seed_means and b in per_seed_means:
      keys = sorted(set(per_seed_means[a]) & set(per_seed_means[b]))
      diffs = [per_seed_means[a][k] - per_seed_means[b][k] for k in keys]
      if diffs:
        ci = decision_lib.t_interval(diffs)
        comparisons[f"{a}_minus_{b}"] = {
            "difference": float(np.mean(diffs)), "ci": list(ci) if ci else None, "n": len(diffs),
            "resolved": bool(ci and (ci[1] < 0 or ci[0] > 0))}
  if out:
    out["comparisons"] = comparisons
  return out


def _decisions(groups, throughput) -> list[dict]:
  """Every larger batch vs the smallest, per rule: the samples ratio paired over seed keys, the
  throughput ratio, the predicted time ratio with its interval and a three-valued verdict."""
  out = []
  for rule in LR_RULES + (TUNED,):
    batches = sorted(b for (r, b) in groups if r == rule)
    if len(batches) < 2:
      continue
    base = batches[0]
    for cand in batches[1:]:
      base_rows, cand_rows = groups[(rule, base)], groups[(rule, cand)]
      paired, dropped = _paired({_key(r): r["samples_lower_bound"] for r in cand_rows},
                                {_key(r): r["samples_lower_bound"] for r in base_rows})
      if paired is None:
        continue
      censored = any(r["censored"] for r in base_rows + cand_rows if _key(r) in paired.seeds)
      q_b, q_c = throughput.q(base), throughput.q(cand)
      q_ratio = q_c / q_b if q_b and q_c else None
      q_ci = throughput.ratio_ci(base, cand)
      time_ci = (decision_lib.time_ratio_interval(paired.ci, q_ratio, q_ci) if q_ratio else None)
      out.append({
          "base": base, "candidate": cand, "lr_rule": rule, "n_seeds": paired.n,
          "seeds_at_target_at_warm_start": dropped,
          "throughput_ratio": q_ratio, "throughput_ratio_ci": q_ci,
          "samples_ratio": paired.ratio, "samples_ratio_ci": list(paired.ci) if paired.ci else None,
          "censored": bool(censored),
          "predicted_time_ratio": paired.ratio / q_ratio if q_ratio else None,
          "time_ratio_ci": list(time_ci) if time_ci else None,
          "verdict": decision_lib.verdict(time_ci, censored=censored),
          "why": _why_unresolved(paired.n, censored, time_ci),
      })
  return out


def _decisions_by_warm_start(groups, throughput) -> dict[str, list[dict]]:
  """{warm start's seed: the decisions on its seed keys alone} when the runs come from more than
  one warm start, else {}. A robustness warm start run under fewer rules or seeds than the first
  would otherwise set the pooled decision (e.g. censor it) by itself; split, each warm start says
  whether the answer holds from another starting point."""
  warm_starts = sorted({_key(r)[0] for rows in groups.values() for r in rows})
  if len(warm_starts) < 2:
    return {}
  out = {}
  for w in warm_starts:
    mine = {k: [r for r in rows if _key(r)[0] == w] for k, rows in groups.items()}
    out[str(w)] = _decisions({k: rows for k, rows in mine.items() if rows}, throughput)
  return out


def _paired(candidate: dict, base: dict):
  """(decision.paired_log_ratio over the common seed keys where both values are > 0, or None when
  there is none; how many common keys were left out). A run that met the target at its warm start
  (N* = 0) has no ratio: it is left out and counted, not divided by."""
  common = set(candidate) & set(base)
  usable = {k for k in common if candidate[k] > 0 and base[k] > 0}
  if not usable:
    return None, len(common)
  return (decision_lib.paired_log_ratio({k: candidate[k] for k in usable},
                                        {k: base[k] for k in usable}), len(common - usable))


def _why_unresolved(n: int, censored: bool, ci) -> str | None:
  if censored:
    return "a side is censored (some seed never reached the target): N* is a lower bound"
  if n < decision_lib.MIN_SEEDS:
    return f"{n} paired seed(s): no interval below {decision_lib.MIN_SEEDS}"
  if ci is None:
    return "no throughput ratio"
  if ci[0] <= 1.0 <= ci[1]:
    return "the 95% interval of the time ratio contains 1"
  return None


def _validation(sweep_dir, meta, decisions, groups, memberships, row_args, runs) -> list[dict]:
  """Per decision: the predicted time ratio beside the one measured on runs executed alone (each
  with its own wall clock to the sustained crossing, compile excluded), paired over seeds.

  The clocks come from <sweep_dir>/validation/runs (`python -m rlscale.sweep ... --validate`), or
  from the sweep's own runs when sweep.json says it ran with parallel = 1 (deterministic runs:
  such a sweep is its own validation). Otherwise each entry says "not run"."""
  alone = {}
  source = None
  val_dirs = run_dirs(os.path.join(sweep_dir, VALIDATION_DIR), required=False) if os.path.isdir(
      os.path.join(sweep_dir, VALIDATION_DIR, "runs")) else []
  if val_dirs:
    source = "validation runs executed one at a time, alone on the machine"
    for d in val_dirs:
      run = load_run(d)
      if run.samples_consumed > 0:
        alone[run.name] = run_row(run, rules=memberships.get(run.name, []), **row_args)
  elif meta.get("parallel") == 1:
    source = "the sweep's own runs (executed one at a time, --parallel=1)"
    for run in runs:
      alone[run.name] = run_row(run, rules=memberships.get(run.name, []), **row_args)
  out = []
  for d in decisions:
    entry = {"lr_rule": d["lr_rule"], "base": d["base"], "candidate": d["candidate"],
             "predicted_time_ratio": d["predicted_time_ratio"],
             "predicted_time_ratio_ci": d["time_ratio_ci"], "predicted_verdict": d["verdict"],
             "measured_time_ratio": None, "measured_time_ratio_ci": None,
             "measured_verdict": None, "n_seeds": 0, "source": source or "not run"}
    if alone:
      t_b, t_c, censored_b, censored_c = {}, {}, set(), set()
      for side, side_censored, rows in (
          (t_b, censored_b, groups[(d["lr_rule"], d["base"])]),
          (t_c, censored_c, groups[(d["lr_rule"], d["candidate"])])):
        for row in rows:
          val = alone.get(row["name"])
          if val is None:
            continue
          if val["censored"] or not val["measured_time_to_target_s"]:
            side_censored.add(_key(row))
            continue
          side[_key(row)] = val["measured_time_to_target_s"]
      # Censoring counts on seed keys both sides ran only: a base run the candidate has no twin
      # of (e.g. a robustness warm start shared by every rule at B0) is not in the ratio.
      censored = bool((censored_b & (set(t_c) | censored_c)) | (censored_c & set(t_b)))
      paired, _ = _paired(t_c, t_b)
      if paired is not None:
        entry.update(measured_time_ratio=paired.ratio,
                     measured_time_ratio_ci=list(paired.ci) if paired.ci else None,
                     measured_verdict=decision_lib.verdict(paired.ci, censored=censored),
                     n_seeds=paired.n)
      else:
        entry["measured_verdict"] = "unresolved"
        entry["source"] = f"{source}: no paired run reached the target"
    out.append(entry)
  return out


def _generation_ratio(throughput) -> float | None:
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
  """Per rule: N*(B) = N_min (1 + B / B_noise) over the uncensored groups when there are at least
  fits.MIN_FIT_POINTS batch sizes (a line through 2 points always has R^2 = 1), the censored ones
  counted out in words; with the step-cost line, the predicted time-optimal batch beside the
  measured best (lowest T = N*/q among uncensored groups)."""
  out = {}
  for rule in LR_RULES + (TUNED,):
    rows = [g for g in group_stats if g["rule"] == rule]
    if len(rows) < 2:
      continue
    usable = [g for g in rows if not g["censored"]]
    left_out = [g["batch_size"] for g in rows if g["censored"]]
    entry: dict[str, Any] = {"batches": [g["batch_size"] for g in usable], "n": len(usable),
                             "censored_left_out": left_out}
    timed = [g for g in usable if g["time_to_target_s"] is not None]
    entry["measured_best_batch"] = (min(timed, key=lambda g: g["time_to_target_s"])["batch_size"]
                                    if timed else None)
    if len({g["batch_size"] for g in usable}) >= fits.MIN_FIT_POINTS:
      fit = fits.fit_samples_to_target([g["batch_size"] for g in usable],
                                       [g["samples_to_target_mean"] for g in usable])
      entry.update(n_min=fit.n_min, b_noise=_finite_or_none(fit.b_noise), r2=fit.r2)
      if throughput.step_line is not None:
        best = fits.time_optimal_batch(throughput.step_line, fit)
        entry["predicted_time_optimal_batch"] = _describe_optimal_batch(best)
    else:
      entry["note"] = (f"no fit: {len(usable)} uncensored batch size(s), {fits.MIN_FIT_POINTS} "
                       "needed" + (f"; censored (lower bounds) left out: B = "
                                   f"{', '.join(map(str, left_out))}" if left_out else ""))
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
  """B_simple pooled per training phase (first and second half of each run's steps) over every
  run that logged the noise-scale norms at two batch sizes, with an interval over steps; per run
  the pooled value per phase too. Nothing is dropped: a noise-dominated phase gives inf (null in
  JSON) with its interval. The unit follows the loss aggregation: with token-mean the gradient is a
  mean over tokens and B_simple is converted to tokens (responses x mean response tokens)."""
  per_run, parts_by_phase, used = {}, {"first_half": [], "second_half": []}, None
  aggregations = set()
  for run in runs:
    records = [r for r in run.records if r.get("step", 0) > 0]
    for keys in GNS_KEYS:
      if not records or not all(k in records[0] for k in keys):
        continue
      parts = np.asarray([[r.get(k, np.nan) for k in keys] for r in records], np.float64)
      parts = parts[np.all(np.isfinite(parts), axis=1)]
      if parts.size == 0 or np.any(parts[:, 3] <= parts[:, 2]):
        continue  # equal batch sizes (one device, one microbatch): no information
      used = keys
      aggregations.add(run.get("rl.loss_agg_mode"))
      half = len(parts) // 2
      phases = {"first_half": parts[:half], "second_half": parts[half:]}
      entry = {"batch_size": run.batch_size, "b_small": float(parts[0, 2]),
               "b_big": float(parts[0, 3]), "tokens_per_response": run.mean_response_tokens()}
      for phase, rows in phases.items():
        if len(rows):
          pooled = noise_scale.pooled_b_simple(*rows.T)
          entry[phase] = _pooled_dict(pooled)
          parts_by_phase[phase].append(rows)
      series = noise_scale.b_simple(*parts.T)
      entry["intervals"] = [{"samples": r["samples"], "b_simple": _finite_or_none(float(b))}
                            for r, b in zip(records, series) if any(k.startswith("eval/") for k in r)]
      per_run[run.name] = entry
      break
  if not per_run:
    return {"available": False, "per_run": {}, "pooled": None, "note": _gns_missing_note(runs)}
  token_mean = aggregations <= set(TOKEN_MEAN_AGGREGATIONS) and None not in aggregations
  tokens = [e["tokens_per_response"] for e in per_run.values() if e["tokens_per_response"]]
  scale = float(np.mean(tokens)) if token_mean and tokens else 1.0
  pooled = {}
  for phase, chunks in parts_by_phase.items():
    if chunks:
      p = noise_scale.pooled_b_simple(*np.concatenate(chunks).T)
      pooled[phase] = _pooled_dict(p, scale)
  return {"available": True, "keys": list(used), "per_run": per_run, "pooled": pooled,
          "unit": "tokens" if token_mean and tokens else "responses",
          "loss_agg_modes": sorted(a for a in aggregations if a),
          "note": ("pooled over every run's steps per phase: sum tr(Sigma) / sum |G|^2, "
                   "interval over steps resampled; inf = noise-dominated")}


def _pooled_dict(pooled, scale: float = 1.0) -> dict:
  return {"b_simple": _finite_or_none(pooled.b_simple * scale),
          "ci": [_finite_or_none(c * scale) for c in pooled.ci] if pooled.ci else None,
          "steps": pooled.steps}


def _interval_text(ci, digits=3, missing="(no interval: fewer than 3 seeds)") -> str:
  """"[lo, hi]" (None, an infinite end in JSON, as inf), or `missing` without an interval."""
  if not ci:
    return missing
  low, high = ("inf" if c is None else f"{c:.{digits}g}" for c in ci)
  return f"[{low}, {high}]"


def _paired_rule_comparison(groups: list[dict], runs: list[dict], a: str, b: str, batch: int):
  """N*(rule a) / N*(rule b) at one batch, paired over seeds (q is the same, so this is the time
  ratio too); None when the groups are missing, "same runs" when both are the same run at every
  common seed key (e.g. the tuned LR is none's there)."""
  by = {(g["rule"], g["batch_size"]): g for g in groups}
  ga, gb = by.get((a, batch)), by.get((b, batch))
  if not ga or not gb:
    return None
  rows = {r["name"]: r for r in runs}
  names_a = {tuple(rows[n]["seed_key"]): n for n in ga["runs"]}
  names_b = {tuple(rows[n]["seed_key"]): n for n in gb["runs"]}
  if all(names_a[k] == names_b[k] for k in set(names_a) & set(names_b)):
    return "same runs"
  na = {tuple(rows[n]["seed_key"]): rows[n]["samples_lower_bound"] for n in ga["runs"]}
  nb = {tuple(rows[n]["seed_key"]): rows[n]["samples_lower_bound"] for n in gb["runs"]}
  paired, _ = _paired(na, nb)
  if paired is None:
    return None
  # Censoring counts on the paired seed keys only: a run the other rule has no twin of (e.g. a
  # robustness warm start run under one rule) is not in the ratio.
  censored = any(rows[names[k]]["censored"] for names in (names_a, names_b) for k in paired.seeds)
  return paired, decision_lib.verdict(paired.ci, censored=censored), censored


def claims(report: dict) -> list[dict]:
  """The report's conclusions as sentences generated from its numbers, each with its interval and
  `resolved` (True only when its interval excludes no effect); never a direction from point
  estimates alone. [{"topic", "text", "resolved"}]."""
  out = []

  def add(topic, text, resolved=None):
    out.append({"topic": topic, "text": text, "resolved": resolved})

  t = report["target"]
  z = t.get("standard_errors_above_warm_start")
  add("target", f"Target {t['metric']} >= {t['value']:g} ({t['chosen']}): "
      + (f"{z:.1f} standard errors above the warm start ({t['warm_start']:.3f} on "
         f"{t['eval_size']} prompts)" if z is not None else "distance from the warm start unknown")
      + ((" — WEAK: fewer than 3 SE, allowed because this is a smoke sweep" if report.get("smoke")
          else " — WEAK: fewer than 3 SE, reported only because --allow_weak_target was given")
         if t.get("weak") else "") + ".")
  n_seeds = len(report["seeds"])
  if n_seeds < decision_lib.MIN_SEEDS:
    add("seeds", f"{n_seeds} seed key(s): no interval is computed below {decision_lib.MIN_SEEDS}, "
        "so no comparison below can be resolved.", False)
  for name, c in (report["invariance"].get("comparisons") or {}).items():
    a, b = name.split("_minus_")
    direction = ("closer to" if c["difference"] < 0 else "further from")
    add("invariance", f"Invariance, {a} minus {b}: {c['difference']:+.4f} "
        f"{_interval_text(c['ci'])} over {c['n']} seed(s): "
        + (f"resolved, {a} keeps the sample-indexed curves {direction} the reference batch's than {b}"
           if c["resolved"] else "not resolved") + ".", c["resolved"])
  lo, hi = _measured_range(report)
  ratio = report["generation_throughput_ratio"]
  if ratio is not None:
    shares = report["phase_shares"]
    gen = [v["generation"] for v in shares.values() if v.get("generation") is not None]
    end = report["throughput"]
    e2e = end[str(hi)]["responses_per_s"] / end[str(lo)]["responses_per_s"]
    add("throughput", f"Throughput from B = {lo} to {hi} ({report['throughput_source']}"
        + (f", {report['throughput_device']}" if report.get("throughput_device") else "")
        + f"): generation {ratio:.2f}x, end to end {e2e:.2f}x; generation is "
        f"{min(gen):.0%}-{max(gen):.0%} of RL time.")
  pf = (report.get("profile_fits") or {}).get("generation") or {}
  until = pf.get("bandwidth_bound_until_batch")
  if until:
    if pf.get("bandwidth_bound_within_measured", lo <= until <= hi):
      add("throughput", f"Generation's per-row cost equals its fixed cost at B = {until:.0f}, inside "
          f"the measured range {lo}-{hi}: below it generation is bandwidth-bound.")
    else:
      add("throughput", f"The generation cost fit puts the end of the bandwidth-bound regime at "
          f"B = {until:.0f}, outside the measured range {lo}-{hi}: not claimed.")
  for d in report["decisions"]:
    add("decision", f"{d['lr_rule']}: B = {d['candidate']} vs {d['base']}: predicted time ratio "
        f"{_fmt_num(d['predicted_time_ratio'])} {_interval_text(d['time_ratio_ci'])} "
        f"(N* ratio {_fmt_num(d['samples_ratio'])}, q ratio {_fmt_num(d['throughput_ratio'])}, "
        f"{d['n_seeds']} seeds): {d['verdict']}" + (f" ({d['why']})" if d.get("why") else "") + ".",
        d["verdict"] != "unresolved")
  for w, decisions in (report.get("decisions_by_warm_start") or {}).items():
    for d in decisions:
      add("decision_by_warm_start", f"Warm start {w} alone, {d['lr_rule']}: B = {d['candidate']} vs "
          f"{d['base']}: predicted time ratio {_fmt_num(d['predicted_time_ratio'])} "
          f"{_interval_text(d['time_ratio_ci'])} ({d['n_seeds']} seeds): {d['verdict']}"
          + (f" ({d['why']})" if d.get("why") else "") + ".", d["verdict"] != "unresolved")
  batches = sorted({g["batch_size"] for g in report["groups"]})
  for other in ("sqrt", TUNED):
    for batch in batches:
      res = _paired_rule_comparison(report["groups"], report["runs"], "none", other, batch)
      if res is None:
        continue
      if res == "same runs":
        if other == TUNED:
          add("retuning", f"At B = {batch} the tuned LR is none's for every seed: the same runs.")
        continue
      paired, verdict, censored = res
      words = {"faster": "none is faster", "slower": "none is slower",
               "unresolved": "not resolved"}[verdict]
      add("retuning", f"At B = {batch}, without retuning (none) vs {other}: time ratio "
          f"{paired.ratio:.3g} {_interval_text(paired.ci)} over {paired.n} seed(s): "
          f"{words}" + (" (a side is censored)" if censored else "") + ".", verdict != "unresolved")
  e = report.get("tuned_lr_exponent") or {}
  if e.get("exponent") is not None:
    missing = f"(no interval: {e['note']})" if e.get("note") else "(no interval)"
    add("tuned_lr", f"Tuned LR vs batch: exponent {e['exponent']:.2f} "
        f"{_interval_text(e['ci'], missing=missing)} over {e['n']} bracketed batches, optimum "
        "interpolated between grid points, jackknife over seed keys (0 = none, 0.5 = sqrt, "
        "1 = linear)" + (f"; {e['note']}" if e.get("note") and e.get("ci") else "") + ".",
        e.get("ci") is not None)
  elif e:
    add("tuned_lr", f"Tuned LR vs batch: no exponent ({e.get('note')}); not bracketed at B = "
        f"{', '.join(map(str, e.get('unbracketed_batches', []))) or '-'}.", False)
  for rule, fit in report["scaling_fit"].items():
    if "note" in fit:
      add("critical_batch", f"{rule}: {fit['note']}.", False)
    else:
      add("critical_batch", f"{rule}: N*(B) = N_min (1 + B / B_noise) over n = {fit['n']} batch sizes: "
          f"B_noise {_fmt_num(fit.get('b_noise'))} (R^2 {fit['r2']:.2f}, n = {fit['n']}); predicted "
          f"time-optimal batch {_fmt_num(fit.get('predicted_time_optimal_batch'))}, measured best "
          f"{_fmt_num(fit.get('measured_best_batch'))}.", None)
  gns = report["gns"]
  if gns.get("available"):
    parts = [f"{phase.replace('_', ' ')} "
             f"{'inf (noise-dominated)' if p['b_simple'] is None else _fmt_num(p['b_simple'])} "
             f"{_interval_text(p['ci'], missing='(one step: no interval)')}"
             for phase, p in gns["pooled"].items()]
    add("noise_scale", f"B_simple pooled ({gns['unit']}): " + "; ".join(parts) + ".")
  val = report["validation"]
  if val and all(v["source"] == "not run" for v in val):
    add("validation", "Validation not run: no decision's time ratio was measured on runs executed "
        "alone (`python -m rlscale.sweep ... --validate`).", False)
  elif val:
    resolved = [v for v in val if v["measured_verdict"] in ("faster", "slower")]
    agree = sum(v["measured_verdict"] == v["predicted_verdict"] for v in resolved)
    add("validation", f"Validation ({val[0]['source']}): {len(resolved)} of {len(val)} decisions "
        f"resolved on the runs' own clocks, {agree} of them as predicted.",
        bool(resolved) and agree == len(resolved))
  tokens = [v for v in report["response_tokens"].values() if v is not None]
  if tokens:
    add("data", f"Mean response length {min(tokens):.1f}-{max(tokens):.1f} tokens across batches.")
  return out


def _fmt_num(x) -> str:
  if x is None:
    return "-"
  if isinstance(x, str):
    return x
  return f"{x:.3g}"


def _measured_range(report) -> tuple[int, int]:
  measured = sorted(int(b) for b in report["throughput"])
  return (measured[0], measured[-1]) if measured else (0, 0)


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
