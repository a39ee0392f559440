"""rl.old_logp in the loop: the sampler's log-probs, or a trainer forward ("recompute") with the
sampler-trainer mismatch (mean k3) logged."""

import types

import numpy as np
import pytest

from rlscale.parallel.data import global_batch
from rlscale.runner import update_batch
from rlscale.train import passes
from tests.train import update_problem as problem


@pytest.mark.parametrize("source", ["sampler", "recompute"])
def test_behaviour_logp(source):
  rl = problem.rl_config("grpo", old_logp=source)
  mesh = problem.one_device_mesh()
  params, _ = problem.initial_params(rl)
  host = problem.host_batch(rl, params, None)
  trainer_logp, mask = host["old_logp"], host["response_mask"]
  # The sampler's log-probs: 0.1 nats below the trainer's on every real token.
  sampler_logp = (trainer_logp - 0.1) * mask
  placed = global_batch({**{k: host[k] for k in ("tokens", "input_mask", "response_mask")},
                                "old_logp": sampler_logp}, mesh)
  trainer = types.SimpleNamespace(logp=passes.make_logp_fn(problem.MODEL, rl.temperature, mesh, None))
  run = types.SimpleNamespace(rl_config=rl, trainer=trainer)
  stats = update_batch.behaviour_logp(run, types.SimpleNamespace(params=params), placed)
  if source == "sampler":
    np.testing.assert_array_equal(np.asarray(placed["old_logp"]), sampler_logp)
    assert stats == {}
  else:
    np.testing.assert_allclose(np.asarray(placed["old_logp"]), trainer_logp, atol=1e-6)
    # d = sampler - trainer = -0.1 on real tokens: k3 = exp(-0.1) + 0.1 - 1 = 0.0048374.
    np.testing.assert_allclose(stats["train/sampler_trainer_k3"], np.exp(-0.1) - 0.9, rtol=1e-4)
