"""The update step of a model with experts: the loss adds router_aux_loss_coef x the
load-balancing loss (mean over the microbatches), its gradient reaches the router, and
moe/aux_loss and moe/expert_load_max are logged."""

import jax
import jax.numpy as jnp
import numpy as np

from rlscale.model import moe
from rlscale.model.config import ModelConfig
from rlscale.model import transformer as tfm
from rlscale.model.transformer import forward, init_params
from rlscale.rl.advantages import compute_batch_advantages
from rlscale.rl.aggregation import aggregate_loss
from rlscale.rl.logprob import response_logp, response_positions
from rlscale.rl.losses import ppo_clip
from rlscale.train import state as state_lib
from rlscale.train import update as update_lib
from tests.train import update_problem as problem

COEF = 0.5  # large, so the aux term moves the loss well above float noise
MODEL = ModelConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_layers=2,
                    num_heads=4, num_kv_heads=2, head_dim=8, num_experts=4,
                    num_experts_per_tok=2, moe_intermediate_size=16, norm_topk_prob=True,
                    router_aux_loss_coef=COEF, moe_dispatch="ragged")


def _setup(rl, model):
  tx = problem.make_optimizer(rl)
  params = init_params(model, jax.random.key(0))
  host = problem.rollout_batch(rl.prompts_per_step * rl.group_size)
  rewards = host.pop("rewards")
  sharded = update_lib.shard_batch(host, 1)
  logp_fn = update_lib.make_logp_fn(model, rl.temperature, devices=jax.local_devices()[:1])
  host["old_logp"] = np.asarray(logp_fn(update_lib.replicate(params, jax.local_devices()[:1]),
                                        sharded)).reshape(host["response_mask"].shape)
  host.update({k: np.asarray(v) for k, v in compute_batch_advantages(
      rl, rewards, host["response_mask"], old_logp=host["old_logp"]).items()})
  state = update_lib.replicate(state_lib.create_train_state(params, tx), jax.local_devices()[:1])
  fn = update_lib.make_update_fn(model, rl, tx, devices=jax.local_devices()[:1])
  return fn, state, host, params


def test_loss_adds_the_aux_term_over_microbatches_and_logs_the_load():
  rl = problem.rl_config("dapo", microbatches=2)  # token-mean, clip-higher, no KL
  fn, state, host, params = _setup(rl, MODEL)
  mask = host["response_mask"]
  tr = mask.shape[1]
  window = response_positions(host["tokens"].shape[1], tr)
  half = mask.shape[0] // 2

  def loss_fn(p):
    logits = forward(p, MODEL, host["tokens"], host["input_mask"]).logits
    logp = response_logp(logits, host["tokens"], tr, rl.temperature)
    adv = jnp.broadcast_to(host["advantages"][:, None], logp.shape)
    token_loss, _ = ppo_clip(logp, host["old_logp"], adv, mask, clip_eps_low=0.2,
                             clip_eps_high=0.28)
    # The update's microbatches are the batch's halves; each adds its own forward's aux loss.
    auxes = [moe.load_balancing_loss(
        forward(p, MODEL, host["tokens"][s], host["input_mask"][s], head=False,
                outputs=window).moe, MODEL.num_experts)
             for s in (slice(0, half), slice(half, None))]
    aux = (auxes[0] + auxes[1]) / 2
    # The update's forward computes the last layer at the response-predicting positions only.
    stats = forward(p, MODEL, host["tokens"], host["input_mask"], head=False, outputs=window).moe
    return aggregate_loss(token_loss, mask, "token-mean") + COEF * aux, (aux, stats)

  (loss, (aux, stats)), grads = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(params)
  _, metrics = fn(state, update_lib.shard_batch(host, 1), jax.random.key(0))
  np.testing.assert_allclose(metrics["moe/aux_loss"][0], aux, rtol=1e-5)
  np.testing.assert_allclose(metrics["loss"][0], loss, rtol=1e-5, atol=1e-7)
  assert COEF * aux > 0.5  # the aux term is a large part of the loss (>= k * coef = 1)
  grad_norm = float(jnp.sqrt(sum(jnp.sum(g ** 2) for g in jax.tree.leaves(grads))))
  np.testing.assert_allclose(metrics["grad_norm"][0], grad_norm, rtol=1e-5)
  # The assignments of the whole batch, from the forward's per-layer counts.
  np.testing.assert_allclose(metrics["moe/expert_load_max"][0],
                             moe.expert_load_max(stats.expert_tokens), rtol=1e-6)


