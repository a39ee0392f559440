"""Attention from segment ids and slots: who attends to whom without a [B, T, S] mask, and the
kernels that read that description.

Every row of a batch holds one or several sequences (segments 1, 2, ...; padding is segment 0)
in key slots 0..S-1; query t sits at slot `query_offset + t` (0 without a cache, the cache index
with one). Query t attends key s iff

  s <= query_offset + t  and  (segment(t) == segment(s) != 0  or  s == query_offset + t),

causal within a segment; a padding query (segment 0) attends its own slot only, as the dense
masks of before did (`causal | eye`), so every query has at least one key whenever its own slot
is among the keys (true for `segments_from_mask` and `cache_segments`). Rotary positions are a
separate input: they may restart per segment (`positions_from_segments`) while causality follows
the slots.

Kernels (`attend`, chosen by `model.attention_impl` via `resolve_attention_impl`):
- "cpu" / "standard": the dense paths of before on the materialised `dense_mask` (einsum tuned
  for XLA:CPU, `jax.nn.dot_product_attention`); [B, heads, T, S] float32 scores.
- "blockwise": plain JAX online softmax over key blocks inside a loop over query blocks
  (FlashAttention, Dao et al. 2022, with the online softmax of Milakov & Gimelshein 2018), with a
  custom VJP that recomputes each block's probabilities in the backward pass (FlashAttention-2's
  backward): memory O(T) per head beyond the inputs, never [T, S].
- "splash": jax's Pallas TPU kernel `jax.experimental.pallas.ops.tpu.splash_attention` with
  segment ids and a causal mask, under `jax.shard_map` over the mesh's batch axes (and heads over
  `tensor`); Pallas interpret mode off TPU.
- "cudnn": `jax.nn.dot_product_attention(implementation="cudnn")`, cuDNN's fused attention on
  NVIDIA GPUs, fed the dense mask (its public API has no segment ids; see `cudnn_attention`).

Shapes: q [B, T, H, D], k and v [B, S, K, D] (H a multiple of K: grouped-query attention), in
the compute dtype; scores scaled by D^-0.5 and softmax in float32; outputs [B, T, H, D] in q's
dtype.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rlscale.parallel import rules as rules_lib

# Query and key block sizes of "blockwise": the loop body's scores are [B, bq, H, bk] float32
# (4 MiB per row and head at 512 x 512), small next to a layer's weights, and large enough that
# XLA:CPU's dots stay efficient.
BLOCK_Q = 512
BLOCK_K = 512
# Splash's sequence tiles: the kernel needs lengths in multiples of 128 lanes; blocks of up to
# 512 are the sizes MaxText uses on v5e/v5p.
SPLASH_LANES = 128
SPLASH_BLOCK = 512
# The masked score, as the dense "cpu" path writes it: a fully masked row then averages the
# values it saw instead of producing NaN.
MASKED = float(np.finfo(np.float32).min)
SIXTEEN_BIT = (jnp.bfloat16, jnp.float16)


class AttentionSegments(NamedTuple):
  """Who attends to whom (see the module docstring), O(B (T + S)) integers.

  Attributes:
    query: [B, T] int32 >= 0, the segment of each query; 0 = padding.
    key: [B, S] int32 >= 0, the segment of each key slot; 0 = padding or a slot not yet written.
      With a cache, S may be below the cache's length: slots from S on are not attended.
    query_offset: int32 scalar (Python int or array), the key slot of query 0: 0 without a cache,
      the cache index with one. Kernels that require self-attention over the same slots
      (splash, cudnn) assume 0 whenever S == T.
  """
  query: jax.Array
  key: jax.Array
  query_offset: Union[int, jax.Array] = 0


def segments_from_mask(input_mask: jax.Array) -> AttentionSegments:
  """Self-attention over a row's own tokens: [B, T] int, 0 for padding, else the token's segment
  (1 for every real token of a left-padded row; 1, 2, ... for sequences packed into a row) ->
  AttentionSegments with query = key = input_mask as int32, offset 0."""
  ids = jnp.asarray(input_mask).astype(jnp.int32)
  return AttentionSegments(ids, ids, 0)


def cache_segments(slot_segments: jax.Array, cache_index, length: int) -> AttentionSegments:
  """`length` queries written into a KV cache at slots cache_index, cache_index + 1, ...

  Args:
    slot_segments: [B, S] int, the segment of every cache slot to attend (0: padding, or never
      written), the queries' slots included (they are written in this step). S may be shorter
      than the cache: a prefill into an empty cache passes its T prompt slots.
    cache_index: int32 scalar (Python int or array), the slot of the first query.
    length: T, the number of queries (the prompt length at prefill, 1 per decode step).
  Returns AttentionSegments(query = slot_segments[:, cache_index:cache_index + T],
  key = slot_segments, query_offset = cache_index).
  """
  ids = jnp.asarray(slot_segments).astype(jnp.int32)
  query = jax.lax.dynamic_slice_in_dim(ids, cache_index, length, axis=1)
  return AttentionSegments(query, ids, cache_index)


def query_window(segments: AttentionSegments, start: int, stop: int) -> AttentionSegments:
  """The description for queries [start, stop) only (static ints), keys unchanged."""
  return AttentionSegments(segments.query[:, start:stop], segments.key,
                           segments.query_offset + start)


def positions_from_segments(segment_ids: jax.Array) -> jax.Array:
  """Rotary positions of packed rows: [B, T] int (0 padding, else segment id) -> [B, T] int32,
  the number of earlier tokens of the same segment in the row (0 at each segment's first token
  and at padding).

  Each segment's tokens must be contiguous apart from padding between them (a packed row); a
  left-padded row (ids 0/1) gets `transformer.positions_from_mask`'s positions at its real
  tokens."""
  ids = jnp.asarray(segment_ids).astype(jnp.int32)
  real = ids > 0
  count = jnp.cumsum(real.astype(jnp.int32), axis=-1) - 1  # real tokens before t, at real t
  index = jnp.arange(ids.shape[-1], dtype=jnp.int32)
  last_real = jax.lax.cummax(jnp.where(real, index, -1), axis=ids.ndim - 1)
  # The segment of the last real token strictly before t (0 when none).
  before = jnp.pad(last_real[..., :-1], [(0, 0)] * (ids.ndim - 1) + [(1, 0)], constant_values=-1)
  previous = jnp.where(before >= 0, jnp.take_along_axis(ids, jnp.maximum(before, 0), axis=-1), 0)
  starts = real & (ids != previous)
  base = jax.lax.cummax(jnp.where(starts, count, -1), axis=ids.ndim - 1)
  return jnp.where(real, count - base, 0)


def _distinct_padding(ids: jax.Array, slots: jax.Array) -> jax.Array:
  """Segment ids where each padding slot gets a segment of its own, -1 - slot: equality of
  these ids is the whole segment rule (a padding query matches its own slot only), which is
  what splash's segment ids can express."""
  return jnp.where(ids > 0, ids, -1 - slots)


