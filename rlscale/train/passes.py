"""The runner's forward passes over response tokens, jitted over a mesh in the global view: the
reference policy's log-probs (`ref_logp`), recomputed behaviour log-probs (`old_logp`, rl.old_logp
"recompute") and the PPO critic's values (`old_values`). Global arrays [B, ...] in, [B, Tr] out,
rows sharded over the mesh's batch axes; the same numbers on every mesh (up to float summation
order) as the update step's own forward (`objective.microbatch_loss`).
"""

from __future__ import annotations

from typing import Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from rlscale.model.config import ModelConfig
from rlscale.model import transformer
from rlscale.model.transformer import forward
from jax.sharding import NamedSharding, PartitionSpec

from rlscale.packing import gather, layout
from rlscale.parallel.data import batch_sharding, global_batch
from rlscale.parallel.mesh import batch_parallelism
from rlscale.parallel.rules import rules_for_mesh
from rlscale.rl.logprob import response_positions, response_states_logp
from rlscale.train.state import critic_config
from rlscale.train.objective import replayed
from rlscale.train.update import PASS_KEYS, interleaved_slices, microbatch_count


def _batch_inputs(batch) -> dict:
  """The keys a pass reads (`update.PASS_KEYS`) of `batch`."""
  return {k: batch[k] for k in PASS_KEYS if k in batch}


def _packed_pass(fn, model_config: ModelConfig, params, batch, plan) -> jax.Array:
  """`fn` over packed microbatches (`rlscale.packing`): plan [K, r, W] arrays; returns [B, Tr]
  float32 in the padded layout, 0 where response_mask is 0."""
  rows, tr = batch["response_mask"].shape

  def one(mb):
    tokens = mb["tokens"]
    out = forward(params, model_config, tokens, mb["input_mask"], head=False,
                  outputs=(0, tokens.shape[1] - 1))
    return fn(params, out, tokens[:, 1:])

  packed = jax.lax.map(one, {"tokens": gather.take(batch["tokens"], plan["token_src"]),
                             "input_mask": plan["segment_ids"]})
  out = gather.unpack_targets(packed, plan["target_src"], rows, tr)
  return jnp.where(batch["response_mask"] > 0, out, 0.0)


def _response_pass(fn, model_config: ModelConfig, mesh, param_shardings, *,
                   microbatches: Optional[int], rules,
                   packing: Optional[layout.Packing] = None) -> Callable:
  """pass(params, batch) -> [B, Tr] float32 of `fn(params, output, response_tokens)` (output:
  `forward(..., head=False)` at the Tr response-predicting positions, replaying batch["routing"]
  when the batch has it), 0 where response_mask is 0, run over `microbatch_count(microbatches,
  B, T)` strided slices of the global rows (`update.interleaved_slices`), jitted per batch
  layout over `mesh`."""
  rules = rules_for_mesh(mesh) if rules is None else rules

  def global_pass(params, batch, plan=None):
    if plan is not None:
      with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(rules):
        return _packed_pass(fn, model_config, params, batch, plan)
    tr = batch["response_mask"].shape[-1]
    rows, width = batch["tokens"].shape
    count = microbatch_count(microbatches, rows, width)

    def one(mb):
      tokens = mb["tokens"]
      out = forward(params, model_config, tokens, mb["input_mask"], head=False,
                    outputs=response_positions(tokens.shape[1], tr),
                    routing=replayed(mb, tokens.shape[1]))
      return jnp.where(mb["response_mask"] > 0, fn(params, out, tokens[:, -tr:]), 0.0)

    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(rules):
      if count == 1:
        return one(batch)
      # Slice c holds rows c, c + count, ...: every slice stays sharded over the batch axes.
      out = jax.lax.map(one, interleaved_slices(batch, count))
      return out.swapaxes(0, 1).reshape((rows,) + out.shape[2:])

  rows_2d = batch_sharding(mesh, 2)
  replicated = NamedSharding(mesh, PartitionSpec())
  jitted = {}
  shardings = [param_shardings]

  def run(params, batch):
    batch = _batch_inputs(batch)
    if not all(isinstance(v, jax.Array) for v in batch.values()):
      batch = global_batch(batch, mesh)
    if shardings[0] is None:
      shardings[0] = transformer.param_shardings(params, mesh, rules=rules)
    keys = tuple(sorted(batch))
    if keys not in jitted:  # with "routing" (replay) or without
      batch_shardings = {k: batch_sharding(mesh, len(batch[k].shape)) for k in keys}
      in_shardings = (shardings[0], batch_shardings) + ((replicated,) if packing else ())
      jitted[keys] = jax.jit(global_pass, in_shardings=in_shardings, out_shardings=rows_2d)
    if packing is None:
      return jitted[keys](params, batch)
    if "routing" in batch:
      raise ValueError("train.max_tokens_per_row (packing) cannot replay the sampler's routing "
                       "(model.moe_routing_replay)")
    plan = layout.pass_plan(
        jax.device_get(batch["input_mask"]), batch["response_mask"].shape[1],
        width=packing.width, max_tokens_per_microbatch=packing.max_tokens_per_microbatch,
        parts=batch_parallelism(mesh))
    return jitted[keys](params, batch, plan.arrays())

  return run


