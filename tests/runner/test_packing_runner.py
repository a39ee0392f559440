"""A run with sequence packing (train.max_tokens_per_row) records what the padded run records:
the same rewards, losses and gradient norms, step by step, through the reference and behaviour
passes and the update."""

import json
import os

import numpy as np

from rlscale.runner.loop import train_and_evaluate
from tests.runner.runner_configs import comparable, tiny_config


def _records(workdir, sft_cache, **overrides):
  # Packed, the passes and the update sum in another order: float noise, which Adam blows up to
  # a whole step where the true gradient is 0 (the tiny run's rewards are all 0 and its policy
  # starts at the reference), so an entropy bonus gives every step a real gradient.
  config = tiny_config(rl__kl_coef=0.05, rl__entropy_coef=0.01, rl__old_logp="recompute",
                       rl__minibatches=2,
                       sft__cache_dir=str(sft_cache), **overrides)
  train_and_evaluate(config, str(workdir))
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return comparable([json.loads(line) for line in f])


def test_packed_run_records_the_padded_runs_metrics(tmp_path):
  padded = _records(tmp_path / "padded", tmp_path)
  packed = _records(tmp_path / "packed", tmp_path, train__max_tokens_per_row=48,
                    train__max_tokens_per_microbatch=96)
  assert len(packed) == len(padded) >= 4
  far = []
  for a, b in zip(padded, packed):
    assert set(a) == set(b)
    for key, value in a.items():
      if not isinstance(value, float):
        assert b[key] == value, key
      elif not key.startswith("train/gns_") and not np.isclose(b[key], value, rtol=1e-4,
                                                               atol=1e-5):
        far.append((a.get("step"), key, value, b[key]))
  assert not far
