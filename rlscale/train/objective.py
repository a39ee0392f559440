"""The RL objective of one microbatch: what the update step differentiates.

`microbatch_loss` is the whole per-token objective of every algorithm in `rlscale.rl.presets`
(GRPO, DAPO, Dr. GRPO, PPO, ...): the policy loss of `rl.policy_loss`, the KL to the reference
policy, the entropy bonus, PPO's clipped value loss and a mixture-of-experts model's
load-balancing loss, aggregated with weights over the WHOLE minibatch, so that the losses of its
microbatches add up to the minibatch's loss (and their gradients to its gradient). To add a loss
term, add it to `terms` (a per-token [b, Tr] float32 array) and its coefficient to `coefs` here:
`rlscale.train.update.update_step` accumulates, reduces and logs whatever this returns.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp

from rlscale.model import moe
from rlscale.model.config import ModelConfig
from rlscale.model.transformer import forward, replay_window
from rlscale.rl import aggregation, off_policy
from rlscale.rl.kl import kl_divergence
from rlscale.rl.logprob import response_positions, response_states_logp
from rlscale.rl.losses import clipped_value_loss, importance_ratio
from rlscale.rl.masks import masked_sum
from rlscale.train.state import critic_config


def replayed(batch, total_len: int) -> Optional[jax.Array]:
  """forward's `routing` argument for a batch with "routing" ([b, Tr, L_moe, k] int32: the
  sampler's experts of each response token, replayed by the trainer, `transformer.replay_window`
  widened to the `total_len` = T positions), else None (the trainer routes by itself)."""
  return None if "routing" not in batch else replay_window(batch["routing"], total_len)


def scored_positions(mb) -> tuple[tuple[int, int], jax.Array]:
  """(outputs window for `forward`, the tokens its outputs predict [b, n] int32) of a microbatch.

  A padded microbatch ([b, T] rows, responses in the last Tr columns): the Tr positions that
  predict response tokens, so only they are computed past the last layer's keys and values, and
  the last token (it predicts nothing) not at all: the same numbers, less compute. A packed one
  (it has "loss_weights", `rlscale.packing.gather.pack_batch`): every position but the last,
  predicting tokens[:, 1:]."""
  tokens = mb["tokens"]
  if "loss_weights" in mb:
    return (0, tokens.shape[1] - 1), tokens[:, 1:]
  tr = mb["response_mask"].shape[-1]
  return response_positions(tokens.shape[1], tr), tokens[:, -tr:]


def microbatch_loss(trainables, mb, counts, *, model_config: ModelConfig, rl,
                    policy_loss: Callable, aux_parts: int = 1) -> tuple[jax.Array, dict]:
  """Loss of one microbatch as its share of the minibatch loss, and its metric sums.

  Args:
    trainables: (policy params, critic params or None).
    mb: the microbatch, a dict of arrays with b rows (Tp + Tr = T, responses in the last Tr
      columns): tokens [b, T] int32; input_mask [b, T] int32 (1 for real prompt and response
      tokens); response_mask [b, Tr] int32; old_logp [b, Tr] float32 (behaviour policy at
      rl.temperature); behaviour_logp [b, Tr] float32 with an off-policy correction (then
      old_logp is the proximal policy's, `rl.off_policy.corrected` weighs the policy loss);
      advantages [b] or [b, Tr] float32; ref_logp [b, Tr] float32 when
      rl.kl_coef > 0; old_values, returns [b, Tr] float32 with a critic; optionally
      sampler_experts [b, Tr, L_moe, k] int32 (logged as moe/routing_mismatch) and routing
      (the same, replayed: `replayed`). Or a packed microbatch (`rlscale.packing`): tokens and
      input_mask (segment ids) [b, W], every per-token array [b, W - 1] at the positions that
      predict its token (`scored_positions`), advantages per token, and loss_weights [b, W - 1]
      float32, the aggregation weights of the minibatch (used instead of computing them here).
    counts: `aggregation.aggregation_counts` of the whole minibatch's response_mask: {"tokens":
      N, "sequences": S} float32 scalars.
    model_config: the policy architecture (the critic's adds the value head, `critic_config`).
    rl: a resolved rl section (temperature, loss_agg_mode, loss_agg_norm, entropy_coef, kl_coef,
      kl_mode, kl_estimator, vf_coef, value_clip_eps).
    policy_loss: fn(logp, old_logp, advantages, mask) -> (per-token loss [b, Tr], aux dict of
      per-token [b, Tr] stats), `rl.losses.bind_policy_loss(rl.policy_loss, rl)`.
    aux_parts: the minibatch's microbatch count K: each microbatch's load-balancing loss is
      divided by it, so the K parts add up to their mean.

  Formula: with logp = log pi_theta(response token) at rl.temperature (float32 [b, Tr]) and
  per-token weights w = `aggregation.aggregation_weights(response_mask, rl.loss_agg_mode,
  counts=counts)` over the WHOLE minibatch (N real tokens, S non-empty responses; token-mean:
  w = mask / N; seq-mean-token-mean: mask / (S x the row's real tokens); seq-mean-token-sum:
  mask / S; seq-mean-token-sum-norm: mask / (S x C), C = rl.loss_agg_norm or Tr), so that the
  sum over the microbatches of sum(w x l) is the minibatch's aggregate of l,

    loss = sum w x [policy_loss(logp, old_logp, A)
                    + kl_coef x KL(logp, ref_logp)      (rl.kl_mode == "loss"; estimator
                                                         rl.kl_estimator, Schulman's k1/k2/k3)
                    - entropy_coef x H(pi_theta)         (entropy of the token distribution)
                    + vf_coef x clipped_value_loss(V, old_values, returns)]   (PPO critic)
           + router_aux_loss_coef x load_balancing_loss / aux_parts   (a model with experts:
             Switch Transformer, Fedus et al. 2021, over this microbatch's real tokens; HF
             Qwen3-MoE adds it to the LM loss with the same coefficient).

  Returns:
    (loss, float32 scalar with a gradient; stats, a dict of float32 values without gradient):
    "loss"; per term its share sum(w x term) before its coefficient ("pg_loss", "entropy_loss",
    "kl_loss" with rl.kl_mode "loss", "value_loss" with a critic); token sums over real tokens
    "<name>_sum" of entropy, approx_kl_old (k3 to old_logp), kl (rl.kl_coef > 0), the policy
    loss's aux stats (e.g. clip_fraction), value_mean / value_clip_fraction (critic) and
    moe/routing_mismatch (with sampler_experts); "ratio_sum", "ratio_min", "ratio_max" of
    pi_theta / pi_old over real tokens (float32 max / -max when the microbatch has none); for a
    model with experts "moe/aux_loss" (scalar, divided by aux_parts) and "moe/expert_tokens"
    ([L_moe, E] assignments per expert).
  """
  params, critic_params = trainables
  tokens, mask = mb["tokens"], mb["response_mask"]
  tr = mask.shape[-1]
  window, targets = scored_positions(mb)
  out = forward(params, model_config, tokens, mb["input_mask"], head=False, outputs=window,
                routing=replayed(mb, tokens.shape[1]))
  logp, entropy = response_states_logp(params, model_config, out.hidden, targets, rl.temperature)
  advantages = mb["advantages"]
  if advantages.ndim == 1:
    advantages = jnp.broadcast_to(advantages[:, None], mask.shape)
  pg_loss, aux = policy_loss(logp, mb["old_logp"], advantages, mask)
  if "behaviour_logp" in mb:  # stale rollouts: weighted by rl.off_policy_correction
    pg_loss, aux = off_policy.corrected(pg_loss, aux, mb["old_logp"], mb["behaviour_logp"], mask,
                                        rl)
  if not rl.entropy_coef:
    entropy = jax.lax.stop_gradient(entropy)
  terms = {"pg_loss": pg_loss, "entropy_loss": -entropy}
  coefs = {"pg_loss": 1.0, "entropy_loss": rl.entropy_coef}
  token_stats = {"entropy": entropy,
                 "approx_kl_old": jax.lax.stop_gradient(kl_divergence("k3", logp, mb["old_logp"]))}
  if out.moe is not None and "sampler_experts" in mb:
    trainer_experts = jnp.transpose(out.moe.experts, (1, 2, 0, 3))  # [b, Tr, L_moe, k]
    token_stats["moe/routing_mismatch"] = moe.routing_mismatch(mb["sampler_experts"],
                                                               trainer_experts)
  if rl.kl_coef > 0:  # the batch carries ref_logp (`update.uses_ref_logp`)
    kl = kl_divergence(rl.kl_estimator, logp, mb["ref_logp"])
    token_stats["kl"] = kl
    if rl.kl_mode == "loss":
      terms["kl_loss"], coefs["kl_loss"] = kl, rl.kl_coef
  if critic_params is not None:
    values = forward(critic_params, critic_config(model_config), tokens, mb["input_mask"],
                     head=False, outputs=window).values
    terms["value_loss"], value_aux = clipped_value_loss(values, mb["old_values"], mb["returns"],
                                                        value_clip_eps=rl.value_clip_eps)
    coefs["value_loss"] = rl.vf_coef
    aux = {**aux, **value_aux, "value_mean": values}
  token_stats.update({k: v for k, v in aux.items() if k != "ratio"})
  weights = mb.get("loss_weights")
  if weights is None:
    weights = aggregation.aggregation_weights(mask, rl.loss_agg_mode,
                                              norm_constant=rl.loss_agg_norm or tr, counts=counts)
  real = weights > 0
  share = {k: jnp.sum(jnp.where(real, v * weights, 0.0)) for k, v in terms.items()}
  loss = sum(coefs[k] * share[k] for k in share)
  moe_stats: dict[str, Any] = {}
  if out.moe is not None:
    aux_loss = moe.load_balancing_loss(out.moe, model_config.num_experts) / aux_parts
    loss = loss + model_config.router_aux_loss_coef * aux_loss
    moe_stats = {"moe/aux_loss": jax.lax.stop_gradient(aux_loss),
                 "moe/expert_tokens": out.moe.expert_tokens}
  ratio = jax.lax.stop_gradient(importance_ratio(logp, mb["old_logp"]))
  big = jnp.finfo(jnp.float32).max
  stats = {"loss": jax.lax.stop_gradient(loss), **moe_stats,
           **{k: jax.lax.stop_gradient(v) for k, v in share.items()},
           **{f"{k}_sum": masked_sum(jax.lax.stop_gradient(v), mask) for k, v in token_stats.items()},
           "ratio_sum": masked_sum(ratio, mask),
           "ratio_min": jnp.min(jnp.where(real, ratio, big)),
           "ratio_max": jnp.max(jnp.where(real, ratio, -big))}
  return loss, stats