def allowed(q_ids: jax.Array, k_ids: jax.Array, q_slots: jax.Array, k_slots: jax.Array
            ) -> jax.Array:
  """The attention rule on raw segment ids: q_ids, q_slots [..., T, 1] and k_ids, k_slots
  [..., 1, S] (broadcasting int32) -> [..., T, S] bool."""
  same = _distinct_padding(q_ids, q_slots) == _distinct_padding(k_ids, k_slots)
  return same & (k_slots <= q_slots)


def dense_mask(segments: AttentionSegments) -> jax.Array:
  """The materialised [B, T, S] bool mask of `segments` (query t may attend key s): the input of
  the dense paths and the reference of the others."""
  t, s = segments.query.shape[-1], segments.key.shape[-1]
  q_slots = segments.query_offset + jnp.arange(t, dtype=jnp.int32)
  k_slots = jnp.arange(s, dtype=jnp.int32)
  return allowed(segments.query[:, :, None], segments.key[:, None, :], q_slots[:, None],
                 k_slots[None, :])


# ---------------------------------------------------------------------------------------------
# Choosing a kernel.

def current_platform() -> str:
  """The platform the program is being traced for: the abstract mesh's devices when one is in
  effect (`jax.sharding.use_abstract_mesh`: a CPU process compiling for a TPU slice says "tpu"),
  else `jax.default_backend()`."""
  mesh = jax.sharding.get_abstract_mesh()
  device = None if mesh.empty else getattr(mesh, "abstract_device", None)
  return device.platform if device is not None else jax.default_backend()


