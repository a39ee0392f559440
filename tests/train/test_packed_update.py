"""The packed update step equals the padded one: every loss aggregation, GRPO and PPO with its
critic, the KL in the loss, entropy, several minibatches and epochs, any microbatch split; and
the noise scale's small batches are the packed microbatches."""

import jax
import numpy as np
import pytest

from rlscale.packing import layout
from rlscale.packing.plan import pack_rows, stack_plans
from rlscale.parallel import data as data_lib
from rlscale.train import passes
from tests.train import update_problem as problem

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


def _max_diff(a, b):
  return max(float(np.max(np.abs(x - y))) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _plan(host, rl, key, **packing):
  return layout.update_plan(host["input_mask"], host["response_mask"].shape[1], key, rl,
                            **packing)


def _padded_and_packed(rl, steps: int = 2, **packing):
  """(padded, packed): (host state, metrics of each step) of `steps` updates from the same
  start on the problem's batch."""
  results = []
  for packed in (False, True):
    fn, state, host = problem.setup(rl)
    batch = data_lib.global_batch(host, problem.one_device_mesh())
    history = []
    for i in range(steps):
      key = jax.random.key(100 + i)
      plan = _plan(host, rl, key, **packing).arrays() if packed else None
      state, metrics = fn(state, batch, key, plan)
      history.append(jax.device_get(metrics))
    results.append((jax.device_get(state), history))
  return results


def _assert_same(padded, packed, skip=()):
  (state_a, metrics_a), (state_b, metrics_b) = padded, packed
  assert _max_diff(state_a.params, state_b.params) < 1e-5
  if state_a.critic_params is not None:
    assert _max_diff(state_a.critic_params, state_b.critic_params) < 1e-5
  for a, b in zip(metrics_a, metrics_b):
    assert set(a) == set(b)
    for key in set(a) - set(skip):
      np.testing.assert_allclose(b[key], a[key], rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("mode", MODES)
def test_grpo_every_aggregation_with_minibatches_and_epochs(mode):
  rl = problem.rl_config("grpo", kl_coef=0.1, loss_agg_mode=mode, minibatches=2, epochs=2,
                         entropy_coef=0.01)
  _assert_same(*_padded_and_packed(rl, width=16))


def test_ppo_with_its_critic_split_by_a_token_budget():
  rl = problem.rl_config("ppo", kl_coef=0.1)
  padded, packed = _padded_and_packed(rl, width=12, max_tokens_per_microbatch=36)
  # The microbatches differ (4 padded slices, packed ones by the budget): the small batches too.
  _assert_same(padded, packed, skip=("gns_grad_sq_small", "gns_batch_small"))


def test_kl_in_the_reward_and_rows_wider_than_every_sequence():
  rl = problem.rl_config("grpo", kl_coef=0.1, kl_mode="reward", microbatches=1)
  _assert_same(*_padded_and_packed(rl, width=40))


def test_the_small_batches_are_the_packed_microbatches():
  """gns_grad_sq_small is the mean over the packed microbatches of |grad|^2 of each one's own
  mean loss: that of a step over the microbatch's sequences alone."""
  rl = problem.rl_config("grpo", microbatches=None)
  fn, state, host = problem.setup(rl)
  key = jax.random.key(0)
  plan = _plan(host, rl, key, width=22, max_tokens_per_microbatch=66)
  assert plan.microbatches >= 2
  batch = data_lib.global_batch(host, problem.one_device_mesh())
  _, metrics = fn(state, batch, key, plan.arrays())
  params, _ = problem.initial_params(rl)
  tx = problem.make_optimizer(rl)
  own = []
  for k in range(plan.microbatches):
    sources = plan.token_src[0, k][plan.token_src[0, k] >= 0]
    rows = np.unique(sources // host["tokens"].shape[1]).astype(np.int32)
    alone = stack_plans([pack_rows(host["input_mask"], host["response_mask"].shape[1], rows,
                                   width=22, rows_per_microbatch=len(rows))], rows[None])
    _, alone_metrics = fn(problem.placed_state(fn, params, tx), batch, key, alone.arrays())
    own.append(float(alone_metrics["grad_norm"]) ** 2)
  np.testing.assert_allclose(float(metrics["gns_grad_sq_small"]), np.mean(own), rtol=1e-4)
  assert float(metrics["gns_batch_small"]) == host["tokens"].shape[0] // plan.microbatches


@pytest.mark.parametrize("value_pass", [False, True])
def test_packed_passes_equal_padded(value_pass):
  rl = problem.rl_config("ppo")
  params, critic = problem.initial_params(rl)
  host = problem.rollout_batch(16, seed=1)
  mesh = problem.one_device_mesh()
  for packing in (layout.Packing(11), layout.Packing(24, 48)):
    if value_pass:
      make = lambda **kw: passes.make_value_fn(problem.MODEL, mesh, None, **kw)  # noqa: E731
      weights = critic
    else:
      make = lambda **kw: passes.make_logp_fn(problem.MODEL, 0.7, mesh, None, **kw)  # noqa: E731
      weights = params
    padded = np.asarray(make()(weights, host))
    packed = np.asarray(make(packing=packing)(weights, host))
    np.testing.assert_allclose(packed, padded, rtol=1e-5, atol=1e-5)
    assert (packed[host["response_mask"] == 0] == 0).all()
