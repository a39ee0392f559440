"""A checkpoint written by the pmap layout (rlscale before the mesh, tests/runner/data/pmap_era_run)
restores onto today's mesh and its run resumes to the step the old code reached uninterrupted."""

import os
import shutil

import numpy as np

from rlscale.runner.loop import train_and_evaluate
from rlscale.runner.metrics_log import read_metrics
from tests.runner.runner_configs import comparable, tiny_config

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "pmap_era_run")
RUN_FILES = ("checkpoints", "config.json", "metrics.jsonl", "warm_start_eval.json",
             "warm_start_seconds.json")


def _fixture_config(sft_cache):
  """make.py's config (sft.cache_dir may differ on resume)."""
  return tiny_config(rl__algorithm="ppo", rl__kl_coef=0.05, train__total_steps=4,
                     train__checkpoint_every=2, sft__cache_dir=sft_cache)


def test_a_pmap_era_checkpoint_resumes_to_the_old_uninterrupted_run(tmp_path):
  workdir = tmp_path / "run"
  workdir.mkdir()
  for name in RUN_FILES:
    source = os.path.join(FIXTURE, name)
    (shutil.copytree if os.path.isdir(source) else shutil.copy)(source, workdir / name)
  sft_cache = tmp_path / "sft_cache"
  shutil.copytree(os.path.join(FIXTURE, "sft_cache"), sft_cache)

  summary = train_and_evaluate(_fixture_config(str(sft_cache)), str(workdir))

  assert summary["steps"] == 4
  resumed = comparable(read_metrics(str(workdir / "metrics.jsonl")))
  expected = comparable(read_metrics(os.path.join(FIXTURE, "expected_metrics.jsonl")))
  assert [r["step"] for r in resumed] == [r["step"] for r in expected] == [0, 1, 2, 3, 4]
  for got, want in zip(resumed[3:], expected[3:]):  # the steps the resumed run took
    assert set(got) == set(want)
    for key, value in want.items():
      np.testing.assert_allclose(got[key], value, rtol=2e-4, atol=1e-6, err_msg=key)
