"""Whole responses out of the loss (`rl.masks.mask_rows`): overlong filtering (a truncated response)
and DAPO filler groups give the loss, gradient and update of the batch without those rows."""

import jax
import numpy as np
import pytest

from rlscale.rl import masks
from rlscale.rl.advantages import compute_batch_advantages
from rlscale.train import passes
from rlscale.train import update_fn
from tests.train import update_problem as problem

EOS = 1  # the problem's tokens lie in [3, V): no EOS unless placed


def _batch(rl, params, mesh):
  """The problem's batch with an EOS closing every response but row 5's, which runs to the
  length limit without one (truncated); group 1 (rows 4-7) has equal rewards (zero advantage,
  as a DAPO filler group)."""
  host = problem.rollout_batch(rl.prompts_per_step * rl.group_size, seed=3)
  rewards = host.pop("rewards")
  rewards[4:8] = 1.0  # group 1: all correct, zero group-relative advantage
  response = host["tokens"][:, problem.PROMPT_LEN:]
  host["response_mask"][5] = 1
  host["input_mask"][5, problem.PROMPT_LEN:] = 1
  response[5] = np.where(response[5] == 0, 7, response[5])
  last = host["response_mask"].sum(1) - 1
  rows = np.arange(len(last)) != 5
  response[rows, last[rows]] = EOS
  logp_fn = passes.make_logp_fn(problem.MODEL, rl.temperature, mesh, None)
  host["old_logp"] = np.asarray(logp_fn(params, host))
  host.update({k: np.asarray(v) for k, v in compute_batch_advantages(
      rl, rewards, host["response_mask"], old_logp=host["old_logp"]).items()})
  return host


def _update(rl, params, host, mesh):
  tx = problem.make_optimizer(rl)
  fn = update_fn.make_update_fn(problem.MODEL, rl, tx, mesh)
  state, metrics = fn(problem.placed_state(fn, params, tx), host, jax.random.key(0))
  return (jax.device_get(state).params,
          {k: float(v) for k, v in jax.device_get(metrics).items()})


@pytest.mark.parametrize("case", ["truncated_row", "filler_group"])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_masked_rows_give_the_update_of_the_batch_without_them(case, mode):
  rl = problem.rl_config("dapo", loss_agg_mode=mode, entropy_coef=0.01)
  mesh = problem.one_device_mesh()
  params, _ = problem.initial_params(rl)
  host = _batch(rl, params, mesh)
  response = host["tokens"][:, problem.PROMPT_LEN:]
  truncated = np.asarray(masks.truncated_rows(response, host["response_mask"], (EOS,)))
  np.testing.assert_array_equal(np.flatnonzero(truncated), [5])
  if case == "truncated_row":
    keep = ~truncated
  else:
    keep = np.ones(len(truncated), bool)
    keep[4:8] = False
    np.testing.assert_array_equal(host["advantages"][4:8], 0.0)
  masked = {**host, "response_mask": np.asarray(masks.mask_rows(host["response_mask"], keep))}
  without = {k: v[keep] for k, v in host.items()}
  params_masked, metrics_masked = _update(rl, params, masked, mesh)
  params_without, metrics_without = _update(rl, params, without, mesh)
  for key in ("loss", "pg_loss", "entropy_loss", "entropy", "grad_norm", "approx_kl_old"):
    np.testing.assert_allclose(metrics_masked[key], metrics_without[key], rtol=1e-5, atol=1e-6,
                               err_msg=key)
  # One Adam step moves each parameter by -lr g / (|g| + eps): equal moves mean equal gradients.
  for a, b in zip(jax.tree.leaves(params_masked), jax.tree.leaves(params_without)):
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
  # Left in, the rows change the gradient (a filler group by diluting the denominator).
  _, metrics_all = _update(rl, params, host, mesh)
  assert abs(metrics_all["grad_norm"] / metrics_masked["grad_norm"] - 1) > 1e-3
