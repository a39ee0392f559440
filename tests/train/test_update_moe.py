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
from rlscale.train import passes
from rlscale.train import update_fn
from tests.train import update_problem as problem

COEF = 0.5  # large, so the aux term moves the loss well above float noise
MODEL = ModelConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_layers=2,
                    num_heads=4, num_kv_heads=2, head_dim=8, num_experts=4,
                    num_experts_per_tok=2, moe_intermediate_size=16, norm_topk_prob=True,
                    router_aux_loss_coef=COEF, moe_dispatch="ragged")
# The two microbatches of the 16-row batch (P 4 x G 4): the groups 0, 2 and 1, 3
# (`update.interleaved_slices` of whole groups).
HALVES = (np.r_[0:4, 8:12], np.r_[4:8, 12:16])


def _setup(rl, model):
  tx = problem.make_optimizer(rl)
  params = init_params(model, jax.random.key(0))
  host = problem.rollout_batch(rl.prompts_per_step * rl.group_size)
  rewards = host.pop("rewards")
  mesh = problem.one_device_mesh()
  host["old_logp"] = np.asarray(passes.make_logp_fn(model, rl.temperature, mesh, None)(params, host))
  host.update({k: np.asarray(v) for k, v in compute_batch_advantages(
      rl, rewards, host["response_mask"], old_logp=host["old_logp"]).items()})
  fn = update_fn.make_update_fn(model, rl, tx, mesh)
  return fn, problem.placed_state(fn, params, tx), host, params


def test_loss_adds_the_aux_term_over_microbatches_and_logs_the_load():
  rl = problem.rl_config("dapo", microbatches=2)  # token-mean, clip-higher, no KL
  fn, state, host, params = _setup(rl, MODEL)
  mask = host["response_mask"]
  tr = mask.shape[1]
  window = response_positions(host["tokens"].shape[1], tr)

  def loss_fn(p):
    logits = forward(p, MODEL, host["tokens"], host["input_mask"]).logits
    logp = response_logp(logits, host["tokens"], tr, rl.temperature)
    adv = jnp.broadcast_to(host["advantages"][:, None], logp.shape)
    token_loss, _ = ppo_clip(logp, host["old_logp"], adv, mask, clip_eps_low=0.2,
                             clip_eps_high=0.28)
    # The update's microbatches are the groups (of 4 rows) 0, 2 and 1, 3; each adds its own
    # forward's aux loss.
    auxes = [moe.load_balancing_loss(
        forward(p, MODEL, host["tokens"][s], host["input_mask"][s], head=False,
                outputs=window).moe, MODEL.num_experts)
             for s in HALVES]
    aux = (auxes[0] + auxes[1]) / 2
    # The update's forward computes the last layer at the response-predicting positions only.
    stats = forward(p, MODEL, host["tokens"], host["input_mask"], head=False, outputs=window).moe
    return aggregate_loss(token_loss, mask, "token-mean") + COEF * aux, (aux, stats)

  (loss, (aux, stats)), grads = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(params)
  _, metrics = fn(state, host, jax.random.key(0))
  np.testing.assert_allclose(metrics["moe/aux_loss"], aux, rtol=1e-5)
  np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-5, atol=1e-7)
  assert COEF * aux > 0.5  # the aux term is a large part of the loss (>= k * coef = 1)
  grad_norm = float(jnp.sqrt(sum(jnp.sum(g ** 2) for g in jax.tree.leaves(grads))))
  np.testing.assert_allclose(metrics["grad_norm"], grad_norm, rtol=1e-5)
  # The assignments of the whole batch, from the forward's per-layer counts.
  np.testing.assert_allclose(metrics["moe/expert_load_max"],
                             moe.expert_load_max(stats.expert_tokens), rtol=1e-6)


def test_coefficient_zero_removes_the_term_and_its_router_gradient():
  rl = problem.rl_config("dapo", microbatches=1)
  with_aux = _setup(rl, MODEL)
  without = _setup(rl, MODEL.replace(router_aux_loss_coef=0.0))
  m1 = with_aux[0](with_aux[1], with_aux[2], jax.random.key(0))[1]
  m0 = without[0](without[1], without[2], jax.random.key(0))[1]
  np.testing.assert_allclose(m1["moe/aux_loss"], m0["moe/aux_loss"], rtol=1e-6)
  np.testing.assert_allclose(m1["loss"] - m0["loss"], COEF * m0["moe/aux_loss"], rtol=1e-4)
  np.testing.assert_allclose(m1["pg_loss"], m0["pg_loss"], rtol=1e-6)
  assert m1["grad_norm"] != m0["grad_norm"]


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
    return jax.tree.map(float, fn(jax.tree.map(jnp.copy, state), {**host, **extra},
                                  jax.random.key(0))[1])

  plain = metrics()
  assert "moe/routing_mismatch" not in plain
  assert metrics(sampler_experts=own)["moe/routing_mismatch"] == 0.0
  assert metrics(sampler_experts=other)["moe/routing_mismatch"] == 1.0
  replayed = metrics(sampler_experts=other, routing=other)
  assert replayed["moe/routing_mismatch"] == 0.0
  assert abs(replayed["loss"] - plain["loss"]) > 1e-4
  # The replayed forward's own loss, by hand (token-mean clipped loss + coef x aux loss of each
  # microbatch, the groups 0, 2 and 1, 3).
  mask = host["response_mask"]
  tr = mask.shape[1]
  routing = tfm.replay_window(jnp.asarray(other), host["tokens"].shape[1])
  window = response_positions(host["tokens"].shape[1], tr)
  logits = forward(params, MODEL, host["tokens"], host["input_mask"], routing=routing).logits
  logp = response_logp(logits, host["tokens"], tr, rl.temperature)
  adv = jnp.broadcast_to(host["advantages"][:, None], logp.shape)
  token_loss, _ = ppo_clip(logp, host["old_logp"], adv, mask, clip_eps_low=0.2, clip_eps_high=0.28)
  aux = sum(moe.load_balancing_loss(
      forward(params, MODEL, host["tokens"][s], host["input_mask"][s], head=False, outputs=window,
              routing=routing[s]).moe, MODEL.num_experts) for s in HALVES)
  expected = aggregate_loss(token_loss, mask, "token-mean") + COEF * aux / 2
  np.testing.assert_allclose(replayed["loss"], expected, rtol=1e-5, atol=1e-7)
