"""The sampler-trainer mismatch the update step logs with rl.old_logp = "sampler"."""

import jax
import numpy as np

from rlscale.train import update_fn
from tests.train import update_problem as problem


def _first_metrics(rl, shift):
  """One update on the problem's batch with old_logp = trainer logp + shift on real tokens."""
  params, _ = problem.initial_params(rl)
  host = problem.host_batch(rl, params, None)
  host["old_logp"] = host["old_logp"] + shift * host["response_mask"]
  tx = problem.make_optimizer(rl)
  fn = update_fn.make_update_fn(problem.MODEL, rl, tx, problem.one_device_mesh())
  _, metrics = fn(problem.placed_state(fn, params, tx), host, jax.random.key(0))
  return {k: float(v) for k, v in jax.device_get(metrics).items()}


def test_sampler_trainer_k3_is_the_first_updates_k3_to_old_logp():
  # 2 epochs x 2 shuffled minibatches: 4 updates. Before the first, the trainer's logp is the
  # problem's old_logp, so with the sampler's 0.1 nats higher on every real token
  # d = old - logp = 0.1 and k3 = exp(0.1) - 0.1 - 1 = 0.0051709, whatever rows come first.
  metrics = _first_metrics(problem.rl_config("grpo", epochs=2, minibatches=2), 0.1)
  np.testing.assert_allclose(metrics["sampler_trainer_k3"], np.exp(0.1) - 1.1, rtol=1e-4)
  # approx_kl_old averages all 4 updates, whose parameters have moved.
  assert metrics["approx_kl_old"] != metrics["sampler_trainer_k3"]


def test_no_sampler_metric_when_old_logp_is_recomputed():
  # With "recompute" the batch's old_logp is the trainer's; the loop logs the mismatch instead.
  metrics = _first_metrics(problem.rl_config("grpo", old_logp="recompute"), 0.0)
  assert "sampler_trainer_k3" not in metrics
