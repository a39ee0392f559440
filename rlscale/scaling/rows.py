"""The report's rows: one per run (samples-to-target, sustained and first, censoring,
time-to-target from q and from the run's own clock; the LR-rule groups it belongs to) and one per
(LR rule, batch) group (N* over seeds with its t interval, T = N*/q, the tuned group's grid).
They are runs.csv and groups.csv; every later analysis reads them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rlscale.scaling import curves as curves_lib
from rlscale.scaling import decision as decision_lib
from rlscale.scaling import groups as groups_lib
from rlscale.scaling.groups import TUNED
from rlscale.scaling.run_data import RunData
from rlscale.scaling.throughput_model import Throughput


def lr_multiplier(run: RunData, base_lr: float) -> float:
  """The run's optim.learning_rate over the sweep's base learning rate lr0 (from its config.json):
  1 for a rule's own run, the grid factor (e.g. 0.5, 2) for a run of an LR grid."""
  return float(run.get("optim.learning_rate")) / base_lr


def rule_memberships(runs: Sequence[RunData], base_lr: float, reference_batch: int) -> dict[str, list[str]]:
  """{run name: LR rule groups it belongs to} (rlscale.scaling.groups, "LR-rule groups")."""
  return groups_lib.rule_memberships({
      run.name: (run.get("optim.lr_scaling"), lr_multiplier(run, base_lr),
                 run.update_batch == reference_batch) for run in runs})


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


def group_stats(groups, tuned, throughput) -> list[dict]:
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