def resolve_attention_impl(setting: str, *, decode: bool, dtype, platform: Optional[str] = None,
                           window: bool = False) -> str:
  """The kernel `attend` runs for `model.attention_impl` = setting.

  "auto": "cpu" on CPU; for training and prefill (decode=False) "splash" on TPU and "cudnn" on
  NVIDIA GPUs with a 16-bit compute dtype (cuDNN has no float32 attention), else "standard";
  decode steps (decode=True: queries over a cache holding other slots) "standard" off CPU.
  Explicit "splash" / "cudnn" also fall back to "standard" in decode steps: both kernels are
  self-attention over the queries' own slots here. A query window without a cache (window=True:
  the last layer of a scoring pass computes only the response's queries over every key) runs
  "blockwise" wherever "splash", "cudnn" or "auto" off CPU would run, since its dense scores are
  [B, heads, Tr, T] float32 (63 GiB for one 32,768-token Qwen3-1.7B row). Other settings are
  returned as they are.

  Args: setting: one of config.ATTENTION_IMPLS. decode: the keys are not the queries' own T
    slots. dtype: the compute dtype. platform: "cpu", "gpu"/"cuda", "tpu", ...; default
    `current_platform()`, read when the model is traced. window: decode without a cache (see
    above).
  """
  platform = platform or current_platform()
  if window and (setting in ("splash", "cudnn") or (setting == "auto" and platform != "cpu")):
    return "blockwise"
  if setting in ("splash", "cudnn"):
    return "standard" if decode else setting
  if setting != "auto":
    return setting
  if platform == "cpu":
    return "cpu"
  if decode:
    return "standard"
  if platform == "tpu":
    return "splash"
  if platform in ("gpu", "cuda") and jnp.dtype(dtype) in [jnp.dtype(d) for d in SIXTEEN_BIT]:
    return "cudnn"
  return "standard"


def attend(q: jax.Array, k: jax.Array, v: jax.Array, segments: AttentionSegments, *, impl: str,
           cache_layout: bool = False) -> jax.Array:
  """Grouped-query attention of q [B, T, H, D] over keys and values under `segments` with kernel
  `impl` (a resolved setting, see `resolve_attention_impl`) -> [B, T, H, D] in q's dtype.

  k, v: [B, S, K, D], or with cache_layout the KV cache's [B, K, D, S] and [B, K, S, D]
  (`transformer.KVCache`; the "cpu" path reads them as they are, the others transposed).
  Raises: ValueError for an unknown impl."""
  if impl == "cpu":
    return cpu_attention(q, k, v, dense_mask(segments), cache_layout=cache_layout)
  if cache_layout:
    k, v = k.transpose(0, 3, 1, 2), v.transpose(0, 2, 1, 3)
  if impl == "standard":
    # The same mask as "cpu"; XLA's kernel also writes a large negative to masked scores.
    return jax.nn.dot_product_attention(q, k, v, mask=dense_mask(segments)[:, None])
  if impl == "blockwise":
    return blockwise_attention(q, k, v, segments)
  if impl == "splash":
    return splash_attention(q, k, v, segments)
  if impl == "cudnn":
    return cudnn_attention(q, k, v, segments)
  raise ValueError(f"unknown attention kernel {impl!r}")


# ---------------------------------------------------------------------------------------------
# Dense: the [B, heads, T, S] paths of before.

