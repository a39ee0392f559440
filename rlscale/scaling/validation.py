"""Validation: each decision's predicted time ratio (profile q, sweep N*) beside the one measured
on runs executed alone on the machine, each with its own wall clock to the sustained crossing,
paired over seed keys.
"""

from __future__ import annotations

import os

from rlscale.scaling import decision as decision_lib
from rlscale.scaling.groups import seed_key
from rlscale.scaling.rows import run_row
from rlscale.scaling.run_data import load_run, run_dirs

VALIDATION_DIR = "validation"


def validation_rows(sweep_dir, meta, decisions, groups, memberships, row_args, runs) -> list[dict]:
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
            side_censored.add(seed_key(row))
            continue
          side[seed_key(row)] = val["measured_time_to_target_s"]
      # Censoring counts on seed keys both sides ran only: a base run the candidate has no twin
      # of (e.g. a robustness warm start shared by every rule at B0) is not in the ratio.
      censored = bool((censored_b & (set(t_c) | censored_c)) | (censored_c & set(t_b)))
      paired, _ = decision_lib.paired_positive(t_c, t_b)
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
