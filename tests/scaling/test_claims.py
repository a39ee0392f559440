"""The report's generated claims (rlscale.scaling.claims)."""

import pytest

from rlscale.scaling import claims


def test_rule_comparison_counts_censoring_on_its_paired_seeds_only():
  # none and sqrt at one batch on warm start 0 (3 seeds); sqrt also has a censored run on warm
  # start 1, which none has no twin of: it is not in the ratio and does not censor it.
  runs = [{"name": f"{rule}{s}", "seed_key": [0, s], "samples_lower_bound": n, "censored": False}
          for rule, ns in (("none", (200, 400, 300)), ("sqrt", (100, 200, 100)))
          for s, n in enumerate(ns)]
  runs.append({"name": "sqrt_w1", "seed_key": [1, 0], "samples_lower_bound": 999, "censored": True})
  groups = [{"rule": "none", "batch_size": 8, "runs": ["none0", "none1", "none2"]},
            {"rule": "sqrt", "batch_size": 8, "runs": ["sqrt0", "sqrt1", "sqrt2", "sqrt_w1"]}]
  paired, verdict, censored = claims.paired_rule_comparison(groups, runs, "none", "sqrt", 8)
  # Ratios 2, 2, 3: geometric mean (12)^(1/3).
  assert paired.n == 3 and paired.ratio == pytest.approx(12 ** (1 / 3))
  assert not censored and verdict == "slower"
