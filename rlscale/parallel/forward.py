"""The runner's forward passes over response tokens (reference / recomputed behaviour log-probs,
the PPO critic's values) jitted over a mesh in the global view: the successors of
`rlscale.train.update.make_logp_fn` / `make_value_fn`'s pmapped passes, the same numbers (up to
float summation order) on global arrays [B, ...] instead of [D, B / D, ...].
"""

from __future__ import annotations

from typing import Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from rlscale.model.config import ModelConfig
from rlscale.model.transformer import forward
from rlscale.parallel.data import batch_sharding
from rlscale.parallel.mesh import batch_parallelism
from rlscale.parallel.rules import DEFAULT_RULES
from rlscale.rl.logprob import response_positions, response_states_logp
from rlscale.train.state import critic_config
from rlscale.train.update import PASS_KEYS, microbatch_count, replayed


def _response_pass(fn, model_config: ModelConfig, mesh, param_shardings, *,
                   microbatches: Optional[int], rules) -> Callable:
  """jitted pass(params, batch) -> [B, Tr] float32 of `fn(params, output, response_tokens)`
  (output: `forward(..., head=False)` at the Tr response-predicting positions, replaying
  batch["routing"] when the batch has it), 0 where response_mask is 0, in `microbatches` slices of the rows per batch part (as each device of
  the pmapped pass slices its own rows)."""

  def global_pass(params, batch):
    tr = batch["response_mask"].shape[-1]
    rows, width = batch["tokens"].shape
    # Slices of each part's rows, the count the pmapped pass would take for rows / parts.
    count = microbatch_count(microbatches, rows // batch_parallelism(mesh), width)

    def one(mb):
      tokens = mb["tokens"]
      out = forward(params, model_config, tokens, mb["input_mask"], head=False,
                    outputs=response_positions(tokens.shape[1], tr),
                    routing=replayed(mb, tokens.shape[1]))
      return jnp.where(mb["response_mask"] > 0, fn(params, out, tokens[:, -tr:]), 0.0)

    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(rules):
      if count == 1:
        return one(batch)
      # Slice c holds rows c, c + count, ...: every slice spans every part's rows, so the
      # slices stay sharded over the batch axes as the whole batch is.
      parts = jax.tree.map(lambda x: x.reshape((rows // count, count) + x.shape[1:]).swapaxes(0, 1),
                           _batch_inputs(batch))
      out = jax.lax.map(one, parts)
      return out.swapaxes(0, 1).reshape((rows,) + out.shape[2:])

  rows_2d = batch_sharding(mesh, 2)
  jitted = {}

  def run(params, batch):
    keys = tuple(sorted(batch))
    if keys not in jitted:  # with "routing" (replay) or without
      shardings = {k: batch_sharding(mesh, 4 if k == "routing" else 2) for k in keys}
      jitted[keys] = jax.jit(global_pass, in_shardings=(param_shardings, shardings),
                             out_shardings=rows_2d)
    return jitted[keys](params, batch)

  return run


def _batch_inputs(batch) -> dict:
  return {k: batch[k] for k in PASS_KEYS if k in batch}


def make_sharded_logp_fn(model_config: ModelConfig, temperature: float, mesh, param_shardings, *,
                         microbatches: Optional[int] = 1, rules=DEFAULT_RULES) -> Callable:
  """fn(params, batch) -> logp [B, Tr] float32 (global, rows over data x fsdp): log pi(token) of
  each response token at `temperature`, 0 where response_mask is 0 (`update.make_logp_fn` on a
  mesh).

  Args:
    model_config: the policy's ModelConfig. temperature: > 0. mesh: a `mesh.make_mesh` Mesh.
    param_shardings: NamedShardings of the params tree (`fn.state_shardings.params` of
      `update.make_sharded_update_fn`). microbatches: rl.microbatches (None: chosen per part as
      `update.microbatch_count`). rules: logical axis rules of the activations.
  Returns: fn taking params (global arrays) and a batch dict with tokens [B, T], input_mask
    [B, T], response_mask [B, Tr] (global arrays, `data.global_batch`; other keys ignored).
  Raises: ValueError for temperature <= 0."""
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature}")
  jitted = _response_pass(
      lambda params, out, targets: response_states_logp(
          params, model_config, out.hidden, targets, temperature)[0],
      model_config, mesh, param_shardings, microbatches=microbatches, rules=rules)
  return lambda params, batch: jitted(params, _batch_inputs(batch))


def make_sharded_value_fn(model_config: ModelConfig, mesh, critic_shardings, *,
                          microbatches: Optional[int] = 1, rules=DEFAULT_RULES) -> Callable:
  """fn(critic_params, batch) -> values [B, Tr] float32 (global): the PPO critic's V(s_t) before
  each response token, 0 where response_mask is 0 (`update.make_value_fn` on a mesh).
  `model_config` is the policy's; the critic adds the value head. Arguments as
  `make_sharded_logp_fn`, critic_shardings those of the critic's params."""
  jitted = _response_pass(lambda params, out, targets: out.values, critic_config(model_config),
                          mesh, critic_shardings, microbatches=microbatches, rules=rules)
  return lambda params, batch: jitted(params, _batch_inputs(batch))