def cpu_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, *,
                  cache_layout: bool = False) -> jax.Array:
  """Dense attention tuned for XLA:CPU: q [B, T, H, D], k / v [B, S, K, D] (or the cache's
  [B, K, D, S] / [B, K, S, D] with cache_layout), mask [B, T, S] bool -> [B, T, H, D].

  Scores by einsum in the compute dtype, then float32 for the mask (masked scores set to the
  float32 minimum, so a fully masked row averages every value) and the softmax, as HF and gemma
  do; XLA:CPU has no bf16 x bf16 -> f32 dot (preferred_element_type fails at run time)."""
  b, t, h, d = q.shape
  num_kv = k.shape[1] if cache_layout else k.shape[2]
  key_axes, value_axes = ("bkds", "bksd") if cache_layout else ("bskd", "bskd")
  q = q.reshape(b, t, num_kv, h // num_kv, d)
  # One query per row over a cache (a decode step): a multiply-reduce streams the cache once; as
  # a dot it is a batch of B*K tiny [G, D] x [D, S] products, several times slower on CPU.
  decode = cache_layout and t == 1
  if decode:
    scores = jnp.sum(q[:, 0, :, :, :, None].astype(jnp.float32) * k[:, :, None], axis=-2)[:, :, :, None]
  else:
    scores = jnp.einsum(f"btkgd,{key_axes}->bkgts", q, k).astype(jnp.float32)
  scores = scores * (d ** -0.5)
  scores = jnp.where(mask[:, None, None, :, :], scores, MASKED)
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
  if decode:
    out = jnp.sum(probs[:, :, :, 0, :, None] * v[:, :, None], axis=3)[:, None]
  else:
    out = jnp.einsum(f"bkgts,{value_axes}->btkgd", probs, v)
  return out.reshape(b, t, h, d)


# ---------------------------------------------------------------------------------------------
# Blockwise: online softmax in plain JAX.

def _round_up(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


def _pad_axis(x: jax.Array, axis: int, length: int) -> jax.Array:
  """x zero-padded at the end of `axis` to `length`."""
  pad = [(0, 0)] * x.ndim
  pad[axis] = (0, length - x.shape[axis])
  return jnp.pad(x, pad)


class _Blocks(NamedTuple):
  """Static tiling of one blockwise call: query / key block sizes and counts."""
  bq: int
  bk: int
  nq: int
  nk: int


def blockwise_attention(q: jax.Array, k: jax.Array, v: jax.Array, segments: AttentionSegments,
                        *, block_q: Optional[int] = None, block_k: Optional[int] = None
                        ) -> jax.Array:
  """Memory-bounded attention, q [B, T, H, D], k / v [B, S, K, D] -> [B, T, H, D] (q.dtype).

  FlashAttention (Dao et al. 2022) in plain JAX: for each block of `block_q` queries, a loop over
  the key blocks up to the block's last query slot (blocks wholly in the future are skipped)
  keeps the running maximum, normaliser and weighted sum of the online softmax (Milakov &
  Gimelshein 2018); scores in float32, masked by `allowed` per block. The custom VJP keeps q, k,
  v, the output and the per-query maximum and normaliser ([B, T, H] float32) and recomputes each
  block's probabilities in the backward pass (FlashAttention-2's backward: an outer loop over key
  blocks, an inner one over the query blocks that see them). T and S are zero-padded to block
  multiples (padding slots attend only themselves and are cut). block_q / block_k: default
  BLOCK_Q / BLOCK_K, read at call time.

  The same numbers as the dense paths up to float summation order, gradients included, for
  every query with an allowed key. A query with none (impossible when its own slot is among
  the keys) averages the values of the key blocks visited instead of all values.
  """
  b, t, h, d = q.shape
  s, num_kv = k.shape[1], k.shape[2]
  bq, bk = min(block_q or BLOCK_Q, t), min(block_k or BLOCK_K, s)
  blocks = _Blocks(bq, bk, _round_up(t, bq) // bq, _round_up(s, bk) // bk)
  q_slots = segments.query_offset + jnp.arange(blocks.nq * bq, dtype=jnp.int32)
  k_slots = jnp.arange(blocks.nk * bk, dtype=jnp.int32)
  q_ids = _distinct_padding(_pad_axis(segments.query.astype(jnp.int32), 1, blocks.nq * bq), q_slots)
  k_ids = _distinct_padding(_pad_axis(segments.key.astype(jnp.int32), 1, blocks.nk * bk), k_slots)
  qg = _pad_axis(q, 1, blocks.nq * bq).reshape(b, blocks.nq * bq, num_kv, h // num_kv, d)
  out = _flash(blocks, qg, _pad_axis(k, 1, blocks.nk * bk), _pad_axis(v, 1, blocks.nk * bk),
               q_ids, k_ids, q_slots[0])
  return out.reshape(b, blocks.nq * bq, h, d)[:, :t]


def _block(x: jax.Array, index, size: int) -> jax.Array:
  """Block `index` (traced) of `size` along axis 1."""
  return jax.lax.dynamic_slice_in_dim(x, index * size, size, axis=1)


def _block_scores(q_blk, k_blk, q_id, k_id, q_slot, k_slot):
  """(scores [B, bq, K, G, bk] float32 scaled and masked, allowed [B, bq, 1, 1, bk]) of a query
  block [B, bq, K, G, D] against a key block [B, bk, K, D]."""
  scores = jnp.einsum("bqkgd,bskd->bqkgs", q_blk, k_blk).astype(jnp.float32)
  scores = scores * (q_blk.shape[-1] ** -0.5)
  ok = allowed(q_id[:, :, None], k_id[:, None, :], q_slot[:, None], k_slot[None, :])
  ok = ok[:, :, None, None, :]
  return jnp.where(ok, scores, MASKED), ok


def _key_blocks_seen(blocks: _Blocks, qi, offset):
  """Number of key blocks query block qi visits: those starting at or before its last slot."""
  last_slot = offset + (qi + 1) * blocks.bq - 1
  return jnp.clip(last_slot // blocks.bk + 1, 0, blocks.nk)


def _first_query_block(blocks: _Blocks, kj, offset):
  """The first query block that visits key block kj (see `_key_blocks_seen`)."""
  return jnp.clip((kj * blocks.bk - offset) // blocks.bq, 0, blocks.nq)


def _after(buffers, dep: jax.Array):
  """`buffers` made to depend on `dep` (+ 0 x one element of it): XLA then creates them when
  `dep` exists, inside this layer's computation. Left as constants, the zero fills of every
  layer's loop buffers are merged and hoisted, so all layers' buffers live at once (measured:
  1.4 GiB per layer of Qwen3-0.6B at 8 x 8,192 tokens on XLA:CPU). The same tie as
  `transformer.rematerialised_layer`'s."""
  tie = jnp.zeros((), jnp.float32) * dep.reshape(-1)[0].astype(jnp.float32)
  return jax.tree.map(lambda x: x + tie.astype(x.dtype), buffers)


def _write_block(buffer: jax.Array, block: jax.Array, index, size: int) -> jax.Array:
  """buffer [B, N, ...] with `block` [B, size, ...] written at rows index * size."""
  return jax.lax.dynamic_update_slice_in_dim(buffer, block.astype(buffer.dtype), index * size,
                                             axis=1)


def _flash_forward(blocks: _Blocks, q, k, v, q_ids, k_ids, offset):
  """(out [B, Tq, K, G, D] q.dtype, max and normaliser [B, Tq, K, G] float32) of padded,
  grouped q [B, Tq, K, G, D] and k / v [B, Sk, K, D]. Each query block's results are written
  into buffers made after q (`_after`), by a `fori_loop`."""
  q_slots = offset + jnp.arange(q.shape[1], dtype=jnp.int32)
  k_slots = jnp.arange(k.shape[1], dtype=jnp.int32)

  def query_block(qi, outputs):
    q_blk, q_id, q_slot = (_block(q, qi, blocks.bq), _block(q_ids, qi, blocks.bq),
                           jax.lax.dynamic_slice_in_dim(q_slots, qi * blocks.bq, blocks.bq))

    def key_block(kj, carry):
      m, l, acc = carry
      scores, _ = _block_scores(q_blk, _block(k, kj, blocks.bk), q_id, _block(k_ids, kj, blocks.bk),
                                q_slot, jax.lax.dynamic_slice_in_dim(k_slots, kj * blocks.bk, blocks.bk))
      m_new = jnp.maximum(m, jnp.max(scores, axis=-1))
      p = jnp.exp(scores - m_new[..., None])
      correction = jnp.exp(m - m_new)
      pv = jnp.einsum("bqkgs,bskd->bqkgd", p.astype(v.dtype), _block(v, kj, blocks.bk))
      return m_new, l * correction + jnp.sum(p, axis=-1), acc * correction[..., None] + pv.astype(jnp.float32)

    stats_shape = q_blk.shape[:-1]
    init = (jnp.full(stats_shape, MASKED, jnp.float32), jnp.zeros(stats_shape, jnp.float32),
            jnp.zeros(q_blk.shape, jnp.float32))
    m, l, acc = jax.lax.fori_loop(0, _key_blocks_seen(blocks, qi, offset), key_block, init)
    found = ((acc / _safe(l)[..., None]).astype(q.dtype), m, l)
    return tuple(_write_block(a, x, qi, blocks.bq) for a, x in zip(outputs, found))

  outputs = _after((jnp.zeros(q.shape, q.dtype), jnp.zeros(q.shape[:-1], jnp.float32),
                    jnp.zeros(q.shape[:-1], jnp.float32)), q)
  return jax.lax.fori_loop(0, blocks.nq, query_block, outputs)


def _safe(l: jax.Array) -> jax.Array:
  """The normaliser with 0 (a padded query that saw no key block) read as 1."""
  return jnp.where(l > 0, l, 1.0)


def _flash_backward(blocks: _Blocks, q, k, v, q_ids, k_ids, offset, out, m, l, d_out):
  """(dq, dk, dv) of `_flash_forward` for the output cotangent d_out, the probabilities of each
  (query block, key block) pair recomputed from the saved max m and normaliser l; the gradients
  accumulate in buffers made after d_out (`_after`)."""
  q_slots = offset + jnp.arange(q.shape[1], dtype=jnp.int32)
  k_slots = jnp.arange(k.shape[1], dtype=jnp.int32)
  # D_i = sum_d dO_i O_i: the softmax backward's row term (FlashAttention-2, Algorithm 2).
  delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)
  scale = q.shape[-1] ** -0.5

  def key_block(kj, grads):
    dq, dk_all, dv_all = grads
    k_blk, v_blk = _block(k, kj, blocks.bk), _block(v, kj, blocks.bk)
    k_id = _block(k_ids, kj, blocks.bk)
    k_slot = jax.lax.dynamic_slice_in_dim(k_slots, kj * blocks.bk, blocks.bk)

    def query_block(qi, carry):
      dq, dk, dv = carry
      q_blk, do_blk = _block(q, qi, blocks.bq), _block(d_out, qi, blocks.bq)
      scores, ok = _block_scores(q_blk, k_blk, _block(q_ids, qi, blocks.bq), k_id,
                                 jax.lax.dynamic_slice_in_dim(q_slots, qi * blocks.bq, blocks.bq),
                                 k_slot)
      p = jnp.exp(scores - _block(m, qi, blocks.bq)[..., None]) / _safe(_block(l, qi, blocks.bq))[..., None]
      dv = dv + jnp.einsum("bqkgs,bqkgd->bskd", p.astype(do_blk.dtype), do_blk).astype(jnp.float32)
      dp = jnp.einsum("bqkgd,bskd->bqkgs", do_blk, v_blk).astype(jnp.float32)
      # Masked scores are constants (jnp.where): no gradient reaches q or k through them.
      ds = jnp.where(ok, p * (dp - _block(delta, qi, blocks.bq)[..., None]), 0.0) * scale
      dq_blk = jnp.einsum("bqkgs,bskd->bqkgd", ds.astype(k_blk.dtype), k_blk).astype(jnp.float32)
      dq = jax.lax.dynamic_update_slice_in_dim(dq, _block(dq, qi, blocks.bq) + dq_blk,
                                               qi * blocks.bq, axis=1)
      dk = dk + jnp.einsum("bqkgs,bqkgd->bskd", ds.astype(q_blk.dtype), q_blk).astype(jnp.float32)
      return dq, dk, dv

    zeros = jnp.zeros(k_blk.shape, jnp.float32)
    dq, dk, dv = jax.lax.fori_loop(_first_query_block(blocks, kj, offset), blocks.nq, query_block,
                                   (dq, zeros, zeros))
    return dq, _write_block(dk_all, dk, kj, blocks.bk), _write_block(dv_all, dv, kj, blocks.bk)

  grads = _after((jnp.zeros(q.shape, jnp.float32), jnp.zeros(k.shape, k.dtype),
                  jnp.zeros(v.shape, v.dtype)), d_out)
  dq, dk, dv = jax.lax.fori_loop(0, blocks.nk, key_block, grads)
  return dq.astype(q.dtype), dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(blocks: _Blocks, q, k, v, q_ids, k_ids, offset):
  """Blockwise attention of grouped q [B, Tq, K, G, D] (padded to blocks) -> [B, Tq, K, G, D]."""
  return _flash_forward(blocks, q, k, v, q_ids, k_ids, offset)[0]


def _flash_fwd(blocks, q, k, v, q_ids, k_ids, offset):
  out, m, l = _flash_forward(blocks, q, k, v, q_ids, k_ids, offset)
  return out, (q, k, v, q_ids, k_ids, offset, out, m, l)


def _flash_bwd(blocks, saved, d_out):
  q, k, v, q_ids, k_ids, offset, out, m, l = saved
  dq, dk, dv = _flash_backward(blocks, q, k, v, q_ids, k_ids, offset, out, m, l, d_out)
  return dq, dk, dv, None, None, None


_flash.defvjp(_flash_fwd, _flash_bwd)


# ---------------------------------------------------------------------------------------------
# Splash: jax's Pallas TPU kernel.

def _splash_block(length: int) -> int:
  """The largest of 512, 256, 128 dividing `length` (a multiple of 128)."""
  return next(size for size in (SPLASH_BLOCK, 256, SPLASH_LANES) if length % size == 0)


def _splash_local(q, k, v, q_ids, k_ids, *, interpret: bool):
  """Splash on one shard: q [b, H, T, D] (pre-scaled), k / v [b, K, T, D], ids [b, T] (distinct
  padding) with T a multiple of 128 -> [b, H, T, D]."""
  from jax.experimental.pallas.ops.tpu import splash_attention as splash  # pylint: disable=g-import-not-at-top
  h, t = q.shape[1], q.shape[2]
  size = _splash_block(t)
  blocks = splash.BlockSizes(block_q=size, block_kv=size, block_kv_compute=size,
                             block_q_dkv=size, block_kv_dkv=size, block_kv_dkv_compute=size,
                             block_q_dq=size, block_kv_dq=size)
  mask = splash.MultiHeadMask([splash.CausalMask((t, t)) for _ in range(h)])
  kernel = splash.make_splash_mha(mask, block_sizes=blocks, head_shards=1, q_seq_shards=1,
                                  interpret=interpret)
  one_row = lambda q, k, v, qi, ki: kernel(q, k, v, segment_ids=splash.SegmentIds(qi, ki))  # noqa: E731
  return jax.vmap(one_row)(q, k, v, q_ids, k_ids)


def _splash_specs(mesh, rules, k_shape):
  """shard_map PartitionSpecs (heads-major q / k / v [B, H|K, T, D], segment ids [B, T]) over
  `mesh`: rows over the axes the rules give activation_batch, heads over those they give kv_heads
  when these divide the KV heads (then the query heads too: each shard keeps whole GQA groups)."""
  kv = rules_lib.logical_to_spec(("activation_batch", "kv_heads", None, None), k_shape, mesh, rules)
  return kv, jax.sharding.PartitionSpec(kv[0], None)


def splash_attention(q: jax.Array, k: jax.Array, v: jax.Array, segments: AttentionSegments, *,
                     interpret: Optional[bool] = None) -> jax.Array:
  """Causal self-attention by jax's Pallas TPU splash kernel (`make_splash_mha` with
  `CausalMask` and `SegmentIds`): q [B, T, H, D], k / v [B, T, K, D] over the queries' own slots
  (S == T, offset 0: training and prefill) -> [B, T, H, D].

  Padding gets distinct negative segment ids (a padding query attends its own slot, as the dense
  mask says); T is zero-padded to a multiple of 128. Under an abstract mesh (`jax.sharding.
  use_abstract_mesh`, as the update step and sampler trace) the kernel runs per shard in
  `jax.shard_map`: rows over the batch axes, heads over `tensor` when it divides the KV heads
  (axes from the logical rules in effect, `nn.logical_axis_rules`, else `rules.rules_for_mesh`).
  interpret: Pallas interpret mode (None: off only when tracing for a TPU).
  Raises: ValueError when S != T."""
  b, t, h, d = q.shape
  if k.shape[1] != t:
    raise ValueError(f"splash attention is self-attention over the queries' slots: keys {k.shape[1]} "
                     f"!= queries {t}")
  if interpret is None:
    interpret = current_platform() != "tpu"
  length = _round_up(t, SPLASH_LANES)
  slots = jnp.arange(length, dtype=jnp.int32)
  ids = lambda x: _distinct_padding(_pad_axis(x.astype(jnp.int32), 1, length), slots)  # noqa: E731
  heads_major = lambda x: _pad_axis(x, 1, length).transpose(0, 2, 1, 3)  # noqa: E731
  # The kernel does not scale the logits; scaling q first is what MaxText does.
  args = (heads_major(q * jnp.asarray(d ** -0.5, q.dtype)), heads_major(k), heads_major(v),
          ids(segments.query), ids(segments.key))
  local = functools.partial(_splash_local, interpret=interpret)
  mesh = jax.sharding.get_abstract_mesh()
  if not mesh.empty and mesh.size > 1:
    rules = nn.get_logical_axis_rules() or rules_lib.rules_for_mesh(mesh)
    heads, ids = _splash_specs(mesh, rules, args[1].shape)
    local = jax.shard_map(local, mesh=mesh, in_specs=(heads, heads, heads, ids, ids),
                          out_specs=heads, check_vma=False)
  out = local(*args)
  return out.transpose(0, 2, 1, 3)[:, :t]


# ---------------------------------------------------------------------------------------------
# cuDNN: jax's fused GPU attention.

def cudnn_attention(q: jax.Array, k: jax.Array, v: jax.Array, segments: AttentionSegments, *,
                    implementation: str = "cudnn") -> jax.Array:
  """`jax.nn.dot_product_attention(..., implementation="cudnn")`: q [B, T, H, D], k / v
  [B, S, K, D] in bfloat16 or float16 -> [B, T, H, D].

  jax 0.10.2's public API describes masks by `is_causal`, right-padding lengths
  (`query_seq_lengths` / `key_value_seq_lengths`) or a dense mask/bias; packed segments (cuDNN's
  THD layout, `q_offsets`) are only in the private `jax._src.cudnn` API and need Hopper. Left
  padding and packed rows are neither, so the segments go in as the dense [B, 1, T, S] mask,
  which jax turns into an additive bias in the compute dtype: the fused kernel still never
  stores [B, H, T, S] float32 scores, but the bias costs B * T * S * 2 bytes. T and S are padded
  to even lengths (cuDNN's bias pattern in training needs them). `implementation="xla"` runs the
  same call through XLA (the CPU test of this wrapper).
  Raises: ValueError for a float32 compute dtype (cuDNN attention is 16-bit or fp8 only)."""
  if implementation == "cudnn" and jnp.dtype(q.dtype) not in [jnp.dtype(x) for x in SIXTEEN_BIT]:
    raise ValueError(f"model.attention_impl 'cudnn' needs model.dtype bfloat16 or float16 (cuDNN "
                     f"attention has no float32 kernel), got {jnp.dtype(q.dtype).name}; use "
                     "'blockwise' or 'standard' for float32")
  t, s = q.shape[1], k.shape[1]
  even_t, even_s = _round_up(t, 2), _round_up(s, 2)
  padded = AttentionSegments(_pad_axis(segments.query, 1, even_t), _pad_axis(segments.key, 1, even_s),
                             segments.query_offset)
  out = jax.nn.dot_product_attention(
      _pad_axis(q, 1, even_t), _pad_axis(k, 1, even_s), _pad_axis(v, 1, even_s),
      mask=dense_mask(padded)[:, None], implementation=implementation)
  return out[:, :t]

