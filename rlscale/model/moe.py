"""Mixture-of-experts feed-forward (Qwen3-MoE / Switch style): a top-k router and SwiGLU experts.

Every token goes to its k highest-probability experts (no capacity factor, no token dropped), so
the sampler's KV-cached decode and the trainer's full forward compute the same function. Two
dispatches of the same numbers:
- "ragged": the N*k (token, expert) assignments are sorted by expert and each expert's contiguous
  block is multiplied by its kernels with one grouped matmul, `jax.lax.ragged_dot` (as SkyRL-tx
  and MaxText's ragged path): FLOPs proportional to k, not E.
- "dense": every expert on every token, the outputs masked by the routing weights (k/E of the
  work is used): the reference the ragged path is tested against, and faster on CPU for small
  shapes, where XLA lowers ragged_dot to an expansion (see DISPATCH_AUTO_CPU).

Parameter layout (HF `Qwen3MoeSparseMoeBlock`'s per-expert weights stacked): router
`gate/kernel` [hidden, E]; `experts/gate_proj` and `experts/up_proj` [E, hidden, I],
`experts/down_proj` [E, I, hidden] (I = moe_intermediate_size).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from rlscale.model.config import MOE_DISPATCHES as DISPATCHES, ModelConfig
from rlscale.parallel import mesh as mesh_lib

# "auto" on CPU: measured on the 2-core CPU (loaded by another job) for the built-in MoE config's
# shape (N = 1024 tokens, hidden 128, E = 8, k = 2, I = 192, float32, forward + backward jitted,
# /tmp script, mean of 10): dense 229 ms, ragged 268 ms; XLA:CPU lowers ragged_dot to an
# expansion over the groups, so the E/k extra FLOPs of dense cost less at this size. On
# accelerators the grouped matmul is the point (k/E of dense's FLOPs).
DISPATCH_AUTO_CPU = "dense"
DISPATCH_AUTO_ACCELERATOR = "ragged"


class MoEStats(NamedTuple):
  """Routing statistics of the MoE layers of one forward, stacked over those layers (L_moe).

  Attributes:
    expert_tokens: [L_moe, E] float32, per layer the number of (real token, chosen expert)
      assignments per expert (sums to k * rows).
    expert_prob: [L_moe, E] float32, per layer the sum over real tokens of the router
      probabilities softmax(router logits) (sums to rows); differentiable.
    rows: [L_moe] float32, the real tokens counted (the token mask's sum).
    experts: [L_moe, B, T', k] int32, each token's chosen experts in descending probability;
      T' = T, or the positions the last layer computes under `Transformer`'s outputs /
      last_only (every layer's choices at those positions). The counts and probabilities
      above cover each layer's own positions.
  """
  expert_tokens: jax.Array
  expert_prob: jax.Array
  rows: jax.Array
  experts: jax.Array


def resolve_dispatch(dispatch: str, platform: Optional[str] = None) -> str:
  """"ragged" or "dense" for `model.moe_dispatch`: "auto" picks DISPATCH_AUTO_CPU on CPU and
  DISPATCH_AUTO_ACCELERATOR on GPU/TPU (platform default: jax.default_backend()).

  Raises: ValueError for a name not in DISPATCHES."""
  if dispatch not in DISPATCHES:
    raise ValueError(f"model.moe_dispatch must be one of {DISPATCHES}, got {dispatch!r}")
  if dispatch != "auto":
    return dispatch
  cpu = (platform or jax.default_backend()) == "cpu"
  return DISPATCH_AUTO_CPU if cpu else DISPATCH_AUTO_ACCELERATOR


def route(router_logits: jax.Array, k: int, norm_topk_prob: bool
          ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Top-k routing (HF Qwen3MoeTopKRouter).

  Args:
    router_logits: [N, E] float, x @ gate for N tokens.
    k: experts per token (num_experts_per_tok), 1 <= k <= E.
    norm_topk_prob: renormalise the k chosen probabilities to sum to 1 (else they keep their
      softmax values, summing to <= 1).
  Returns:
    weights [N, k] float32 (p_top / sum p_top when norm_topk_prob, else p_top), experts [N, k]
    int32 in descending probability (ties: the lower index first, as lax.top_k), probs [N, E]
    float32 = softmax(router_logits) in float32.
  """
  probs = jax.nn.softmax(router_logits.astype(jnp.float32), axis=-1)
  top, experts = jax.lax.top_k(probs, k)
  if norm_topk_prob:
    top = top / jnp.sum(top, axis=-1, keepdims=True)
  return top, experts.astype(jnp.int32), probs


def replayed_routing(probs: jax.Array, own_experts: jax.Array, replay: jax.Array,
                     norm_topk_prob: bool) -> tuple[jax.Array, jax.Array]:
  """Routing replay (R3, "rollout routing replay", Ma et al. 2025): the trainer uses the experts
  the sampler chose, with gate weights from the trainer's own router probabilities.

  Args:
    probs: [N, E] float32, the trainer's softmax(router logits) (`route`'s third output).
    own_experts: [N, k] int32, the trainer's own top-k (`route`'s second output).
    replay: [N, k] int32, the sampler's experts for each token, or -1 in a row's first slot
      where nothing is replayed (that row keeps its own routing).
    norm_topk_prob: as `route`.
  Returns: (weights [N, k] float32, experts [N, k] int32): on replayed rows probs at the replayed
    experts (renormalised to sum 1 when norm_topk_prob), elsewhere exactly `route`'s. The
    gradient reaches the router through the weights, as with its own routing.
  """
  use = (replay[:, :1] >= 0)
  experts = jnp.where(use, replay, own_experts).astype(jnp.int32)
  top = jnp.take_along_axis(probs, experts, axis=-1)
  if norm_topk_prob:
    top = top / jnp.sum(top, axis=-1, keepdims=True)
  return top, experts


def routing_mismatch(sampler_experts: jax.Array, trainer_experts: jax.Array) -> jax.Array:
  """Per token, the fraction of MoE layers whose top-k expert *set* differs between the sampler
  and the trainer (`moe/routing_mismatch`; order within the k is ignored).

  Args: sampler_experts, trainer_experts: [..., L_moe, k] int (e.g. [B, Tr, L_moe, k]: the
    experts of each layer at the position predicting each response token).
  Returns: [...] float32 in [0, 1]; average it over real tokens (response_mask) for the metric.
  Raises: ValueError when the shapes differ."""
  if sampler_experts.shape != trainer_experts.shape:
    raise ValueError(f"routing shapes differ: sampler {sampler_experts.shape}, trainer "
                     f"{trainer_experts.shape}")
  differ = jnp.any(jnp.sort(sampler_experts, axis=-1) != jnp.sort(trainer_experts, axis=-1), -1)
  return jnp.mean(differ.astype(jnp.float32), axis=-1)


def load_balancing_loss(stats: MoEStats, num_experts: int) -> jax.Array:
  """Switch Transformer load-balancing loss (Fedus et al. 2021, eqs. 4-6) in HF Qwen3-MoE's form
  (`load_balancing_loss_func`): with counts and probabilities pooled over the MoE layers,
    f_e = sum_layers expert_tokens[:, e] / sum_layers rows   (fraction of tokens routed to e;
          sums to k over e),
    P_e = sum_layers expert_prob[:, e] / sum_layers rows     (mean router probability of e),
    aux = E * sum_e f_e * P_e.
  Balanced routing (f_e = k/E, P_e = 1/E) gives k; only P carries a gradient.

  Args: stats: MoEStats of one forward (or summed over microbatches). num_experts: E.
  Returns: scalar float32 (0 when no rows were counted)."""
  rows = jnp.maximum(jnp.sum(stats.rows), 1.0)
  f = jnp.sum(stats.expert_tokens, axis=0) / rows
  p = jnp.sum(stats.expert_prob, axis=0) / rows
  return num_experts * jnp.sum(jax.lax.stop_gradient(f) * p)


def expert_load_max(expert_tokens: jax.Array) -> jax.Array:
  """max over MoE layers and experts of E * (that expert's share of the layer's assignments).

  Args: expert_tokens: [L_moe, E] (`MoEStats.expert_tokens`, or its sum over microbatches).
  Returns: scalar float32: 1 when every expert gets k/E of the assignments, E when one expert
  gets all."""
  share = expert_tokens / jnp.maximum(jnp.sum(expert_tokens, -1, keepdims=True), 1.0)
  return expert_tokens.shape[-1] * jnp.max(share)


def dense_dispatch(x, weights, experts, gate, up, down):
  """Every expert on every token, combined with the routing weights (the reference path).

  Args: x [N, H]; weights [N, k] float32; experts [N, k] int32; gate, up [E, H, I]; down
    [E, I, H], all in the compute dtype.
  Returns: [N, H] in x's dtype: sum_j weights[n, j] * down_e(silu(gate_e x) * up_e x) with
    e = experts[n, j].
  """
  num_experts = gate.shape[0]
  # [N, E] combine weights: weight of expert e for token n, 0 where not chosen.
  combine = jnp.sum(jax.nn.one_hot(experts, num_experts, dtype=jnp.float32) * weights[..., None],
                    axis=1)
  h = nn.silu(jnp.einsum("nh,ehi->eni", x, gate)) * jnp.einsum("nh,ehi->eni", x, up)
  y = jnp.einsum("eni,eih->enh", h, down)
  return jnp.einsum("enh,ne->nh", y, combine.astype(y.dtype)).astype(x.dtype)


def _map_over_batch(fn, axis_size, in_batched, *args):
  """fn applied to each of axis_size slices by `lax.map` (unbatched arguments broadcast)."""
  args = [a if b else jnp.broadcast_to(a, (axis_size,) + a.shape) for a, b in zip(args, in_batched)]
  return jax.lax.map(lambda xs: fn(*xs), tuple(args))


@jax.custom_batching.custom_vmap
def _ragged_dot(x, w, group_sizes):
  return jax.lax.ragged_dot(x, w, group_sizes)


@_ragged_dot.def_vmap
def _ragged_dot_vmap(axis_size, in_batched, x, w, group_sizes):
  return _map_over_batch(jax.lax.ragged_dot, axis_size, in_batched, x, w, group_sizes), True


def _ragged_dot_grads(x, w, group_sizes, dy):
  _, vjp = jax.vjp(lambda x, w: jax.lax.ragged_dot(x, w, group_sizes), x, w)
  return vjp(dy)


@jax.custom_batching.custom_vmap
def _ragged_dot_bwd(x, w, group_sizes, dy):
  return _ragged_dot_grads(x, w, group_sizes, dy)


@_ragged_dot_bwd.def_vmap
def _ragged_dot_bwd_vmap(axis_size, in_batched, x, w, group_sizes, dy):
  return _map_over_batch(_ragged_dot_grads, axis_size, in_batched, x, w, group_sizes, dy), (True, True)


@jax.custom_vjp
def grouped_matmul(x, w, group_sizes):
  """`jax.lax.ragged_dot` that also works under `jax.vmap` with gradients.

  Args: x [M, K] with rows grouped contiguously; w [G, K, N]; group_sizes [G] int32, summing
    to M. Returns [M, N]: row m of group g is x[m] @ w[g].

  Why: jax 0.10 has no vmap rule for ragged_dot ("vmap over any dim but 0 - NYI") and no reverse
  mode through `custom_vmap`; the sharded update step vmaps the update over a batch axis of size
  1 (`rlscale.parallel.update`). So the forward and the backward (ragged_dot's own vjp) are each
  a custom_vmap whose rule maps over the batch with `lax.map` (one iteration at size 1), and this
  custom_vjp ties them together. Same numbers as ragged_dot and its vjp.
  """
  return _ragged_dot(x, w, group_sizes)


def _grouped_matmul_fwd(x, w, group_sizes):
  return _ragged_dot(x, w, group_sizes), (x, w, group_sizes)


def _grouped_matmul_bwd(saved, dy):
  x, w, group_sizes = saved
  dx, dw = _ragged_dot_bwd(x, w, group_sizes, dy)
  return dx, dw, None


grouped_matmul.defvjp(_grouped_matmul_fwd, _grouped_matmul_bwd)


def ragged_dispatch(x, weights, experts, gate, up, down):
  """Sort-by-expert dispatch with grouped matmuls (`jax.lax.ragged_dot`); same arguments and
  result as `dense_dispatch`.

  The N*k assignments are stably sorted by expert, each row gathers its token's x, the experts
  run as ragged_dot (`grouped_matmul`) over group sizes = assignments per expert, the rows are
  scaled by their routing weight and scatter-added back to their token. Nothing is dropped or
  padded.
  """
  return _sorted_experts(x, weights, experts, gate, up, down)


def _sorted_experts(x, weights, experts, gate, up, down):
  """`ragged_dispatch` where an expert id equal to E = gate.shape[0] means "not one of these
  experts": such assignments sort last, outside every group, and add nothing."""
  n, k = experts.shape
  num_experts = gate.shape[0]
  flat = experts.reshape(-1)
  order = jnp.argsort(flat, stable=True)
  token = order // k
  group_sizes = jnp.bincount(flat, length=num_experts + 1)[:num_experts].astype(jnp.int32)
  xs = x[token]
  h = nn.silu(grouped_matmul(xs, gate, group_sizes)) * grouped_matmul(xs, up, group_sizes)
  y = grouped_matmul(h, down, group_sizes)
  ours = (flat[order] < num_experts)[:, None]
  y = jnp.where(ours, y * weights.reshape(-1)[order][:, None].astype(y.dtype), 0)
  return jnp.zeros((n, x.shape[-1]), y.dtype).at[token].add(y).astype(x.dtype)


def expert_parallel(mesh, num_tokens: int) -> bool:
  """Whether `expert_parallel_dispatch` applies: `mesh` (an abstract mesh, possibly empty) has an
  `expert` axis above 1 and its batch axes divide the num_tokens rows."""
  if mesh_lib.EXPERT_AXIS not in mesh.shape or mesh.shape[mesh_lib.EXPERT_AXIS] == 1:
    return False
  return num_tokens % math.prod(mesh.shape[a] for a in mesh_lib.batch_axes(mesh)) == 0


def expert_parallel_dispatch(x, weights, experts, gate, up, down, mesh):
  """`ragged_dispatch` with the experts split over the `expert` axis of `mesh`, as an explicit
  exchange under `jax.shard_map`: each device all-gathers the token rows of its expert group (the
  X devices differing only in their `expert` index), runs those of their assignments that chose
  one of its own E / X experts through the grouped matmuls, and reduce-scatters the outputs back to
  the rows' devices (the all-gather / reduce-scatter form of expert parallelism; an all-to-all
  moves fewer rows but, dropless, needs the same worst-case buffers). With `tensor` above 1 each
  device holds a slice of every own expert's width I and the outputs are summed over `tensor`.

  Why not the exchange XLA derives from the shardings: the global argsort of `ragged_dispatch`
  does not partition, so each device then sorts and multiplies a large share of all N k
  assignments (measured: per-device buffers of half the global assignments on 64 devices).
  Here a device holds n X k assignment rows, n its own tokens.

  Args: as `dense_dispatch` (global view: x [N, H] with rows over the mesh's batch axes, kernels
    [E, ...] over `expert` and I over `tensor`); mesh: the abstract mesh in effect, with
    `expert_parallel(mesh, N)` true. Returns [N, H] in x's dtype, rows as x's.
  """
  batch = P(mesh_lib.batch_axes(mesh), None)
  expert_in, expert_out = P(mesh_lib.EXPERT_AXIS, None, "tensor"), P(mesh_lib.EXPERT_AXIS, "tensor", None)

  def local(x, weights, experts, gate, up, down):
    gather = functools.partial(jax.lax.all_gather, axis_name=mesh_lib.EXPERT_AXIS, tiled=True)
    own = gate.shape[0]
    first = jax.lax.axis_index(mesh_lib.EXPERT_AXIS) * own
    ids = gather(experts) - first
    ids = jnp.where((ids >= 0) & (ids < own), ids, own)
    y = _sorted_experts(gather(x), gather(weights), ids, gate, up, down)
    y = jax.lax.psum(y, "tensor")
    return jax.lax.psum_scatter(y, mesh_lib.EXPERT_AXIS, scatter_dimension=0, tiled=True)

  return jax.shard_map(local, mesh=mesh, in_specs=(batch, batch, batch, expert_in, expert_in,
                                                   expert_out), out_specs=batch)(
                           x, weights, experts, gate, up, down)


class MoEMLP(nn.Module):
  """Sparse MoE block: router gate, top-k, SwiGLU experts (HF Qwen3MoeSparseMoeBlock).

  Attributes: config, a ModelConfig with num_experts > 0 (E, num_experts_per_tok k,
    moe_intermediate_size I, norm_topk_prob, moe_dispatch).

  Call with x [B, T, H] (compute dtype), token_mask [B, T] {0,1} or None (all real): the
  tokens counted in the statistics (every token is still routed and computed), and replay
  [B, T, k] int32 or None: experts to use per token, -1 where the token routes itself
  (`replayed_routing`). Returns
  (y [B, T, H] in x's dtype, per-layer stats: expert_tokens [E], expert_prob [E], rows [],
  experts [B, T, k] int32; `Transformer` stacks them into MoEStats).
  """
  config: ModelConfig

  @nn.compact
  def __call__(self, x, token_mask=None, replay=None):
    c = self.config
    b, t, hidden = x.shape
    e, k, inter = c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size
    dtype, param_dtype = c.jnp_dtype, c.jnp_param_dtype
    router = nn.Dense(e, use_bias=False, dtype=dtype, param_dtype=param_dtype, name="gate")
    flat = x.reshape(b * t, hidden)
    weights, experts, probs = route(router(flat), k, c.norm_topk_prob)
    if replay is not None:
      weights, experts = replayed_routing(probs, experts, replay.reshape(b * t, k),
                                          c.norm_topk_prob)
    init = nn.initializers.lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(0,))
    kernels = ExpertKernels(e, hidden, inter, param_dtype, init, name="experts")
    gate, up, down = (w.astype(dtype) for w in kernels())
    dispatch = dense_dispatch if resolve_dispatch(c.moe_dispatch) == "dense" else ragged_dispatch
    mesh = jax.sharding.get_abstract_mesh()
    if dispatch is ragged_dispatch and expert_parallel(mesh, b * t):
      dispatch = functools.partial(expert_parallel_dispatch, mesh=mesh)
    y = dispatch(flat, weights.astype(dtype), experts, gate, up, down)
    mask = (jnp.ones((b * t,), jnp.float32) if token_mask is None
            else token_mask.reshape(b * t).astype(jnp.float32))
    counts = jnp.sum(jax.nn.one_hot(experts, e, dtype=jnp.float32), axis=1)  # [N, E]
    stats = (jnp.sum(counts * mask[:, None], 0), jnp.sum(probs * mask[:, None], 0),
             jnp.sum(mask), experts.reshape(b, t, k))
    return y.reshape(b, t, hidden), stats


class ExpertKernels(nn.Module):
  """The stacked expert kernels: gate_proj, up_proj [E, H, I] and down_proj [E, I, H] in
  param_dtype (lecun-normal over each expert's fan-in). Call () -> (gate, up, down)."""
  num_experts: int
  hidden: int
  inter: int
  param_dtype: jnp.dtype
  init: object

  @nn.compact
  def __call__(self):
    e, h, i = self.num_experts, self.hidden, self.inter
    return (self.param("gate_proj", self.init, (e, h, i), self.param_dtype),
            self.param("up_proj", self.init, (e, h, i), self.param_dtype),
            self.param("down_proj", self.init, (e, i, h), self.param_dtype))
