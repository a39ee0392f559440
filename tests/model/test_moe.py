"""The mixture-of-experts feed-forward: router and aux loss by hand, both dispatches against a
per-token numpy loop, the MoE config's checks and counts, the MoE transformer's forward."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.model import attention, moe
from rlscale.model import transformer as tfm
from rlscale.model.config import ModelConfig

# 2 tokens, 4 experts: softmax(log p) = p, so the probabilities are the hand-written ones.
PROBS = np.array([[0.4, 0.3, 0.2, 0.1], [0.5, 0.1, 0.3, 0.1]])
LOGITS = jnp.log(jnp.asarray(PROBS, jnp.float32))


def _stats(experts, probs, mask):
  """MoEStats of one layer from experts [N, k], probs [N, E], mask [N] (numpy, by counting)."""
  e = probs.shape[1]
  counts = np.zeros(e)
  for row, m in zip(experts, mask):
    for j in row:
      counts[j] += m
  return moe.MoEStats(jnp.asarray(counts[None], jnp.float32),
                      jnp.asarray((probs * mask[:, None]).sum(0)[None], jnp.float32),
                      jnp.asarray([mask.sum()], jnp.float32), jnp.asarray(experts[None, None]))


def test_router_top2_by_hand():
  weights, experts, probs = moe.route(LOGITS, 2, norm_topk_prob=True)
  np.testing.assert_array_equal(experts, [[0, 1], [0, 2]])
  # p_top / sum p_top: 0.4 / 0.7, 0.3 / 0.7 and 0.5 / 0.8, 0.3 / 0.8.
  np.testing.assert_allclose(weights, [[4 / 7, 3 / 7], [5 / 8, 3 / 8]], rtol=1e-6)
  np.testing.assert_allclose(probs, PROBS, rtol=1e-6)
  raw, _, _ = moe.route(LOGITS, 2, norm_topk_prob=False)
  np.testing.assert_allclose(raw, [[0.4, 0.3], [0.5, 0.3]], rtol=1e-6)


def test_load_balancing_loss_by_hand():
  # Assignments per expert (2, 1, 1, 0) over 2 rows: f = (1, .5, .5, 0); mean probabilities
  # P = (.45, .2, .25, .1); aux = 4 * (.45 + .1 + .125 + 0) = 2.7.
  experts = np.array([[0, 1], [0, 2]])
  stats = _stats(experts, PROBS, np.array([1.0, 1.0]))
  np.testing.assert_allclose(moe.load_balancing_loss(stats, 4), 2.7, rtol=1e-6)
  # Token 1 masked out: f = (1, 1, 0, 0), P = (.4, .3, .2, .1): aux = 4 * .7 = 2.8.
  masked = _stats(experts, PROBS, np.array([1.0, 0.0]))
  np.testing.assert_allclose(moe.load_balancing_loss(masked, 4), 2.8, rtol=1e-6)
  # Expert 0 takes 2 of the 4 assignments: E * 2/4 = 2.
  np.testing.assert_allclose(moe.expert_load_max(stats.expert_tokens), 2.0)
  # Pooled over two layers (HF's form): the counts and probabilities add before the product.
  both = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), stats, masked)
  f = np.array([3, 2, 1, 0]) / 3
  p = (PROBS.sum(0) + PROBS[0]) / 3
  np.testing.assert_allclose(moe.load_balancing_loss(both, 4), 4 * np.sum(f * p), rtol=1e-6)


def test_aux_loss_gradient_reaches_the_probabilities_only():
  def aux(logits):
    weights, experts, probs = moe.route(logits, 2, True)
    counts = jnp.sum(jax.nn.one_hot(experts, 4), axis=1)
    stats = moe.MoEStats(counts.sum(0)[None], probs.sum(0)[None], jnp.array([2.0]), experts[None])
    return moe.load_balancing_loss(stats, 4)

  grad = jax.grad(aux)(LOGITS)
  # d aux / d P_e = E * f_e / rows through the softmax: E * f . dsoftmax / 2.
  f = np.array([1.0, 0.5, 0.5, 0.0])
  expected = np.stack([4 * f / 2 @ (np.diag(p) - np.outer(p, p)) for p in PROBS])
  np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-7)


def _experts(seed, e=4, h=6, i=5):
  rng = np.random.default_rng(seed)
  return [jnp.asarray(rng.standard_normal(s) / np.sqrt(s[1]), jnp.float32)
          for s in ((e, h, i), (e, h, i), (e, i, h))]


def _loop_reference(x, weights, experts, gate, up, down):
  """sum_j w[n, j] * down_e(silu(gate_e x_n) * up_e x_n), token by token in numpy float64."""
  x, weights, gate, up, down = (np.asarray(a, np.float64) for a in (x, weights, gate, up, down))
  out = np.zeros_like(x)
  for n in range(x.shape[0]):
    for j, e in enumerate(np.asarray(experts)[n]):
      g = x[n] @ gate[e]
      out[n] += weights[n, j] * ((g / (1 + np.exp(-g)) * (x[n] @ up[e])) @ down[e])
  return out


@pytest.mark.parametrize("dispatch", [moe.dense_dispatch, moe.ragged_dispatch])
def test_dispatch_equals_a_per_token_loop(dispatch):
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.standard_normal((9, 6)), jnp.float32)
  # Expert 3 gets no token: an empty group in ragged_dot.
  logits = jnp.asarray(rng.standard_normal((9, 4)), jnp.float32).at[:, 3].set(-30.0)
  weights, experts, _ = moe.route(logits, 2, True)
  gate, up, down = _experts(2)
  got = dispatch(x, weights, experts, gate, up, down)
  np.testing.assert_allclose(got, _loop_reference(x, weights, experts, gate, up, down),
                             rtol=1e-5, atol=1e-5)


def test_ragged_and_dense_gradients_agree():
  rng = np.random.default_rng(3)
  x = jnp.asarray(rng.standard_normal((16, 6)), jnp.float32)
  weights, experts, _ = moe.route(jnp.asarray(rng.standard_normal((16, 4)), jnp.float32), 2, True)
  kernels = _experts(4)
  grads = [jax.grad(lambda x, *k: jnp.sum(jnp.sin(fn(x, weights, experts, *k))),
                    argnums=(0, 1, 2, 3))(x, *kernels)
           for fn in (moe.dense_dispatch, moe.ragged_dispatch)]
  for a, b in zip(*grads):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_grouped_matmul_under_vmap_equals_ragged_dot_per_row_and_its_gradients():
  rng = np.random.default_rng(6)
  x = jnp.asarray(rng.standard_normal((2, 6, 4)), jnp.float32)
  w = jnp.asarray(rng.standard_normal((3, 4, 5)), jnp.float32)
  sizes = jnp.array([[2, 1, 3], [0, 4, 2]], jnp.int32)  # an empty group in row 1

  def batched(x, w):
    return jnp.sum(jnp.sin(jax.vmap(moe.grouped_matmul, in_axes=(0, None, 0))(x, w, sizes)))

  def per_row(x, w):
    return sum(jnp.sum(jnp.sin(jax.lax.ragged_dot(x[i], w, sizes[i]))) for i in range(2))

  np.testing.assert_allclose(batched(x, w), per_row(x, w), rtol=1e-6)
  for a, b in zip(jax.grad(batched, (0, 1))(x, w), jax.grad(per_row, (0, 1))(x, w)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_resolve_dispatch():
  assert moe.resolve_dispatch("auto", "cpu") == moe.DISPATCH_AUTO_CPU == "dense"
  assert moe.resolve_dispatch("auto", "gpu") == "ragged"
  assert moe.resolve_dispatch("ragged", "cpu") == "ragged"
  with pytest.raises(ValueError, match="moe_dispatch"):
    moe.resolve_dispatch("megablox")


MOE = dict(vocab_size=40, hidden_size=16, intermediate_size=24, num_layers=4, num_heads=2,
           num_kv_heads=1, head_dim=8, num_experts=4, num_experts_per_tok=2,
           moe_intermediate_size=12)


@pytest.mark.parametrize("field, value", [
    ("num_experts", -1), ("num_experts_per_tok", 5), ("num_experts_per_tok", 0),
    ("moe_intermediate_size", 0), ("decoder_sparse_step", 0), ("mlp_only_layers", (4,)),
    ("mlp_only_layers", ("a",)), ("norm_topk_prob", 1), ("router_aux_loss_coef", -0.1),
    ("moe_dispatch", "megablox")])
def test_bad_moe_fields_name_the_field(field, value):
  with pytest.raises(ValueError, match=f"model.{field}"):
    ModelConfig(**{**MOE, field: value})


def test_moe_layers_and_parameter_counts():
  config = ModelConfig(**MOE, decoder_sparse_step=2, mlp_only_layers=[3])
  assert config.mlp_only_layers == (3,)
  assert config.moe_layers == (1,)  # (i + 1) % 2 == 0 -> 1, 3; 3 is mlp-only
  shapes = jax.eval_shape(lambda k: tfm.init_params(config, k), jax.random.key(0))
  assert sum(x.size for x in jax.tree.leaves(shapes)) == config.num_params()
  assert shapes["layers_1"]["mlp"]["experts"]["gate_proj"].shape == (4, 16, 12)
  assert shapes["layers_1"]["mlp"]["experts"]["down_proj"].shape == (4, 12, 16)
  assert shapes["layers_1"]["mlp"]["gate"]["kernel"].shape == (16, 4)
  assert "experts" not in shapes["layers_0"]["mlp"]
  # Active: the k = 2 of 4 experts a token uses, 2 * 3 * 16 * 12 parameters fewer.
  assert config.num_params() - config.num_params(active=True) == 2 * 3 * 16 * 12
  dense = config.replace(num_experts=0)
  assert dense.moe_layers == ()
  assert config.flops_per_token(10) - dense.flops_per_token(10) == 2 * (
      16 * 4 + 2 * 3 * 16 * 12 - 3 * 16 * 24)


def _tokens():
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(0, 40, (2, 7)), jnp.int32)
  mask = jnp.asarray([[0, 0, 1, 1, 1, 1, 1], [1] * 7], jnp.int32)
  return tokens, mask


def test_moe_transformer_dispatches_agree_and_stats_count_real_tokens(random_params):
  config = ModelConfig(**MOE, decoder_sparse_step=2, moe_dispatch="dense")
  params = random_params(config)
  tokens, mask = _tokens()
  dense = tfm.forward(params, config, tokens, mask)
  ragged = tfm.forward(params, config.replace(moe_dispatch="ragged"), tokens, mask)
  np.testing.assert_allclose(dense.logits, ragged.logits, rtol=1e-5, atol=1e-5)
  stats = dense.moe
  assert stats.expert_tokens.shape == (2, 4) and stats.experts.shape == (2, 2, 7, 2)
  np.testing.assert_array_equal(stats.rows, [12.0, 12.0])  # 5 + 7 real tokens per layer
  np.testing.assert_allclose(stats.expert_tokens.sum(-1), [24.0, 24.0])
  np.testing.assert_allclose(stats.expert_prob.sum(-1), [12.0, 12.0], rtol=1e-5)
  np.testing.assert_array_equal(dense.moe.experts, ragged.moe.experts)
  # A window of outputs: the last MoE layer's experts for those positions only, and the same
  # choices as the full forward's.
  window = tfm.forward(params, config, tokens, mask, outputs=(3, 6))
  np.testing.assert_array_equal(window.moe.experts, stats.experts[:, :, 3:6])
  np.testing.assert_allclose(window.logits, dense.logits[:, 3:6], rtol=1e-5, atol=1e-5)


def test_remat_gives_the_same_loss_and_gradients_with_the_aux_term(random_params):
  config = ModelConfig(**MOE, moe_dispatch="ragged")
  params = random_params(config)
  tokens, mask = _tokens()

  def loss(p, c):
    out = tfm.forward(p, c, tokens, mask)
    return jnp.mean(out.logits ** 2) + moe.load_balancing_loss(out.moe, c.num_experts)

  plain = jax.value_and_grad(loss)(params, config)
  remat = jax.value_and_grad(loss)(params, config.replace(remat=True))
  np.testing.assert_allclose(plain[0], remat[0], rtol=1e-6)
  router = plain[1]["layers_0"]["mlp"]["gate"]["kernel"]
  assert np.abs(router).max() > 0
  for a, b in zip(jax.tree.leaves(plain[1]), jax.tree.leaves(remat[1])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_kv_cached_decode_equals_the_full_forward(random_params):
  """Prefill + one-token decode steps route every token as the full forward does."""
  config = ModelConfig(**MOE)
  params = random_params(config)
  tokens = jnp.asarray(np.random.default_rng(5).integers(0, 40, (1, 6)), jnp.int32)
  full = tfm.forward(params, config, tokens, jnp.ones_like(tokens))
  model = tfm.Transformer(config)
  cache = tfm.init_cache(config, 1, 6)
  slots = jnp.ones((1, 6), jnp.int32)
  out = model.apply({"params": params}, tokens[:, :3], jnp.arange(3)[None],
                    attention.cache_segments(slots, 0, 3), cache, 0)
  logits, experts = [out.logits], [out.moe.experts]
  for t in range(3, 6):
    out = model.apply({"params": params}, tokens[:, t:t + 1], jnp.array([[t]]),
                      attention.cache_segments(slots, t, 1), out.cache, t)
    logits.append(out.logits)
    experts.append(out.moe.experts)
  np.testing.assert_allclose(jnp.concatenate(logits, 1), full.logits, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(jnp.concatenate(experts, 2), full.moe.experts)



def test_replayed_routing_by_hand():
  _, own, probs = moe.route(LOGITS, 2, norm_topk_prob=True)
  replay = jnp.asarray([[3, 2], [-1, 0]], jnp.int32)  # token 0 replayed, token 1 routes itself
  weights, experts = moe.replayed_routing(probs, own, replay, norm_topk_prob=True)
  np.testing.assert_array_equal(experts, [[3, 2], [0, 2]])
  # Token 0: the trainer's probabilities of experts 3 and 2, 0.1 and 0.2, renormalised; token 1:
  # its own top-2 weights (0.5 / 0.8, 0.3 / 0.8).
  np.testing.assert_allclose(weights, [[1 / 3, 2 / 3], [5 / 8, 3 / 8]], rtol=1e-6)
  raw, _ = moe.replayed_routing(probs, own, replay, norm_topk_prob=False)
  np.testing.assert_allclose(raw, [[0.1, 0.2], [0.5, 0.3]], rtol=1e-6)


def test_routing_mismatch_counts_differing_sets_per_layer():
  # 2 tokens x 2 layers x top-2. Token 0: layer 0 the same set in another order, layer 1 {2, 3}
  # vs {2, 1}: half its layers differ. Token 1: both layers agree.
  sampler = jnp.asarray([[[0, 1], [2, 3]], [[1, 3], [0, 2]]])
  trainer = jnp.asarray([[[1, 0], [2, 1]], [[3, 1], [0, 2]]])
  np.testing.assert_array_equal(moe.routing_mismatch(sampler, trainer), [0.5, 0.0])
  with pytest.raises(ValueError, match="routing shapes differ"):
    moe.routing_mismatch(sampler, trainer[:1])


@pytest.mark.parametrize("remat", [False, True])
def test_replaying_its_own_routing_changes_nothing_and_other_experts_are_used(random_params,
                                                                              remat):
  config = ModelConfig(**MOE, decoder_sparse_step=2, moe_dispatch="dense", remat=remat)
  params = random_params(config)
  tokens, mask = _tokens()
  plain = tfm.forward(params, config, tokens, mask)
  own = jnp.transpose(plain.moe.experts, (1, 2, 0, 3))  # [B, T, L_moe, k]
  same = tfm.forward(params, config, tokens, mask, routing=own)
  np.testing.assert_allclose(same.logits, plain.logits, rtol=1e-6, atol=1e-6)
  np.testing.assert_array_equal(same.moe.experts, plain.moe.experts)
  # Other experts at positions 4 and 5 (each expert index + 1 mod E: a different set), -1
  # (route itself) elsewhere: those positions use them, the earlier ones are untouched.
  other = jnp.full_like(own, -1).at[:, 4:6].set((own[:, 4:6] + 1) % config.num_experts)
  replayed = tfm.forward(params, config, tokens, mask, routing=other)
  np.testing.assert_array_equal(replayed.moe.experts[:, :, 4:6],
                                jnp.transpose(other[:, 4:6], (2, 0, 1, 3)))
  np.testing.assert_allclose(replayed.logits[:, :4], plain.logits[:, :4], rtol=1e-6, atol=1e-6)
  assert np.abs(np.asarray(replayed.logits[:, 4:]) - np.asarray(plain.logits[:, 4:])).max() > 1e-3
  # Gradients flow through the replayed path (remat's custom VJP takes the routing as a
  # non-differentiable input).
  grads = jax.grad(lambda p: jnp.sum(tfm.forward(p, config, tokens, mask, routing=other).logits))(
      params)
  assert all(np.isfinite(g).all() for g in jax.tree.leaves(grads))


def test_replay_window_places_the_response_routing():
  response = jnp.arange(2 * 3 * 1 * 2, dtype=jnp.int32).reshape(2, 3, 1, 2)
  window = tfm.replay_window(response, 6)  # T = 6, Tr = 3: positions 2, 3, 4 predict the response
  assert window.shape == (2, 6, 1, 2)
  np.testing.assert_array_equal(window[:, 2:5], response)
  assert (window[:, :2] == -1).all() and (window[:, 5] == -1).all()
