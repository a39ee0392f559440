"""Which runs a comparison is made of: LR-rule groups and the tuned group per batch.

Rows are the report's run rows (`rlscale.scaling.rows`: dicts with name, batch_size,
learning_rate, lr_multiplier, rules, seed_key, samples_lower_bound, final_metric).

LR-rule groups. A run belongs to the group of the rule its config names (optim.lr_scaling) when
its LR multiplier (optim.learning_rate / the sweep's lr0) is 1; the run at the reference batch
with multiplier 1 belongs to every rule's group (every rule gives lr0 there); a grid run
(multiplier != 1) belongs to none, even when its LR equals another rule's value. A rule met at
one batch only compares nothing and is dropped.

Tuned group. Chosen among the grid's rows (`grid_rows`). At each batch, the LR with the lowest mean samples-to-target among every LR tried
there (censored runs at their budget, a lower bound). Picking the best of noisy estimates biases
its N* down (the winner's curse), so the tuned group's N* for seed s is read at the LR chosen on
the *other* seeds (leave-one-seed-out): each reported value is independent of its own selection.
With one seed that is impossible; the choice is then in-sample and labelled so. `bracketed` is
False when the best LR (chosen on all seeds) is the lowest or highest tried, or fewer than 3 LRs
were tried: the optimum may lie outside the grid, so the group is not "tuned".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

LR_RULES = ("none", "sqrt", "sqrt_adam", "linear")
TUNED = "tuned"
MIN_GRID = 3  # learning rates needed to bracket an optimum


def seed_key(row) -> tuple:
  """A row's seed key (warm-start seed, RL seed) as a tuple: rows with one key are paired."""
  return tuple(row["seed_key"])


def rule_memberships(rules_and_multipliers: dict[str, tuple[str, float, bool]]) -> dict[str, list[str]]:
  """{run name: LR rule groups it belongs to} from {name: (its rule, LR multiplier, whether it
  runs at the reference batch)} (module docstring; multiplier compared with rel. tolerance 1e-6)."""
  out = {}
  for name, (rule, multiplier, at_reference) in rules_and_multipliers.items():
    if not math.isclose(multiplier, 1.0, rel_tol=1e-6):
      out[name] = []
    elif at_reference:
      out[name] = list(LR_RULES)
    else:
      out[name] = [rule] if rule in LR_RULES else []
  return out


def rule_groups(rows: Sequence[dict]) -> dict[tuple[str, int], list[dict]]:
  """{(rule, batch): rows} for each LR rule met at two batches or more."""
  groups: dict[tuple[str, int], list[dict]] = {}
  for row in rows:
    for rule in row["rules"]:
      groups.setdefault((rule, row["batch_size"]), []).append(row)
  for rule in LR_RULES:
    if sum(r == rule for r, _ in groups) < 2:
      groups = {k: v for k, v in groups.items() if k[0] != rule}
  return groups


@dataclasses.dataclass
class TunedGroup:
  """The tuned group at one batch (module docstring).

  Attributes:
    batch_size: B, responses per step.
    rows: one row per seed key, each at the LR chosen without that seed.
    learning_rate: the best LR chosen on all seeds (the tuned LR of the batch).
    learning_rates_tried: sorted distinct LRs at this batch.
    bracketed: the best LR lies strictly inside the grid of >= MIN_GRID LRs.
    selection: "leave-one-seed-out" or "in-sample (one seed)".
  """
  batch_size: int
  rows: list
  learning_rate: float
  learning_rates_tried: list
  bracketed: bool
  selection: str


def by_learning_rate(rows: Sequence[dict]) -> dict[float, dict]:
  """{lr: {seed_key (tuple): row}} with LRs equal within rel. tolerance 1e-6 merged; of two runs with the
  same LR and seed key (duplicates the sweep planner would have merged) the first is kept."""
  out: dict[float, dict] = {}
  for row in rows:
    key = next((k for k in out if math.isclose(k, row["learning_rate"], rel_tol=1e-6)),
               row["learning_rate"])
    out.setdefault(key, {}).setdefault(tuple(row["seed_key"]), row)
  return out


def _best(by_lr: dict[float, dict], exclude=None) -> float | None:
  """The LR with the lowest mean N* bound over its rows without seed `exclude` (ties: the higher
  mean final metric), or None when no LR has such rows."""
  scores = {}
  for lr, by_seed in by_lr.items():
    kept = [r for s, r in by_seed.items() if s != exclude]
    if kept:
      scores[lr] = (np.mean([r["samples_lower_bound"] for r in kept]),
                    -np.mean([r["final_metric"] for r in kept]))
  return min(scores, key=scores.get) if scores else None


def tuned_group(rows: Sequence[dict]) -> TunedGroup:
  """The tuned group of the rows at one batch (module docstring). Raises ValueError when empty."""
  if not rows:
    raise ValueError("a tuned group needs at least one run")
  by_lr = by_learning_rate(rows)
  best = _best(by_lr)
  seeds = sorted({tuple(r["seed_key"]) for r in rows})
  tried = sorted(by_lr)
  if len(seeds) < 2:
    chosen, selection = [by_lr[best][seeds[0]]], "in-sample (one seed)"
  else:
    chosen = []
    for seed in seeds:
      eligible = {lr: by_seed for lr, by_seed in by_lr.items() if seed in by_seed}
      lr = _best(eligible, exclude=seed)
      chosen.append(eligible[lr][seed] if lr is not None else eligible[_best(eligible)][seed])
    selection = "leave-one-seed-out"
  bracketed = len(tried) >= MIN_GRID and tried[0] < best < tried[-1]
  return TunedGroup(int(rows[0]["batch_size"]), chosen, float(best), [float(x) for x in tried],
                    bool(bracketed), selection)


def grid_rows(rows: Sequence[dict]) -> list[dict]:
  """The rows the tuned group may choose from: runs of plain Adam (a `sqrt_adam` run also changes
  Adam's betas and eps, so it is another optimizer, not another point of the LR grid), and at each
  batch only the seed keys that ran the whole grid there (as many LRs as any seed key did). A
  seed key run at one LR (a robustness warm start under one rule) would otherwise always be
  "tuned" to that LR when it is left out of the choice, and would weigh on the grid's means at one
  point only. Without a grid (every seed key at the same LRs) every plain-Adam row is kept."""
  plain = [r for r in rows if r.get("lr_rule") != "sqrt_adam"]
  out = []
  for batch in sorted({r["batch_size"] for r in plain}):
    at_batch = [r for r in plain if r["batch_size"] == batch]
    lrs_per_key: dict[tuple, int] = {}
    for by_seed in by_learning_rate(at_batch).values():
      for key in by_seed:
        lrs_per_key[key] = lrs_per_key.get(key, 0) + 1
    whole = max(lrs_per_key.values())
    out += [r for r in at_batch if lrs_per_key[tuple(r["seed_key"])] == whole]
  return out


def tuned_groups(rows: Sequence[dict]) -> dict[int, TunedGroup]:
  """{batch: TunedGroup} for every batch of the rows."""
  batches = sorted({r["batch_size"] for r in rows})
  return {b: tuned_group([r for r in rows if r["batch_size"] == b]) for b in batches}

