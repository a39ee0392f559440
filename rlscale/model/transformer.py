"""Flax linen decoder-only transformer for the Qwen3 / Qwen2 / Llama family.

The KV cache is an explicit pytree passed in and returned (not a mutable flax collection), so the
model is a pure function of (params, tokens, positions, attention segments, cache) and the sampler
can carry the cache through `lax.while_loop`. Attention is described by segment ids and slots
(`attention.AttentionSegments`: packed sequences, left padding, decode over a cache), never by a
[B, T, S] mask passed in; the kernels live in `rlscale.model.attention`. Parameter names mirror
the HF checkpoints (`layers_0/self_attn/q_proj/kernel` <-> `model.layers.0.self_attn.q_proj.weight`).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rlscale.model import attention as attention_lib
from rlscale.model.attention import AttentionSegments, positions_from_segments
from rlscale.model.config import ModelConfig, RopeScaling, resolve_impl
from rlscale.model.moe import MoEMLP, MoEStats
from rlscale.parallel import rules as rules_lib
from rlscale.parallel.shardings import tree_shardings


# Logical axis names of every parameter, by a regex over its path ("layers_0/self_attn/q_proj/
# kernel"); `rlscale.parallel.rules` maps the names to mesh axes. A table over the existing paths
# rather than `nn.with_logical_partitioning` boxes: the params tree stays plain arrays for every
# caller, and the same table names an HF-loaded tree and the optimizer state (mu/..., nu/...).
# Fused dimensions take the name of their outer factor: q_proj's [hidden, H * D] output is split
# into whole heads when the tensor axis divides H. tests/parallel/test_rules.py checks that every
# parameter of every architecture option is named.
PARAM_LOGICAL_AXES: tuple[tuple[str, tuple], ...] = (
    (r"embed_tokens/embedding", ("vocab", "embed")),
    (r"lm_head/kernel", ("embed", "vocab")),
    (r"self_attn/q_proj/kernel", ("embed", "heads")),
    (r"self_attn/q_proj/bias", ("heads",)),
    (r"self_attn/[kv]_proj/kernel", ("embed", "kv_heads")),
    (r"self_attn/[kv]_proj/bias", ("kv_heads",)),
    (r"self_attn/o_proj/kernel", ("heads", "embed")),
    (r"self_attn/o_proj/bias", ("norm",)),
    (r"self_attn/[qk]_norm/weight", ("head_dim",)),
    (r"mlp/(gate|up)_proj/kernel", ("embed", "mlp")),
    (r"mlp/down_proj/kernel", ("mlp", "embed")),
    # Mixture of experts (rlscale.model.moe): the router, and expert kernels [E, ...] whose
    # leading dimension the `expert` mesh axis shards (expert parallelism).
    (r"mlp/gate/kernel", ("embed", None)),
    (r"mlp/experts/(gate|up)_proj", ("expert", "embed", "moe_mlp")),
    (r"mlp/experts/down_proj", ("expert", "moe_mlp", "embed")),
    (r"(input_layernorm|post_attention_layernorm|norm)/weight", ("norm",)),
    (r"value_head/kernel", ("embed", None)),
    (r"value_head/bias", (None,)),
)


def param_shardings(tree, mesh, *, rules=rules_lib.DEFAULT_RULES):
  """NamedShardings over `mesh` for every leaf of `tree` (params, or a TrainState whose optimizer
  moments follow their parameters' paths; arrays or ShapeDtypeStructs) by PARAM_LOGICAL_AXES and
  the logical axis `rules` (`parallel.shardings.tree_shardings`); leaves no entry names are
  replicated.

  Raises: ValueError from `parallel.rules.tree_specs` (a rule of the wrong rank, an unknown mesh
  axis)."""
  return tree_shardings(tree, mesh, table=PARAM_LOGICAL_AXES, rules=rules)


# Logical names of the hidden states between layers, [B, T, hidden] (MaxText's activation_batch,
# ...): without them XLA's partitioner may resolve a batch-sharded input against FSDP-sharded
# weights by gathering the batch instead of the weights.
ACTIVATION_AXES = ("activation_batch", "activation_length", "activation_embed")


def constrain_activations(x: jax.Array) -> jax.Array:
  """x [B, T, hidden] constrained to the sharding of ACTIVATION_AXES under the logical axis rules
  in effect (`nn.logical_axis_rules`); the identity outside a mesh context, as flax's
  `with_logical_constraint` is, so code run outside a mesh compiles as before."""
  return nn.with_logical_constraint(x, ACTIVATION_AXES)


class KVCache(NamedTuple):
  """Preallocated keys and values for every layer.

  One array per layer (not one stacked [L, ...] array) so a decode step updates each buffer in place
  instead of slicing out and re-stacking copies; heads-major so attention reads each (row, head)'s
  block contiguously. Keys are stored transposed, [D, S] per (row, head): a decode step's q . k then
  reduces over the non-minor D axis with S in SIMD lanes, about 2x faster on CPU than reducing over a
  minor D of 32 (a horizontal sum per slot).

  Attributes:
    k: tuple of L arrays [B, K, D, S], keys (already rotated), compute dtype.
    v: tuple of L arrays [B, K, S, D], values.
  """
  k: tuple
  v: tuple


class ModelOutput(NamedTuple):
  """logits [B, T, V] float32 (None when the output head is skipped); values [B, T] float32 or
  None; cache (KVCache or None); hidden [B, T, hidden_size] in the compute dtype, the final-norm
  states the output head reads, when the head is skipped (else None); moe: the routing
  statistics of the MoE layers (`moe.MoEStats`, stacked over them; None for a dense model)."""
  logits: Optional[jax.Array]
  values: Optional[jax.Array]
  cache: Optional[KVCache]
  hidden: Optional[jax.Array] = None
  moe: Optional[MoEStats] = None


def init_cache(config: ModelConfig, batch: int, length: int) -> KVCache:
  """Zero cache for `batch` rows of `length` slots (S) in the compute dtype."""
  k_shape = (batch, config.num_kv_heads, config.head_dim, length)
  v_shape = (batch, config.num_kv_heads, length, config.head_dim)
  zeros = lambda shape: tuple(jnp.zeros(shape, config.jnp_dtype) for _ in range(config.num_layers))  # noqa: E731
  return KVCache(zeros(k_shape), zeros(v_shape))


def positions_from_mask(input_mask: jax.Array) -> jax.Array:
  """Token positions under left padding: [B, T] {0,1} -> [B, T] int32, 0 at the first real token.

  Padding slots get position 0 (their outputs are never used)."""
  return jnp.maximum(jnp.cumsum(input_mask.astype(jnp.int32), axis=-1) - 1, 0)


class RMSNorm(nn.Module):
  """RMSNorm (Zhang & Sennrich 2019) computed in float32: x / rms(x) * weight."""
  eps: float
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x):
    weight = self.param("weight", nn.initializers.ones, (x.shape[-1],), self.param_dtype)
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    return (normed * weight.astype(jnp.float32)).astype(x.dtype)


def rope_inv_freq(head_dim: int, theta: float, scaling: Optional[RopeScaling] = None) -> np.ndarray:
  """Rotary inverse frequencies [D/2] float32: theta^(-2i/D) (Su et al. 2021, RoFormer).

  With `scaling` (HF rope_type "llama3"): frequencies whose wavelength 2*pi/f exceeds
  original_max_position/low_freq_factor are divided by `factor`; wavelengths below
  original_max_position/high_freq_factor are kept; in between, f * ((1 - s)/factor + s) with
  s = (original_max_position/wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor).
  Computed in numpy at trace time (a constant of the compiled program).
  """
  inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
  inv_freq = inv_freq.astype(np.float32)
  if scaling is None:
    return inv_freq
  wavelen = 2 * np.pi / inv_freq
  low_freq_wavelen = scaling.original_max_position / scaling.low_freq_factor
  high_freq_wavelen = scaling.original_max_position / scaling.high_freq_factor
  smooth = ((scaling.original_max_position / wavelen - scaling.low_freq_factor)
            / (scaling.high_freq_factor - scaling.low_freq_factor))
  smoothed = inv_freq * ((1 - smooth) / scaling.factor + smooth)
  scaled = np.where(wavelen > low_freq_wavelen, inv_freq / scaling.factor,
                    np.where(wavelen < high_freq_wavelen, inv_freq, smoothed))
  return scaled.astype(np.float32)


class RopeTables(NamedTuple):
  """Rotary tables of one forward, computed once from the positions and shared by every layer's
  q and k (HF computes `position_embeddings` once per forward the same way).

  Attributes:
    cos: [B, T, 1, 1, D/2] float32, cos(position * inv_freq), the same for both halves of D.
    sin: [B, T, 1, 2, D/2] float32, (-sin, +sin): the signs of "rotate half" for the two halves.
  """
  cos: jax.Array
  sin: jax.Array


def rope_tables(positions: jax.Array, inv_freq: np.ndarray) -> RopeTables:
  """positions [B, T] int32, inv_freq [D/2] float32 from `rope_inv_freq` -> RopeTables."""
  angles = positions.astype(jnp.float32)[:, :, None, None, None] * jnp.asarray(inv_freq)
  sin = jnp.sin(angles)
  return RopeTables(jnp.cos(angles), jnp.concatenate([-sin, sin], axis=3))


def apply_rope(x: jax.Array, tables: RopeTables) -> jax.Array:
  """Rotary embedding (Su et al. 2021, RoFormer) in the HF "rotate half" layout: with halves
  x = (x1, x2), returns (x1 cos - x2 sin, x2 cos + x1 sin).

  x [B, T, N, D] with the `rope_tables` of its positions; rotation in float32, result in x.dtype.
  Swapping the halves is a reverse of a [2, D/2] view rather than a concatenate: XLA:CPU emits a
  concatenate with a branch per element, about 4x slower in a decode step."""
  b, t, n, d = x.shape
  halves = x.astype(jnp.float32).reshape(b, t, n, 2, d // 2)
  rotated = halves * tables.cos + halves[:, :, :, ::-1] * tables.sin
  return rotated.reshape(b, t, n, d).astype(x.dtype)


class Attention(nn.Module):
  """Grouped-query self-attention with optional q/k/v/o bias and q/k RMSNorm."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x, rope: RopeTables, segments: AttentionSegments, layer_cache=None,
               cache_index=None, last_only=False, queries: Optional[tuple[int, int]] = None):
    """Returns (output [B, T, H], or [B, 1, H] for the last query only if last_only, or
    [B, stop - start, H] for the queries at positions [start, stop) only if queries (static, no
    cache; keys and values still from all T positions); new cache). With a cache, the new keys
    and values go to slots cache_index.. and the first segments.key.shape[-1] slots are attended
    (a prefill into an empty cache passes its T prompt slots and skips the rest)."""
    c = self.config
    dense = lambda feats, bias, name: nn.Dense(  # noqa: E731
        feats, use_bias=bias, dtype=c.jnp_dtype, param_dtype=c.jnp_param_dtype, name=name)
    b, t, _ = x.shape
    key_rope, key_len = rope, t
    if queries is not None:
      # Only these positions' outputs are needed: project and rotate their queries alone.
      start, stop = queries
      x_q, t = x[:, start:stop], stop - start
      rope = RopeTables(rope.cos[:, start:stop], rope.sin[:, start:stop])
      segments = attention_lib.query_window(segments, start, stop)
    else:
      x_q = x
    q = dense(c.num_heads * c.head_dim, c.qkv_bias, "q_proj")(x_q).reshape(b, t, c.num_heads, c.head_dim)
    k = dense(c.num_kv_heads * c.head_dim, c.qkv_bias, "k_proj")(x).reshape(b, key_len, c.num_kv_heads, c.head_dim)
    v = dense(c.num_kv_heads * c.head_dim, c.qkv_bias, "v_proj")(x).reshape(b, key_len, c.num_kv_heads, c.head_dim)
    if c.qk_norm:
      q = RMSNorm(c.rms_norm_eps, c.jnp_param_dtype, name="q_norm")(q)
      k = RMSNorm(c.rms_norm_eps, c.jnp_param_dtype, name="k_norm")(k)
    q = apply_rope(q, rope)
    k = apply_rope(k, key_rope)
    new_cache = None
    num_keys = segments.key.shape[-1]
    if layer_cache is not None:
      cache_k, cache_v = layer_cache  # [B, K, D, S], [B, K, S, D]
      cache_k = jax.lax.dynamic_update_slice_in_dim(
          cache_k, k.transpose(0, 2, 3, 1).astype(cache_k.dtype), cache_index, axis=3)
      cache_v = jax.lax.dynamic_update_slice_in_dim(
          cache_v, v.transpose(0, 2, 1, 3).astype(cache_v.dtype), cache_index, axis=2)
      new_cache = (cache_k, cache_v)
      k, v = cache_k[..., :num_keys], cache_v[:, :, :num_keys]
    # A decode step's keys, and those of a layer computing a window of its queries (the last
    # layer of a log-prob pass), are other slots than its queries' (splash and cudnn do not run
    # there).
    decode = num_keys != t
    impl = attention_lib.resolve_attention_impl(c.attention_impl, decode=decode, dtype=c.jnp_dtype,
                                                window=decode and layer_cache is None)
    out = attention_lib.attend(q, k, v, segments, impl=impl, cache_layout=layer_cache is not None)
    out = out.reshape(b, t, c.num_heads * c.head_dim)
    if last_only:
      out = out[:, -1:]
    return dense(c.hidden_size, c.o_proj_bias, "o_proj")(out), new_cache


