"""LR-rule groups and the tuned group (bracketed, leave-one-seed-out): values by hand."""

import pytest

from rlscale.scaling import groups


def row(name, lr, seed, n, batch=64, final=0.5, censored=False):
  return {"name": name, "batch_size": batch, "learning_rate": lr, "seed_key": [0, seed],
          "samples_lower_bound": n, "final_metric": final, "censored": censored, "rules": []}


def test_best_lr_at_the_edge_of_its_grid_is_not_bracketed():
  rows = [row(f"lr{lr}s{s}", lr, s, n) for s in (0, 1)
          for lr, n in ((1e-4, 100), (2e-4, 200), (4e-4, 400))]
  group = groups.tuned_group(rows)
  assert group.learning_rate == 1e-4 and group.learning_rates_tried == [1e-4, 2e-4, 4e-4]
  assert not group.bracketed


def test_best_lr_inside_the_grid_is_bracketed():
  rows = [row(f"lr{lr}s{s}", lr, s, n) for s in (0, 1)
          for lr, n in ((1e-4, 300), (2e-4, 100), (4e-4, 400))]
  assert groups.tuned_group(rows).bracketed
  # Two LRs cannot bracket an optimum.
  assert not groups.tuned_group([r for r in rows if r["learning_rate"] != 4e-4]).bracketed


def test_leave_one_seed_out_selection_by_hand():
  # N* per (LR, seed):      seed 0  seed 1  seed 2
  #   1e-4                   100     300     300
  #   2e-4                   200     200     200
  # Seed 0 is read at the LR best on seeds 1, 2: 2e-4 (mean 200 < 300), so 200, not its lucky 100.
  # Seed 1: on seeds 0, 2, 1e-4 has mean 200 = 2e-4's 200; ties go to the higher final metric
  # (equal here) then the first LR: 1e-4 -> 300. Seed 2: on seeds 0, 1, means 200 vs 200 -> 300.
  n = {(1e-4, 0): 100, (1e-4, 1): 300, (1e-4, 2): 300, (2e-4, 0): 200, (2e-4, 1): 200,
       (2e-4, 2): 200}
  rows = [row(f"{lr}-{s}", lr, s, v) for (lr, s), v in n.items()]
  group = groups.tuned_group(rows)
  assert group.selection == "leave-one-seed-out"
  assert [r["samples_lower_bound"] for r in group.rows] == [200, 300, 300]
  # In-sample the best LR on all seeds is 2e-4 (mean 200 vs 233): the batch's tuned LR.
  assert group.learning_rate == 2e-4


def test_one_seed_is_chosen_in_sample_and_says_so():
  group = groups.tuned_group([row("a", 1e-4, 0, 100), row("b", 2e-4, 0, 50)])
  assert group.selection == "in-sample (one seed)" and group.rows[0]["name"] == "b"


def test_reference_run_belongs_to_every_rule_and_a_grid_run_to_none():
  got = groups.rule_memberships({"ref": ("none", 1.0, True), "grid": ("sqrt", 0.5, False),
                                 "own": ("sqrt_adam", 1.0, False)})
  assert got == {"ref": ["none", "sqrt", "sqrt_adam", "linear"], "grid": [], "own": ["sqrt_adam"]}


def test_errors():
  with pytest.raises(ValueError, match="at least one run"):
    groups.tuned_group([])


def test_grid_rows_drop_sqrt_adam_and_seed_keys_outside_the_grid():
  # Batch 64: seed keys [0, 0] and [0, 1] ran three LRs, [1, 0] (a second warm start) one, and a
  # sqrt_adam run (another optimizer) sits at the grid's middle LR.
  grid = [row(f"lr{lr}s{s}", lr, s, 100) for s in (0, 1) for lr in (1e-4, 2e-4, 4e-4)]
  robustness = dict(row("w1", 2e-4, 0, 50), seed_key=[1, 0])
  adam = dict(row("adam", 2e-4, 0, 10), lr_rule="sqrt_adam")
  kept = groups.grid_rows(grid + [robustness, adam])
  assert [r["name"] for r in kept] == [r["name"] for r in grid]
  # Without a grid (every seed key at the same two LRs) nothing but sqrt_adam is dropped.
  two = [row(f"lr{lr}s{s}", lr, s, 100, batch=256) for s in (0, 1) for lr in (1e-4, 2e-4)]
  assert groups.grid_rows(two + [dict(adam, batch_size=256)]) == two