def make_logp_fn(model_config: ModelConfig, temperature: float, mesh, param_shardings, *,
                 microbatches: Optional[int] = 1, rules=None,
                 packing: Optional[layout.Packing] = None) -> Callable:
  """fn(params, batch) -> logp [B, Tr] float32 (global, rows over the mesh's batch axes): log
  pi(token) of each response token at `temperature` (log-softmax of logits / temperature), 0
  where response_mask is 0. For `ref_logp` (reference params) or recomputed `old_logp`.

  Args:
    model_config: the policy's ModelConfig. temperature: > 0 (rl.temperature).
    mesh: a `parallel.mesh.make_mesh` Mesh (one device: {data: 1}).
    param_shardings: NamedShardings of the params tree (`fn.state_shardings.params` of
      `update_fn.make_update_fn`), or None: derived from the first params' paths and shapes
      (`transformer.param_shardings` with `rules`).
    microbatches: forward slices of the global B rows (rl.microbatches; B must be divisible by
      it; None: `update.microbatch_count` chooses from B and T, whatever the device count).
    rules: logical axis rules of the activations (and of derived param shardings); None:
      `parallel.rules.rules_for_mesh(mesh)`.
    packing: `packing.layout.Packing` (train.max_tokens_per_row): the batch's sequences are
      packed into rows of that many tokens (`packing.layout.pass_plan`, microbatches by its
      token budget instead of `microbatches`; no routing replay), the same numbers up to float
      summation order; None: one padded row per response.
  Returns: fn taking params (placed by param_shardings) and a batch dict with tokens [B, T]
    int32, input_mask [B, T] int32, response_mask [B, Tr] int32, optionally routing
    [B, Tr, L_moe, k] int32 (replayed), as global arrays (`parallel.data.global_batch`) or this
    process's host rows; other keys are ignored.
  Raises: ValueError for temperature <= 0; when called, from `global_batch` for rows that do not
    split over the mesh."""
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature}")
  return _response_pass(
      lambda params, out, targets: response_states_logp(
          params, model_config, out.hidden, targets, temperature)[0],
      model_config, mesh, param_shardings, microbatches=microbatches, rules=rules,
      packing=packing)


def make_value_fn(model_config: ModelConfig, mesh, critic_shardings, *,
                  microbatches: Optional[int] = 1, rules=None,
                  packing: Optional[layout.Packing] = None) -> Callable:
  """fn(critic_params, batch) -> values [B, Tr] float32 (global): the PPO critic's V(s_t) before
  each response token (the value head at the position predicting it), 0 where response_mask is
  0, for the batch's `old_values`. `model_config` is the policy's; the critic adds the value
  head (`state.critic_config`). Arguments, batch and errors as `make_logp_fn`, critic_shardings
  those of the critic's params (`fn.state_shardings.critic_params`) or None."""
  return _response_pass(lambda params, out, targets: out.values, critic_config(model_config),
                        mesh, critic_shardings, microbatches=microbatches, rules=rules,
                        packing=packing)
