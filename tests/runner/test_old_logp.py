"""rl.old_logp in the loop: the sampler's log-probs, or a trainer forward ("recompute") with the
sampler-trainer mismatch (mean k3) logged."""

import types

import jax
import numpy as np
import pytest

from rlscale.runner import update_batch
from rlscale.train import update as update_lib
from tests.train import update_problem as problem


@pytest.mark.parametrize("source", ["sampler", "recompute"])
def test_behaviour_logp(source):
  rl = problem.rl_config("grpo", old_logp=source)
  devices = jax.local_devices()[:1]
  params, _ = problem.initial_params(rl)
  host = problem.host_batch(rl, params, None, devices=devices)
  trainer_logp, mask = host["old_logp"], host["response_mask"]
  # The sampler's log-probs: 0.1 nats below the trainer's on every real token.
  rollout = types.SimpleNamespace(logp=(trainer_logp - 0.1) * mask, response_mask=mask)
  batch = {k: host[k] for k in ("tokens", "input_mask", "response_mask")}
  sharded = update_lib.shard_batch({**batch, "old_logp": rollout.logp}, 1)
  run = types.SimpleNamespace(
      rl_config=rl, logp_fn=update_lib.make_logp_fn(problem.MODEL, rl.temperature, devices=devices))
  state = types.SimpleNamespace(params=update_lib.replicate(params, devices))
  old_logp, stats = update_batch.behaviour_logp(run, state, sharded, rollout)
  if source == "sampler":
    np.testing.assert_array_equal(old_logp, rollout.logp)
    np.testing.assert_array_equal(np.asarray(sharded["old_logp"])[0], rollout.logp)
    assert stats == {}
  else:
    np.testing.assert_allclose(old_logp, trainer_logp, atol=1e-6)
    np.testing.assert_allclose(np.asarray(sharded["old_logp"])[0], trainer_logp, atol=1e-6)
    # d = sampler - trainer = -0.1 on real tokens: k3 = exp(-0.1) + 0.1 - 1 = 0.0048374.
    np.testing.assert_allclose(stats["train/sampler_trainer_k3"], np.exp(-0.1) - 0.9, rtol=1e-4)