class MLP(nn.Module):
  """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x):
    c = self.config
    dense = lambda feats, name: nn.Dense(  # noqa: E731
        feats, use_bias=False, dtype=c.jnp_dtype, param_dtype=c.jnp_param_dtype, name=name)
    return dense(c.hidden_size, "down_proj")(
        nn.silu(dense(c.intermediate_size, "gate_proj")(x)) * dense(c.intermediate_size, "up_proj")(x))


class DecoderLayer(nn.Module):
  """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x)); the mlp is a mixture of experts
  (`moe.MoEMLP`) when `config.is_moe_layer(layer)`, else a SwiGLU MLP."""
  config: ModelConfig
  layer: int = 0

  @nn.compact
  def __call__(self, x, rope: RopeTables, segments: AttentionSegments, layer_cache=None,
               cache_index=None, last_only=False, queries: Optional[tuple[int, int]] = None,
               token_mask=None, replay=None):
    """Returns (x [B, T, H], or [B, 1, H] for the last position only if last_only, or
    [B, stop - start, H] for positions [start, stop) only if queries; new cache; the MoE
    layer's routing stats (see `moe.MoEMLP`, over the same positions, counting the tokens of
    token_mask [B, T] {0,1}, all when None) or None for a dense layer). replay [B, T, k] int32
    (MoE layers; -1 where a token routes itself) replays experts (`moe.replayed_routing`)."""
    c = self.config
    h = RMSNorm(c.rms_norm_eps, c.jnp_param_dtype, name="input_layernorm")(x)
    h, new_cache = Attention(c, name="self_attn")(h, rope, segments, layer_cache, cache_index,
                                                  last_only, queries)
    cut = lambda a: a  # noqa: E731  the positions this layer's MLP computes
    if last_only:
      cut = lambda a: None if a is None else a[:, -1:]  # noqa: E731
    elif queries is not None:
      cut = lambda a: None if a is None else a[:, queries[0]:queries[1]]  # noqa: E731
    x, token_mask, replay = cut(x), cut(token_mask), cut(replay)
    x = x + h
    h = RMSNorm(c.rms_norm_eps, c.jnp_param_dtype, name="post_attention_layernorm")(x)
    if c.is_moe_layer(self.layer):
      h, stats = MoEMLP(c, name="mlp")(h, token_mask, replay)
      return x + h, new_cache, stats
    return x + MLP(c, name="mlp")(h), new_cache, None


class Transformer(nn.Module):
  """Decoder-only LM. Call with

    tokens [B, T] int32, positions [B, T] int32 (rotary positions; they may restart per packed
    sequence), segments: `attention.AttentionSegments` with query [B, T] and key [B, S'] segment
    ids (who attends to whom: `attention.segments_from_mask` for rows of their own tokens,
    `attention.cache_segments` over a cache), cache: KVCache with S >= S' slots (slots >= S' are
    not attended to; usually S' = S) or None (then S' == T), cache_index: int32 scalar slot of
    tokens[:, 0] (equal to segments.query_offset).

  Returns ModelOutput(logits [B, T, V] float32, values [B, T] float32 or None, cache).
  With last_only=True (static) only the last position is computed: logits [B, 1, V], values [B, 1].
  With outputs=(start, stop) (static, no cache) the last layer computes only positions
  [start, stop) after its keys and values (the earlier layers all T, since every later position
  attends to them), so logits, values and hidden are [B, stop - start, ...]: the same numbers as
  the full forward's positions [start, stop) at less compute (the update step scores only the
  positions that predict response tokens).
  With head=False (static) the output head is skipped: logits None and `hidden` holds the
  final-norm states (score them with `output_logits`, e.g. in chunks).
  token_mask [B, T] {0,1} (or None: all) marks the tokens the MoE routing statistics count
  (`ModelOutput.moe`, stacked over the MoE layers; None for a dense model); it changes no output.
  routing [B, T, L_moe, k] int32 (or None) replays experts: MoE layer j of position t uses
  routing[:, t, j] unless its first entry is -1 (`moe.replayed_routing`; see `replay_window`).

  With config.remat and no cache, each decoder layer is rematerialised (`rematerialised_layer`,
  gradient checkpointing as in HF/TRL/verl): only its input is kept for the backward pass and its
  activations, attention probabilities included, are recomputed there.
  """
  config: ModelConfig

  @nn.compact
  def __call__(self, tokens, positions, segments: AttentionSegments,
               cache: Optional[KVCache] = None, cache_index=None,
               last_only: bool = False, head: bool = True,
               outputs: Optional[tuple[int, int]] = None, token_mask=None, routing=None):
    c = self.config
    if outputs is not None and (cache is not None or last_only):
      raise ValueError("outputs=(start, stop) is for a forward without cache and last_only")
    embed = embedding_module(c, name="embed_tokens")
    x = constrain_activations(embed(tokens))
    rope = rope_tables(positions, rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling))
    new_k, new_v, moe_stats = [], [], []
    remat = c.remat and cache is None and not last_only and not self.is_initializing()
    moe_index = {layer: j for j, layer in enumerate(c.moe_layers)}
    for i in range(c.num_layers):
      queries = outputs if i == c.num_layers - 1 else None
      replay = None if routing is None or i not in moe_index else routing[:, :, moe_index[i]]
      if remat:
        layer = (rematerialised_layer if resolve_impl(c.remat_impl, "custom_vjp", "checkpoint")
                 == "custom_vjp" else checkpointed_layer)
        x, stats = layer(c, queries, i)(
            self.variables["params"][f"layers_{i}"], x, rope, segments, token_mask, replay)
        x = constrain_activations(x)
        if stats is not None:
          moe_stats.append(stats)
        continue
      layer_cache = None if cache is None else (cache.k[i], cache.v[i])
      # With last_only, the last layer computes its output for the last position only; every layer
      # still writes all positions' keys and values to the cache.
      x, layer_new, stats = DecoderLayer(c, layer=i, name=f"layers_{i}")(
          x, rope, segments, layer_cache, cache_index, last_only and i == c.num_layers - 1, queries,
          token_mask, replay)
      x = constrain_activations(x)
      if layer_new is not None:
        new_k.append(layer_new[0])
        new_v.append(layer_new[1])
      if stats is not None:
        moe_stats.append(stats)
    x = constrain_activations(RMSNorm(c.rms_norm_eps, c.jnp_param_dtype, name="norm")(x))
    logits, hidden = None, None
    if not head:
      hidden = x
    elif c.tie_embeddings:
      logits = embed.attend(x).astype(jnp.float32)
    else:
      logits = lm_head_module(c, name="lm_head")(x).astype(jnp.float32)
    values = None
    if c.value_head:
      values = nn.Dense(1, dtype=jnp.float32, param_dtype=jnp.float32,
                        kernel_init=nn.initializers.zeros, name="value_head")(x.astype(jnp.float32))[..., 0]
    out_cache = None if cache is None else KVCache(tuple(new_k), tuple(new_v))
    moe = None
    if moe_stats:
      # With outputs / last_only the last layer routes only its computed positions, the last
      # columns of the others' (causal: the trailing columns were cut): every layer's choices
      # are kept for those positions so they stack.
      widths = {s[3].shape[1] for s in moe_stats}
      experts = (jnp.stack([s[3] for s in moe_stats]) if len(widths) == 1
                 else jnp.stack([s[3][:, -min(widths):] for s in moe_stats]))
      moe = MoEStats(jnp.stack([s[0] for s in moe_stats]), jnp.stack([s[1] for s in moe_stats]),
                     jnp.stack([s[2] for s in moe_stats]), experts)
    return ModelOutput(logits, values, out_cache, hidden, moe)


def rematerialised_layer(config: ModelConfig, queries: Optional[tuple[int, int]] = None,
                         layer: int = 0):
  """fn(layer_params, x, rope, segments, token_mask, replay) -> (x, moe stats or None): decoder
  layer `layer` (no cache; outputs for positions [start, stop) only when queries, see `DecoderLayer`)
  whose backward pass recomputes the layer from its input instead of keeping its activations
  (gradient checkpointing, as `jax.checkpoint`).

  Written as a custom VJP whose backward adds 0 * (one element of the incoming cotangent) to the
  saved input before recomputing: that data dependency keeps the recomputation after the
  cotangent exists and distinct from the forward. With `jax.checkpoint` alone, XLA:CPU drops the
  optimisation barrier early and common-subexpression elimination merges the recomputation with
  the forward, so every layer's activations stay alive (measured: no memory saved on CPU). The
  extra add is one elementwise pass over x per layer; the numbers are those of the plain layer.
  """

  def apply(params, x, rope, segments, token_mask, replay):
    out, _, stats = DecoderLayer(config, layer=layer).apply(
        {"params": params}, x, rope, segments, queries=queries, token_mask=token_mask,
        replay=replay)
    return out, stats

  @jax.custom_vjp
  def layer_fn(params, x, rope, segments, token_mask, replay):
    return apply(params, x, rope, segments, token_mask, replay)

  def layer_fwd(params, x, rope, segments, token_mask, replay):
    return (apply(params, x, rope, segments, token_mask, replay),
            (params, x, rope, segments, token_mask, replay))

  def layer_bwd(saved, cotangents):
    params, x, rope, segments, token_mask, replay = saved
    # The MoE stats' cotangent (the aux loss reaches the router through expert_prob) goes into
    # the recomputation's vjp with the output's; the integer experts have float0 cotangents.
    cotangent = cotangents[0]
    tie = jnp.zeros((), x.dtype) * cotangent.reshape(-1)[0].astype(x.dtype)
    # The parameters get the same tie: under FSDP each layer's weights are all-gathered for the
    # forward, and without it CSE merges the backward's gather with the forward's, so every
    # layer's gathered weights stay alive until its backward (measured on Qwen3-8B, {fsdp: 8}:
    # 2.0 instead of 0.77 GiB of temporaries per layer).
    tied_params = jax.tree.map(lambda p: p + tie.astype(p.dtype), params)
    _, vjp = jax.vjp(lambda p, h, r: apply(p, h, r, segments, token_mask, replay), tied_params,
                     x + tie, rope)
    return (*vjp(cotangents), None, None, None)

  layer_fn.defvjp(layer_fwd, layer_bwd)
  return layer_fn


def checkpointed_layer(config: ModelConfig, queries: Optional[tuple[int, int]] = None,
                       layer: int = 0):
  """fn(layer_params, x, rope, segments, token_mask, replay) -> (x, moe stats or None): decoder
  layer `layer` under `jax.checkpoint` with the nothing_saveable policy (the layer's input is kept,
  everything else recomputed in the backward): the standard remat of GPU/TPU stacks
  (`model.remat_impl` "checkpoint"), the same numbers as `rematerialised_layer`."""

  def apply(params, x, rope, segments, token_mask, replay):
    out, _, stats = DecoderLayer(config, layer=layer).apply(
        {"params": params}, x, rope, segments, queries=queries, token_mask=token_mask,
        replay=replay)
    return out, stats

  return jax.checkpoint(apply, policy=jax.checkpoint_policies.nothing_saveable)


def embedding_module(config: ModelConfig, name: Optional[str] = None) -> nn.Embed:
  """The token embedding (also the output projection when config.tie_embeddings)."""
  return nn.Embed(config.vocab_size, config.hidden_size, dtype=config.jnp_dtype,
                  param_dtype=config.jnp_param_dtype,
                  embedding_init=nn.initializers.normal(0.02), name=name)


def lm_head_module(config: ModelConfig, name: Optional[str] = None) -> nn.Dense:
  """The untied output projection hidden -> V."""
  return nn.Dense(config.vocab_size, use_bias=False, dtype=config.jnp_dtype,
                  param_dtype=config.jnp_param_dtype, name=name)


def output_logits(params, config: ModelConfig, hidden: jax.Array) -> jax.Array:
  """The output head alone: hidden [..., hidden_size] (`ModelOutput.hidden`) -> logits [..., V]
  float32 by the same operations as the full forward's last step (so the same numbers), to score
  a few positions or one chunk at a time."""
  if config.tie_embeddings:
    logits = embedding_module(config).apply({"params": params["embed_tokens"]}, hidden,
                                            method=nn.Embed.attend)
  else:
    logits = lm_head_module(config).apply({"params": params["lm_head"]}, hidden)
  return logits.astype(jnp.float32)


def init_params(config: ModelConfig, rng: jax.Array) -> dict:
  """Random parameters (normal(0.02) embeddings, lecun-normal dense kernels, zero value head).

  Args:
    config: the architecture. rng: a PRNG key (`jax.random.key(seed)`).
  Returns:
    The `params` collection: a nested dict of arrays in config.param_dtype, keyed like the HF
    tensor names (`params["layers_0"]["self_attn"]["q_proj"]["kernel"]` is [hidden, H * D]);
    `config.num_params()` leaves in total.

  Jitted because initialising op by op compiles every primitive separately (~3x slower on CPU)."""
  tokens = jnp.zeros((1, 2), jnp.int32)
  segments = attention_lib.segments_from_mask(jnp.ones((1, 2), jnp.int32))
  init = jax.jit(Transformer(config).init)
  return init(rng, tokens, positions_from_mask(jnp.ones((1, 2))), segments)["params"]


def replay_window(response_experts: jax.Array, total_len: int) -> jax.Array:
  """The sampler's routing of a response (`Rollout.experts`) as `forward`'s `routing`.

  Args: response_experts: [B, Tr, L_moe, k] int32, the experts at the position predicting each
    response token (-1 where nothing was generated). total_len: T = Tp + Tr, the forward's width.
  Returns: [B, T, L_moe, k] int32: response_experts at positions [T - Tr - 1, T - 1) (the
    positions that predict the response), -1 (route by the trainer) elsewhere, the prompt
    included (the sampler's prefill routing of the prompt is not kept)."""
  b, tr = response_experts.shape[:2]
  before = jnp.full((b, total_len - tr - 1) + response_experts.shape[2:], -1, jnp.int32)
  after = jnp.full((b, 1) + response_experts.shape[2:], -1, jnp.int32)
  return jnp.concatenate([before, response_experts.astype(jnp.int32), after], axis=1)


def forward(params, config: ModelConfig, tokens: jax.Array, input_mask: jax.Array, *,
            head: bool = True, outputs: Optional[tuple[int, int]] = None,
            routing: Optional[jax.Array] = None) -> ModelOutput:
  """Full causal forward without cache over left-padded sequences (e.g. a Rollout's prompt and
  response: `tokens`, `concatenate([prompt_mask, response_mask], 1)`) or rows of packed
  sequences.

  Args:
    params: the `params` collection of `init_params` / `load_hf_checkpoint` for `config`.
    config: ModelConfig of params.
    tokens: [B, T] int32. input_mask: [B, T] int, 0 for padding, else the token's segment id:
      1 for every real token of a left-padded row, or 1, 2, ... for the sequences packed into a
      row (each contiguous; attention stays within a segment, causal). Positions count the
      earlier tokens of the same segment (`attention.positions_from_segments`), so padding does
      not shift them and they restart for each packed sequence. Outputs at padding positions
      are not meaningful (a padding token attends only itself).
    head: False skips the output head: logits None and `hidden` [B, T, hidden_size] instead (see
      `output_logits`), so no [B, T, V] array is made.
    outputs: (start, stop), static ints with 0 <= start < stop <= T, or None: only positions
      [start, stop) are computed after the last layer's keys and values (see `Transformer`),
      columns from `stop` on not at all (causal: nothing before them sees them), and logits /
      values / hidden cover positions [start, stop) only.
    routing: [B, T, L_moe, k] int32 or None: experts replayed per position and MoE layer, -1
      where the model routes itself (`replay_window`; routing replay, `moe.replayed_routing`).
  Returns:
    ModelOutput: logits [B, T, V] float32 (position t predicts token t+1; score a token with
    `token_logp(logits[:, t - 1], tokens[:, t], temperature)`), values [B, T] float32 when
    config.value_head else None, cache None.
  Raises:
    flax.errors.ScopeParamShapeError: params do not match config (names the parameter);
    ValueError: outputs out of range."""
  if outputs is not None:
    if not 0 <= outputs[0] < outputs[1] <= tokens.shape[1]:
      raise ValueError(f"outputs={outputs} must be (start, stop) with 0 <= start < stop <= "
                       f"T = {tokens.shape[1]}")
    # No position before `stop` attends to a later one: those columns are left out.
    tokens, input_mask = tokens[:, :outputs[1]], input_mask[:, :outputs[1]]
    routing = None if routing is None else routing[:, :outputs[1]]
  token_mask = (input_mask > 0).astype(jnp.int32) if config.moe_layers else None
  return Transformer(config).apply({"params": params}, tokens, positions_from_segments(input_mask),
                                   attention_lib.segments_from_mask(input_mask), head=head,
                                   outputs=outputs, token_mask=token_mask,
                                   routing=routing if config.moe_layers else None)


def tempered_log_softmax(logits: jax.Array, temperature: float = 1.0) -> jax.Array:
  """log softmax(logits / temperature) over the last axis, NaN-free (temperature 0 reads as 1).

  Args:
    logits: [..., V] float; entries may be -inf (masked vocabulary) as long as each row has one
      finite entry. temperature: >= 0, Python float or scalar array.
  Returns:
    [..., V] float32, <= 0; exactly 0 at the most likely token; -inf at masked entries and where
    (logit - max logit) / temperature underflows (the greedy limit).

  The max logit is subtracted BEFORE dividing by the temperature: the most likely token's shifted
  logit is then exactly 0 and all others <= 0. Dividing first let XLA:CPU round logits / T
  differently in the max and in the exp (a fused multiply-add), off by ~ulp(logits / T), which
  overflowed exp and gave logp = +-inf at temperatures <= 1e-9. A Python-number temperature is
  floored at the smallest normal float32 (1.2e-38): XLA:CPU flushes subnormals to zero, and 0 / 0
  at the max would be NaN.
  """
  logits = logits.astype(jnp.float32)
  shifted = logits - jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
  tiny = float(jnp.finfo(jnp.float32).tiny)
  if isinstance(temperature, (int, float)):  # static: decided in Python, exact for subnormals
    scale = max(float(temperature), tiny) if temperature > 0 else 1.0
  else:  # traced: a subnormal temperature is already flushed to 0 on CPU, and reads as 1
    scale = jnp.where(temperature > 0, jnp.maximum(temperature, tiny), 1.0)
  return jax.nn.log_softmax(shifted / scale, axis=-1)


def token_logp(logits: jax.Array, targets: jax.Array, temperature: float = 1.0) -> jax.Array:
  """log softmax(logits / temperature)[target] (temperature 0 reads as 1), by
  `tempered_log_softmax`.

  Args:
    logits: [..., V] float. targets: [...] int32. temperature: >= 0, Python float or scalar array.
  Returns:
    [...] float32, <= 0; 0 for the most likely token; -inf only for a target whose logit is -inf
    (or whose probability underflows at a tiny temperature), never NaN; its gradient is finite.
  """
  logp = tempered_log_softmax(logits, temperature)
  return jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
