"""The RL update step on packed sequences: `update.update_step`'s updates with each minibatch's
sequences packed into rows of train.max_tokens_per_row tokens and split into microbatches by a
token budget (verl `use_dynamic_bsz`, SkyRL `max_tokens_per_microbatch`, tunix
`max_seq_token_per_tpu`), instead of one padded row per response split by a row count.

The padded batch stays the input; a host-made plan (`rlscale.packing`) says which of its tokens
go where, and the step gathers each update's microbatches from it on the device. The loss is the
padded step's, exactly: the aggregation weights of every loss mode are computed over the whole
minibatch in the padded layout (`aggregation.aggregation_weights` with the minibatch's token and
sequence counts) and moved with their tokens, so each microbatch's loss is its share of the
minibatch's, however the sequences fall into rows and microbatches; every per-token quantity
(log-probs, entropies, values, the KL and the policy and value losses) is the padded one up to
float summation order, since a packed token sees the same earlier tokens at the same positions.
The minibatches are the padded step's too (the same permutation, computed on the host).

The gradient noise scale's small batches are the microbatches, as in the padded step, but a
packed microbatch holds a token budget rather than a fixed number of responses: each small
gradient is still that of its own mean loss (scaled by the minibatch's over the microbatch's
denominator), averaged over the microbatches that hold loss tokens, and gns_batch_small is the
mean responses per such microbatch. The microbatches are dealt from length-sorted packed rows,
so they are not uniform samples of the minibatch's responses: B_simple from packed runs is an
approximation that the padded step's equal-sized, group-aligned slices do not need.
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import optax

from rlscale.model.config import ModelConfig
from rlscale.packing.gather import pack_batch, sequences_in
from rlscale.rl import aggregation
from rlscale.rl.losses import bind_policy_loss
from rlscale.train.state import TrainState
from rlscale.train.update import accumulate_and_apply, reduce_updates


def minibatch_weights(response_mask: jax.Array, rows: jax.Array, rl) -> tuple[jax.Array, dict]:
  """The aggregation weights of one minibatch in the padded layout, and its counts.

  Args: response_mask [B, Tr] int32 (the loss mask); rows [B / M] int32, the minibatch's rows;
    rl: a resolved rl section (loss_agg_mode, loss_agg_norm).
  Returns: (weights [B, Tr] float32: `aggregation.aggregation_weights` of the minibatch's rows
    over its own counts, 0 on every other row; counts {"tokens", "sequences"})."""
  mask = response_mask[rows]
  counts = aggregation.aggregation_counts(mask)
  weights = aggregation.aggregation_weights(
      mask, rl.loss_agg_mode, norm_constant=rl.loss_agg_norm or mask.shape[1], counts=counts)
  return jnp.zeros(response_mask.shape, jnp.float32).at[rows].set(weights), counts


def packed_update_step(state: TrainState, batch, plan, *, model_config: ModelConfig, rl_cfg,
                       optimizer: optax.GradientTransformation,
                       critic_optimizer: Optional[optax.GradientTransformation] = None):
  """One RL step with packed microbatches (pure: jit it, `update_fn.make_update_fn`'s `plan`).

  Args:
    state: TrainState. batch: the padded global batch of `update.update_step` (`check_batch`),
      without routing replay (a packed row's positions are not the sampler's).
    plan: the step's packing plan (`rlscale.packing.layout.update_plan`), int32 arrays: rows
      [U, B / M], the padded rows of each optimizer update's minibatch (U = rl.epochs x
      rl.minibatches, epoch-major); token_src, segment_ids [U, K, r, W]; target_src
      [U, K, r, W - 1] (`packing.plan`).
    model_config, rl_cfg, optimizer, critic_optimizer: as `update.update_step`.
  Returns: (state with step + 1, metrics): `update.update_step`'s metrics, with the noise scale's
    small batches as the module docstring says.
  """
  rl = rl_cfg
  policy_loss = bind_policy_loss(rl.policy_loss, rl)
  rows, response_len = batch["response_mask"].shape
  apply = functools.partial(accumulate_and_apply, model_config=model_config, rl=rl,
                            optimizer=optimizer, critic_optimizer=critic_optimizer,
                            policy_loss=policy_loss)

  def one_update(state, plan_u):
    weights, counts = minibatch_weights(batch["response_mask"], plan_u["rows"], rl)
    slices = pack_batch({**batch, "loss_weights": weights}, plan_u)
    tokens = jnp.sum(slices["response_mask"].astype(jnp.float32),
                     axis=tuple(range(1, slices["response_mask"].ndim)))
    sequences = jax.vmap(sequences_in, in_axes=(0, 0, None, None))(
        plan_u["target_src"], slices["response_mask"], rows, response_len)
    return apply(state, slices, counts, {"tokens": tokens, "sequences": sequences},
                 (tokens > 0).astype(jnp.float32),
                 batch_big=jnp.float32(plan_u["rows"].shape[0]))

  state, metrics = jax.lax.scan(one_update, state, plan)
  return state.replace(step=state.step + 1), reduce_updates(metrics, rl)