def test_coefficient_zero_removes_the_term_and_its_router_gradient():
  rl = problem.rl_config("dapo", microbatches=1)
  with_aux = _setup(rl, MODEL)
  without = _setup(rl, MODEL.replace(router_aux_loss_coef=0.0))
  m1 = with_aux[0](with_aux[1], update_lib.shard_batch(with_aux[2], 1), jax.random.key(0))[1]
  m0 = without[0](without[1], update_lib.shard_batch(without[2], 1), jax.random.key(0))[1]
  np.testing.assert_allclose(m1["moe/aux_loss"], m0["moe/aux_loss"], rtol=1e-6)
  np.testing.assert_allclose(m1["loss"] - m0["loss"], COEF * m0["moe/aux_loss"], rtol=1e-4)
  np.testing.assert_allclose(m1["pg_loss"], m0["pg_loss"], rtol=1e-6)
  assert m1["grad_norm"][0] != m0["grad_norm"][0]


def _own_response_experts(params, host):
  """The trainer's experts [B, Tr, L_moe, k] at the positions predicting the response tokens."""
  tr = host["response_mask"].shape[1]
  out = forward(params, MODEL, host["tokens"], host["input_mask"], head=False,
                outputs=response_positions(host["tokens"].shape[1], tr))
  return np.asarray(jnp.transpose(out.moe.experts, (1, 2, 0, 3)))


def test_routing_mismatch_is_logged_and_routing_replay_removes_it():
  """moe/routing_mismatch compares the batch's sampler_experts with the first update's routing:
  0 for the trainer's own choices, 1 when every layer of every token chose another set (each
  expert index + 1 mod E); replaying those ("routing") makes the trainer use them: 0 again,
  and a different loss, the same as the one-device loss of a forward with that routing."""
  rl = problem.rl_config("dapo", microbatches=2)
  fn, state, host, params = _setup(rl, MODEL)
  own = _own_response_experts(params, host)
  other = (own + 1) % MODEL.num_experts

  def metrics(**extra):
    batch = update_lib.shard_batch({**host, **extra}, 1)
    return jax.tree.map(lambda x: float(x[0]), fn(jax.tree.map(jnp.copy, state), batch,
                                                 jax.random.key(0))[1])

  plain = metrics()
  assert "moe/routing_mismatch" not in plain
  assert metrics(sampler_experts=own)["moe/routing_mismatch"] == 0.0
  assert metrics(sampler_experts=other)["moe/routing_mismatch"] == 1.0
  replayed = metrics(sampler_experts=other, routing=other)
  assert replayed["moe/routing_mismatch"] == 0.0
  assert abs(replayed["loss"] - plain["loss"]) > 1e-4
  # The replayed forward's own loss, by hand (token-mean clipped loss + coef x aux loss of each
  # microbatch, the batch's halves).
  mask = host["response_mask"]
  tr = mask.shape[1]
  routing = tfm.replay_window(jnp.asarray(other), host["tokens"].shape[1])
  window = response_positions(host["tokens"].shape[1], tr)
  half = mask.shape[0] // 2
  logits = forward(params, MODEL, host["tokens"], host["input_mask"], routing=routing).logits
  logp = response_logp(logits, host["tokens"], tr, rl.temperature)
  adv = jnp.broadcast_to(host["advantages"][:, None], logp.shape)
  token_loss, _ = ppo_clip(logp, host["old_logp"], adv, mask, clip_eps_low=0.2, clip_eps_high=0.28)
  aux = sum(moe.load_balancing_loss(
      forward(params, MODEL, host["tokens"][s], host["input_mask"][s], head=False, outputs=window,
              routing=routing[s]).moe, MODEL.num_experts) for s in (slice(0, half), slice(half, None)))
  expected = aggregate_loss(token_loss, mask, "token-mean") + COEF * aux / 2
  np.testing.assert_allclose(replayed["loss"], expected, rtol=1e-5, atol=1e-7)
