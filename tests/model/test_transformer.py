"""Correctness of the Flax transformer: KV-cache decode, left padding, value head, bf16, RoPE."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.model import attention
from rlscale.model import transformer as tfm
from rlscale.model.config import ModelConfig, RopeScaling

V = 61


def _config(**overrides) -> ModelConfig:
  base = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4,
              num_kv_heads=2, head_dim=8, rope_theta=10_000.0)
  base.update(overrides)
  return ModelConfig(**base)


_forward = jax.jit(tfm.forward, static_argnums=1)


def _left_padded_batch(rng: np.random.Generator, lengths, total):
  """Rows of random tokens right-aligned in [B, total]; pad slots hold token 0."""
  tokens = np.zeros((len(lengths), total), np.int32)
  mask = np.zeros((len(lengths), total), np.int32)
  for row, n in enumerate(lengths):
    tokens[row, total - n:] = rng.integers(1, V, size=n)
    mask[row, total - n:] = 1
  return jnp.asarray(tokens), jnp.asarray(mask)


@pytest.mark.parametrize("overrides", [{}, dict(qk_norm=False, qkv_bias=True, tie_embeddings=False)])
def test_cached_decode_matches_full_forward_every_step(overrides, random_params):
  config = _config(**overrides)
  params = random_params(config)
  rng = np.random.default_rng(0)
  prompt_len, steps = 6, 5
  prompt, prompt_mask = _left_padded_batch(rng, [6, 3, 1], prompt_len)
  new_tokens = jnp.asarray(rng.integers(1, V, size=(3, steps)), jnp.int32)
  slots = prompt_len + steps
  slot_mask = jnp.concatenate([prompt_mask, jnp.ones((3, steps), jnp.int32)], axis=1)
  # Reference: one causal forward over prompt + every decoded token; causality makes position
  # prompt_len - 1 + i the prediction made after i decoded tokens.
  full = _forward(params, config, jnp.concatenate([prompt, new_tokens], axis=1), slot_mask).logits

  @jax.jit
  def cached(params, tokens, positions, cache, index):
    segments = attention.cache_segments(slot_mask, index, tokens.shape[1])
    return tfm.Transformer(config).apply({"params": params}, tokens, positions, segments,
                                         cache=cache, cache_index=index)

  out = cached(params, prompt, tfm.positions_from_mask(prompt_mask),
               tfm.init_cache(config, batch=3, length=slots), 0)
  real = prompt_mask[..., None].astype(bool)
  np.testing.assert_allclose(jnp.where(real, out.logits, 0), jnp.where(real, full[:, :prompt_len], 0),
                             atol=1e-5, rtol=1e-5)
  cache, num_real = out.cache, prompt_mask.sum(axis=1)
  for i in range(steps):
    out = cached(params, new_tokens[:, i:i + 1], (num_real + i)[:, None], cache, prompt_len + i)
    cache = out.cache
    np.testing.assert_allclose(out.logits[:, 0], full[:, prompt_len + i], atol=1e-5, rtol=1e-5)
  # The comparison is meaningful: the logits differ across rows and vocabulary.
  assert float(jnp.std(out.logits)) > 0.3


def test_cache_segments_without_offset_equal_the_forward_segments():
  mask = jnp.asarray([[0, 0, 1, 1], [1, 1, 1, 1]], jnp.int32)
  np.testing.assert_array_equal(attention.dense_mask(attention.cache_segments(mask, 0, 4)),
                                attention.dense_mask(attention.segments_from_mask(mask)))
  # One decode query at slot 2 of [pad, real, real(now), empty]: sees slots 1 and 2 only.
  got = attention.dense_mask(attention.cache_segments(jnp.asarray([[0, 1, 1, 0]]), 2, 1))
  np.testing.assert_array_equal(got, [[[False, True, True, False]]])


def test_left_padding_does_not_change_real_token_logits(random_params):
  config = _config()
  params = random_params(config, seed=1)
  rng = np.random.default_rng(1)
  tokens, mask = _left_padded_batch(rng, [7, 4, 2], 7)
  batched = _forward(params, config, tokens, mask).logits
  for row, n in [(1, 4), (2, 2)]:
    alone = _forward(params, config, tokens[row:row + 1, 7 - n:], mask[row:row + 1, 7 - n:]).logits
    np.testing.assert_allclose(batched[row, 7 - n:], alone[0], atol=1e-5, rtol=1e-5)


def test_positions_from_mask_counts_real_tokens():
  mask = jnp.asarray([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
  np.testing.assert_array_equal(tfm.positions_from_mask(mask), [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])


def test_value_head_shape_zero_init_and_independent_of_logits():
  config = _config(value_head=True, num_layers=1)  # one layer: jitting the init is the slow part
  params = dict(tfm.init_params(config, jax.random.PRNGKey(0)))
  head = params["value_head"]
  assert head["kernel"].shape == (32, 1) and head["bias"].shape == (1,)
  tokens, mask = _left_padded_batch(np.random.default_rng(2), [5, 3], 5)
  out = _forward(params, config, tokens, mask)
  assert out.values.shape == (2, 5) and out.values.dtype == jnp.float32
  np.testing.assert_array_equal(out.values, np.zeros((2, 5)))
  # The value head reads the final hidden state and does not touch the logits.
  no_head = {k: v for k, v in params.items() if k != "value_head"}
  without = _forward(no_head, config.replace(value_head=False), tokens, mask)
  np.testing.assert_array_equal(out.logits, without.logits)
  assert without.values is None
  params["value_head"] = {"kernel": jnp.asarray(np.ones((32, 1), np.float32)),
                          "bias": jnp.asarray(np.full((1,), 0.5, np.float32))}
  values = _forward(params, config, tokens, mask).values
  assert float(jnp.std(values)) > 0.1


def test_bf16_compute_is_close_to_f32(random_params):
  config = _config()
  params = random_params(config, seed=3)
  tokens, mask = _left_padded_batch(np.random.default_rng(3), [6, 4], 6)
  ref = _forward(params, config, tokens, mask).logits
  for dtype, param_dtype in [("bfloat16", "float32"), ("bfloat16", "bfloat16")]:
    cfg = config.replace(dtype=dtype, param_dtype=param_dtype)
    cast = jax.tree_util.tree_map(lambda x: x.astype(cfg.jnp_param_dtype), params)
    got = _forward(cast, cfg, tokens, mask).logits
    assert got.dtype == jnp.float32
    real = mask.astype(bool)
    err = np.abs(np.asarray(got - ref))[real].max()
    scale = np.abs(np.asarray(ref))[real].max()
    # bf16 has an 8-bit mantissa (relative step 2^-8 = 0.4%); a few roundings per layer stay < 5%.
    assert err < 0.05 * scale, (dtype, param_dtype, err, scale)
    assert err > 0  # it really computed in bf16


def test_rope_inv_freq_plain_and_llama3_by_hand():
  np.testing.assert_allclose(tfm.rope_inv_freq(8, 10_000.0), [1.0, 0.1, 0.01, 0.001], rtol=1e-6)
  scaling = RopeScaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=1024)
  # Wavelengths 2*pi/f: 6.3 and 63 < 1024/4 kept; 6283 > 1024/1 divided by 8; 628 interpolated with
  # s = (1024/628.3 - 1)/3 = 0.20993 -> 0.01 * ((1 - s)/8 + s).
  s = (1024 / (2 * np.pi / 0.01) - 1) / 3
  expected = [1.0, 0.1, 0.01 * ((1 - s) / 8 + s), 0.001 / 8]
  np.testing.assert_allclose(tfm.rope_inv_freq(8, 10_000.0, scaling), expected, rtol=1e-5)


def test_rope_rotation_preserves_norm_and_relative_position():
  x = jax.random.normal(jax.random.PRNGKey(0), (1, 2, 1, 8))
  rope = jax.jit(lambda x, positions: tfm.apply_rope(
      x, tfm.rope_tables(positions, tfm.rope_inv_freq(8, 10_000.0))))
  a = np.asarray(rope(x, jnp.asarray([[3, 5]])))
  b = np.asarray(rope(x, jnp.asarray([[10, 12]])))
  np.testing.assert_allclose(np.linalg.norm(a, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)
  # <q_m, k_n> depends only on m - n.
  np.testing.assert_allclose(np.sum(a[0, 0] * a[0, 1]), np.sum(b[0, 0] * b[0, 1]), rtol=1e-4)


def test_rope_scaling_must_be_a_rope_scaling():
  with pytest.raises(ValueError, match="rope_scaling"):
    _config(rope_scaling={"factor": 8.0})
  with pytest.raises(ValueError, match="high_freq_factor"):
    RopeScaling(factor=8.0, low_freq_factor=4.0, high_freq_factor=1.0, original_max_position=8192)


@pytest.mark.parametrize("overrides", [
    {}, dict(tie_embeddings=False), dict(qkv_bias=True, o_proj_bias=True, qk_norm=False),
    dict(value_head=True)])
def test_num_params_counts_the_initialised_tree(overrides):
  config = _config(**overrides)
  shapes = jax.eval_shape(lambda key: tfm.init_params(config, key), jax.random.PRNGKey(0))
  assert sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(shapes)) == config.num_params()


@pytest.mark.parametrize("temperature", [1.0, 1e-3, 1e-9])
def test_token_logp_is_finite_and_exact_at_small_temperature(temperature):
  # log softmax(z / T) computed as (z - max z) / T then log-softmax: the most likely token's
  # shifted logit is exactly 0 however XLA rounds the scaling. Scaling first let XLA:CPU round
  # z / T one way for the max and another (fused multiply-add) inside exp, off by ~ulp(z / T):
  # exp of that overflowed and logp came out +-inf at T = 1e-9.
  rng = np.random.default_rng(0)
  logits = (10 * rng.standard_normal((4, 64))).astype(np.float32)
  order = np.argsort(-logits, axis=-1)
  targets = order[:, :2]  # the most and the second most likely token of each row
  pairs = jnp.repeat(jnp.asarray(logits)[:, None], 2, axis=1)  # [4, 2, V], targets [4, 2]
  got = jax.jit(tfm.token_logp, static_argnums=2)(pairs, jnp.asarray(targets), temperature)
  scaled = logits.astype(np.float64) / temperature
  shifted = scaled - scaled.max(-1, keepdims=True)
  reference = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
  expected = np.take_along_axis(reference, targets, axis=-1)
  assert np.all(np.isfinite(np.asarray(got))) and np.all(np.asarray(got) <= 0)
  np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("temperature", [1e-30, 1e-40, 0.0])
def test_token_logp_never_nan_at_tiny_temperature_or_masked_vocabulary(temperature):
  # Row 0 has a masked entry; T = 1e-40 is a float32 subnormal (flushed to 0 by XLA:CPU, which made
  # 0 / 0 = NaN at the max); T = 0 reads as 1 (the greedy sampler's logp).
  logits = jnp.array([[3.0, 1.0, -jnp.inf], [0.0, 2.0, 1.0]])
  targets = jnp.array([0, 2])  # the most likely token of row 0, the second of row 1
  fn = lambda z: tfm.token_logp(z, targets, temperature)  # noqa: E731
  got = jax.jit(fn)(logits)
  if temperature == 0.0:
    expected = [3.0 - np.log(np.exp(3.0) + np.exp(1.0)), 1.0 - np.log(1 + np.exp(2.0) + np.exp(1.0))]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
  else:  # the greedy limit: the argmax has probability 1, the runner-up a huge negative logp
    assert float(got[0]) == 0.0 and float(got[1]) <= -1e29
  grad = jax.grad(lambda z: jnp.sum(fn(z)))(logits)
  assert np.all(np.isfinite(np.asarray(got)) | (np.asarray(got) == -np.inf))
  assert np.all(np.isfinite(grad)) and float(grad[0, 2]) == 0.0


def test_token_logp_of_a_masked_target_is_minus_inf_with_a_finite_gradient():
  logits = jnp.array([0.0, jnp.log(3.0), -jnp.inf])
  assert float(tfm.token_logp(logits, jnp.array(2))) == -np.inf
  # d log p_2 / dz = onehot(2) - softmax(z) = [0, 0, 1] - [1/4, 3/4, 0].
  grad = jax.grad(lambda z: tfm.token_logp(z, jnp.array(2)))(logits)
  np.testing.assert_allclose(grad, [-0.25, -0.75, 1.0], rtol=1e-6)


@pytest.mark.parametrize("overrides", [{}, dict(tie_embeddings=False, value_head=True)])
def test_remat_gives_the_same_outputs_and_gradients(overrides, random_params):
  config = _config(**overrides)
  params = random_params(config)
  tokens, mask = _left_padded_batch(np.random.default_rng(1), [7, 4, 2], 7)

  def loss(p, cfg):
    out = tfm.forward(p, cfg, tokens, mask)
    values = 0.0 if out.values is None else jnp.sum(out.values ** 2)
    return jnp.sum(jax.nn.log_softmax(out.logits) * mask[..., None]) + values

  for_config = lambda cfg: jax.jit(jax.value_and_grad(lambda p: loss(p, cfg)))(params)  # noqa: E731
  (plain_loss, plain), (remat_loss, remat) = for_config(config), for_config(config.replace(remat=True))
  np.testing.assert_allclose(remat_loss, plain_loss, rtol=1e-6)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(plain), jax.tree.leaves(remat)):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=jax.tree_util.keystr(path))


def test_head_false_returns_the_states_the_output_head_reads(random_params):
  for config in (_config(), _config(tie_embeddings=False)):
    params = random_params(config)
    tokens, mask = _left_padded_batch(np.random.default_rng(2), [5, 3], 5)
    full = tfm.forward(params, config, tokens, mask)
    headless = tfm.forward(params, config, tokens, mask, head=False)
    assert headless.logits is None and headless.hidden.shape == (2, 5, config.hidden_size)
    np.testing.assert_allclose(tfm.output_logits(params, config, headless.hidden), full.logits,
                               rtol=1e-6, atol=1e-6)


def test_remat_must_be_a_bool():
  with pytest.raises(ValueError, match="model.remat must be True or False"):
    _config(remat=1)


@pytest.mark.parametrize("remat", [False, True])
@pytest.mark.parametrize("overrides", [{}, dict(tie_embeddings=False, value_head=True)])
def test_outputs_window_gives_the_full_forwards_positions_and_gradients(overrides, remat,
                                                                       random_params):
  """forward(outputs=(start, stop)) computes the last layer's queries, MLP and head at those
  positions only; the numbers (and the gradients through them) are those of the full forward's
  positions [start, stop), with and without per-layer rematerialisation."""
  config = _config(**overrides).replace(remat=remat)
  params = random_params(config)
  tokens, mask = _left_padded_batch(np.random.default_rng(3), [7, 4, 2], 7)
  start, stop = 2, 6
  weights = jax.random.normal(jax.random.key(4), (3, stop - start, config.vocab_size))

  def loss(p, window):
    out = tfm.forward(p, config, tokens, mask, outputs=(start, stop) if window else None)
    logits, values = out.logits, out.values
    if not window:
      logits = logits[:, start:stop]
      values = None if values is None else values[:, start:stop]
    return jnp.sum(logits * weights) + (0.0 if values is None else jnp.sum(values ** 2)), out

  full_loss, full_grads = jax.jit(jax.value_and_grad(lambda p: loss(p, False)[0]))(params)
  (window_loss, out), window_grads = jax.jit(
      jax.value_and_grad(lambda p: loss(p, True), has_aux=True))(params)
  assert out.logits.shape == (3, stop - start, config.vocab_size)
  np.testing.assert_allclose(window_loss, full_loss, rtol=1e-5)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(full_grads),
                          jax.tree.leaves(window_grads)):
    scale = float(np.max(np.abs(a)))
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5 * scale, err_msg=jax.tree_util.keystr(path))


def test_outputs_window_out_of_range_is_an_error(random_params):
  config = _config()
  params = random_params(config)
  tokens, mask = _left_padded_batch(np.random.default_rng(0), [3], 4)
  for window in ((2, 2), (-1, 2), (1, 5)):
    with pytest.raises(ValueError, match="outputs="):
      tfm.forward(params, config, tokens, mask, outputs=window)
