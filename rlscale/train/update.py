"""The RL update step: a module-level pure function and its pmap wrapper (flax wmt / big_vision style).

One call consumes one rollout batch: epochs x minibatches optimizer updates, each accumulating
gradients over microbatches with `lax.scan` (memory is bounded by the microbatch). The batch arrives
split over the local devices ([D, B/D, ...], see `shard_batch`), the state replicated.

Device- and split-invariance: every loss is aggregated with weights that use the token and sequence
counts of the whole global minibatch (psum'd over devices, see `rl.aggregation`), so each device's
microbatch loss is its exact share of the global loss, the shares add up by a sum over microbatches
and one `lax.psum` of the gradients (the pmean of per-device means when shards are equal, and still
exact when they hold different numbers of tokens). Metrics are psum'd sums over psum'd counts. So
with rl.minibatches == 1 the update does not depend on the device count or the microbatch count
(up to float summation order). With minibatches > 1, each device shuffles and splits its own rows,
so which responses share a minibatch depends on the device count.

Batch (numpy or jax arrays, leading device axis; Tp + Tr = T, responses in the last Tr columns):
  tokens [D, b, T] int32; input_mask [D, b, T] (1 for real prompt and response tokens);
  response_mask [D, b, Tr]; old_logp [D, b, Tr] float32 (behaviour policy, at rl.temperature);
  ref_logp [D, b, Tr] float32 (needed when kl_coef > 0: a loss term, or logged when the KL is in
    the reward);
  advantages [D, b] or [D, b, Tr] float32; for PPO old_values and returns [D, b, Tr] float32.
Optional, for a model with experts: sampler_experts [D, b, Tr, L_moe, k] int32 (the sampler's
  routing, `Rollout.experts`: logged against the trainer's as moe/routing_mismatch) and routing
  [D, b, Tr, L_moe, k] int32 (the same, replayed by the trainer: `transformer.replay_window`).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import optax

from rlscale.model import moe
from rlscale.model.config import ModelConfig
from rlscale.model.transformer import forward, replay_window
from rlscale.rl import aggregation
from rlscale.rl.advantages import ADVANTAGE_ESTIMATORS
from rlscale.rl.kl import kl_divergence
from rlscale.rl.logprob import response_positions, response_states_logp
from rlscale.rl.losses import bind_policy_loss, clipped_value_loss, importance_ratio
from rlscale.rl.masks import masked_sum
from rlscale.rl.presets import resolve_rl_config, validate_rl_config
from rlscale.train.compile_options import CPU_UPDATE_OPTIONS, with_cpu_compiler_options
from rlscale.train.devices import AXIS_NAME, replicate, replicate_key, shard_batch, unreplicate  # noqa: F401 (re-exported for the runner)
from rlscale.train.optimizer import current_learning_rate
from rlscale.train.state import TrainState, critic_config

REQUIRED_KEYS = ("tokens", "input_mask", "response_mask", "old_logp", "advantages")
# What the log-prob and value passes read of a batch ("routing" only when replayed).
PASS_KEYS = ("tokens", "input_mask", "response_mask", "routing")
CRITIC_KEYS = ("old_values", "returns")
# Metrics reduced over the optimizer updates of one step by min / max instead of the mean.
_MIN_METRICS = ("ratio_min",)
_MAX_METRICS = ("ratio_max",)
# With rl.microbatches = None on a CPU, gradient-accumulation slices of at least this many tokens
# (the most slices that keep them this large): the step's activations then stay in the cache
# instead of streaming through memory. Measured on the 2-core CPU: the main job's training phase
# 1.20x faster with 4 slices of 64 x 16 tokens than with one (benchmarks/train_phase_ab.py,
# microbatches_4), W2's update 1.20x with 4 slices of 16 x 72 (0.85 -> 0.70 s); 16 slices of
# 4 x 72 tokens were slower again (0.75 s). Same gradient, up to float summation order.
CPU_MICROBATCH_TOKENS = 1024


def _whole_group_splits(rows: int, group_size: Optional[int]) -> list[int]:
  """Slice counts K that divide `rows`, keeping whole GRPO groups in every slice (rows / K a
  multiple of group_size) whenever rows is a multiple of group_size; ascending."""
  keep_groups = bool(group_size) and rows % group_size == 0
  return [k for k in range(1, rows + 1)
          if rows % k == 0 and (not keep_groups or (rows // k) % group_size == 0)]


def microbatch_count(setting: Optional[int], rows: int, width: int,
                     platform: Optional[str] = None, *, group_size: Optional[int] = None,
                     measure_noise_scale: bool = False) -> int:
  """Gradient-accumulation slices for `rows` rows of `width` tokens (one device's minibatch).

  Args:
    setting: rl.microbatches: an int is used as it is; None chooses K among the splits that keep
      whole groups (below): on CPU the largest K with rows / K * width >= CPU_MICROBATCH_TOKENS
      (1 when even one slice is smaller), elsewhere 1 (GPU/TPU matmuls want the whole
      minibatch); then, with measure_noise_scale, the smallest K >= 2 when that K is 1 (the
      gradient noise scale needs two slices: McCandlish et al. 2018), if a split allows one.
    rows, width: the minibatch's rows per device and its token width T.
    platform: "cpu", "gpu", "tpu"; default jax.default_backend().
    group_size: G (rl.group_size): when rows is a multiple of G, an automatic K gives every slice
      a multiple of G rows, so no GRPO group is divided; None: any divisor of rows.
    measure_noise_scale: train.measure_noise_scale on one device (with several devices each
      device's part is the small batch, see `update_step`).
  Returns: K >= 1 (divides rows when chosen). See `noise_scale_split_warning` for the batches
  that cannot give two slices.
  """
  if setting is not None:
    return setting
  splits = _whole_group_splits(rows, group_size)
  count = 1
  if (platform or jax.default_backend()) == "cpu":
    count = max([k for k in splits if rows // k * width >= CPU_MICROBATCH_TOKENS], default=1)
  if measure_noise_scale and count < 2:
    count = min([k for k in splits if k >= 2], default=count)
  return count


def noise_scale_split_warning(rl_cfg, num_devices: int) -> Optional[str]:
  """One line saying why train.measure_noise_scale gets no estimate at this batch, or None.

  On one device the small batches are the microbatches, so the estimate needs K >= 2 slices of
  a minibatch's B / minibatches rows: none when rl.microbatches is 1, or unset and no split into
  2 or more slices keeps whole groups of rl.group_size (`microbatch_count`). With several
  devices each device's part is a small batch: always measurable."""
  if num_devices > 1:
    return None
  rows = rl_cfg.prompts_per_step * rl_cfg.group_size // rl_cfg.minibatches
  if rl_cfg.microbatches is None:
    if len(_whole_group_splits(rows, rl_cfg.group_size)) > 1:
      return None
    why = (f"its {rows} rows per minibatch do not split into 2 or more slices of whole groups of "
           f"rl.group_size={rl_cfg.group_size}")
  elif rl_cfg.microbatches >= 2:
    return None
  else:
    why = "rl.microbatches=1 gives one slice (unset it, or set it >= 2)"
  return (f"warning: train.measure_noise_scale: the gradient noise scale cannot be measured at "
          f"this batch on one device: {why}")


def uses_critic(rl_cfg) -> bool:
  """Whether the resolved config's advantage estimator needs a critic (PPO's GAE)."""
  return ADVANTAGE_ESTIMATORS.get(rl_cfg.advantage).needs_critic


def uses_ref_logp(rl_cfg) -> bool:
  """Whether the batch must carry ref_logp (the KL to the reference policy is on)."""
  return rl_cfg.kl_coef > 0


def optimizer_args(rl_cfg, rl_steps: int, total_samples: Optional[int] = None) -> dict[str, int]:
  """`make_optimizer` keywords for a run of `rl_steps` update-step calls.

  Returns: batch_size, the responses per optimizer update (B / minibatches, the batch the LR rule
  scales with); total_steps, the optimizer updates (rl_steps x epochs x minibatches);
  updates_per_step (epochs x minibatches); step_samples, B = P x G responses per RL step; and
  budget_samples, the run's budget in responses (train.total_samples when given, else
  rl_steps x B), the default decay horizon of optim.schedule_unit "samples"."""
  step_samples = rl_cfg.prompts_per_step * rl_cfg.group_size
  updates_per_step = rl_cfg.epochs * rl_cfg.minibatches
  return {"batch_size": step_samples // rl_cfg.minibatches,
          "total_steps": rl_steps * updates_per_step,
          "updates_per_step": updates_per_step, "step_samples": step_samples,
          "budget_samples": rl_steps * step_samples if total_samples is None else total_samples}


def check_batch(batch, rl_cfg, num_devices: Optional[int] = None) -> None:
  """Raises ValueError for a missing key or inconsistent shapes (see the module docstring).

  With num_devices, arrays must carry a leading device axis of that size; without, the per-device
  layout [b, ...] is checked."""
  rl = rl_cfg
  required = list(REQUIRED_KEYS) + (list(CRITIC_KEYS) if uses_critic(rl) else [])
  if uses_ref_logp(rl):
    required.append("ref_logp")
  missing = [k for k in required if k not in batch]
  if missing:
    raise ValueError(f"update batch lacks {missing} (has {sorted(batch)})")
  lead = 0 if num_devices is None else 1
  shape = lambda k: tuple(batch[k].shape)  # noqa: E731
  if num_devices is not None and any(shape(k)[0] != num_devices for k in required):
    raise ValueError(f"every batch array needs a leading device axis of {num_devices} "
                     f"(use shard_batch): got { {k: shape(k) for k in required} }")
  b, t = shape("tokens")[lead:lead + 2]
  tr = shape("response_mask")[lead + 1]
  expect = {"tokens": (b, t), "input_mask": (b, t), "response_mask": (b, tr), "old_logp": (b, tr),
            "ref_logp": (b, tr), "old_values": (b, tr), "returns": (b, tr)}
  for key, want in expect.items():
    if key in required and shape(key)[lead:] != want:
      raise ValueError(f"batch[{key!r}] has per-device shape {shape(key)[lead:]}, expected {want} "
                       f"(b = {b} responses, T = {t} tokens, Tr = {tr} response tokens)")
  if shape("advantages")[lead:] not in ((b,), (b, tr)):
    raise ValueError(f"batch['advantages'] has per-device shape {shape('advantages')[lead:]}, "
                     f"expected ({b},) or ({b}, {tr})")
  if tr >= t:
    raise ValueError(f"response width Tr = {tr} must be below the sequence width T = {t}")


def _microbatch_loss(trainables, mb, counts, *, model_config, rl, policy_loss,
                     aux_parts: int = 1) -> tuple[Any, dict]:
  """Loss of one microbatch as its share of the global minibatch loss, and its metric sums.

  A model with experts adds router_aux_loss_coef * the load-balancing loss of this microbatch's
  forward (`moe.load_balancing_loss`, over its real tokens) / aux_parts, aux_parts being the
  minibatch's microbatches x devices: summed over them, the mean aux loss of the parts (HF adds
  its batch's aux loss to the LM loss with the same coefficient)."""
  params, critic_params = trainables
  tokens, mask = mb["tokens"], mb["response_mask"]
  tr = mask.shape[-1]
  # Only the Tr positions that predict response tokens are computed past the last layer's keys
  # and values, and the last token (it predicts nothing) not at all (`forward(outputs=...)`):
  # the same numbers, less compute.
  window = response_positions(tokens.shape[1], tr)
  out = forward(params, model_config, tokens, mb["input_mask"], head=False, outputs=window,
                routing=replayed(mb, tokens.shape[1]))
  hidden = out.hidden
  logp, entropy = response_states_logp(params, model_config, hidden, tokens[:, -tr:],
                                       rl.temperature)
  advantages = mb["advantages"]
  if advantages.ndim == 1:
    advantages = jnp.broadcast_to(advantages[:, None], mask.shape)
  pg_loss, aux = policy_loss(logp, mb["old_logp"], advantages, mask)
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
  if uses_ref_logp(rl):
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
  weights = aggregation.aggregation_weights(mask, rl.loss_agg_mode,
                                            norm_constant=rl.loss_agg_norm or tr, counts=counts)
  real = weights > 0
  share = {k: jnp.sum(jnp.where(real, v * weights, 0.0)) for k, v in terms.items()}
  loss = sum(coefs[k] * share[k] for k in share)
  moe_stats = {}
  if out.moe is not None:
    aux_loss = moe.load_balancing_loss(out.moe, model_config.num_experts) / aux_parts
    loss = loss + model_config.router_aux_loss_coef * aux_loss
    # "moe/expert_tokens" [L_moe, E] is reduced to moe/expert_load_max by `_reduce_stats`.
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


def replayed(batch, total_len: int):
  """forward's `routing` for a batch with "routing" ([b, Tr, L_moe, k], the sampler's experts to
  replay, `transformer.replay_window`), else None."""
  return None if "routing" not in batch else replay_window(batch["routing"], total_len)


def _split(tree, parts: int):
  """[n, ...] -> [parts, n / parts, ...] for every leaf."""
  return jax.tree.map(lambda x: x.reshape((parts, x.shape[0] // parts) + x.shape[1:]), tree)


def _own_mean_scale(mode: str, counts: dict, part_counts: dict) -> jax.Array:
  """Factor turning a part's share of the minibatch loss (weights over the minibatch's counts)
  into the part's own mean loss (weights over its own counts): denominator ratio of `mode`."""
  return aggregation.denominator(mode, counts) / aggregation.denominator(mode, part_counts)


def _minibatch_update(state: TrainState, mb, *, model_config, rl, optimizer, critic_optimizer,
                      policy_loss, measure_noise_scale=False):
  """One optimizer update on one (per-device part of a) minibatch; returns (state, metrics)."""
  local_rows = mb["response_mask"].shape[0]
  num_devices = jax.lax.axis_size(AXIS_NAME)
  microbatches = microbatch_count(rl.microbatches, local_rows, mb["tokens"].shape[1],
                                  group_size=rl.group_size,
                                  measure_noise_scale=measure_noise_scale and num_devices == 1)
  local_counts = aggregation.aggregation_counts(mb["response_mask"])
  counts = jax.lax.psum(local_counts, AXIS_NAME)
  mode = rl.loss_agg_mode
  trainables = (state.params, state.critic_params)
  grad_fn = jax.grad(functools.partial(_microbatch_loss, model_config=model_config, rl=rl,
                                       policy_loss=policy_loss,
                                       aux_parts=microbatches * num_devices), has_aux=True)

  # Gradient noise scale inputs (McCandlish et al. 2018): |g|^2 of small batches' own mean losses
  # and of the minibatch (the big batch). Several devices: each device's part is a small batch;
  # one device: each microbatch (with one microbatch, small = big carries no information).
  micro_gns = num_devices == 1 and microbatches > 1

  def accumulate(grad_sum, micro):
    grads, stats = grad_fn(trainables, micro, counts)
    if micro_gns:
      own = _own_mean_scale(mode, counts, aggregation.aggregation_counts(micro["response_mask"]))
      stats["micro_grad_sq"] = optax.tree_utils.tree_norm(grads[0], squared=True) * own ** 2
    return jax.tree.map(lambda a, g: a + g.astype(jnp.float32), grad_sum, grads), stats

  zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), trainables)
  local_grads, stats = jax.lax.scan(accumulate, zeros, _split(mb, microbatches))
  # On one device the psum is the identity, but XLA still copies every gradient for it.
  grads = jax.lax.psum(local_grads, AXIS_NAME) if num_devices > 1 else local_grads
  policy_grads, critic_grads = grads
  global_sq = optax.tree_utils.tree_norm(policy_grads, squared=True)
  if micro_gns:
    small_sq, small_rows = jnp.mean(stats.pop("micro_grad_sq")), local_rows // microbatches
  elif num_devices > 1:
    local_sq = optax.tree_utils.tree_norm(local_grads[0], squared=True)
    small_sq = jax.lax.pmean(local_sq * _own_mean_scale(mode, counts, local_counts) ** 2, AXIS_NAME)
    small_rows = local_rows
  else:
    small_sq, small_rows = global_sq, local_rows

  updates, opt_state = optimizer.update(policy_grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  metrics = {
      "grad_norm": jnp.sqrt(global_sq), "update_norm": optax.tree_utils.tree_norm(updates),
      "learning_rate": current_learning_rate(opt_state),
      "gns_grad_sq_small": small_sq, "gns_grad_sq_big": global_sq,
      "gns_batch_small": jnp.float32(small_rows),
      "gns_batch_big": jnp.float32(local_rows * num_devices),
  }
  state = state.replace(params=params, opt_state=opt_state)
  if state.critic_params is not None:
    critic_updates, critic_opt_state = critic_optimizer.update(critic_grads, state.critic_opt_state,
                                                               state.critic_params)
    state = state.replace(critic_params=optax.apply_updates(state.critic_params, critic_updates),
                          critic_opt_state=critic_opt_state)
    metrics["critic_grad_norm"] = optax.tree_utils.tree_norm(critic_grads)
  metrics.update(_reduce_stats(stats, counts))
  return state, metrics


def _reduce_stats(stats: dict, counts: dict) -> dict:
  """Microbatch stats [U] -> global metrics: loss shares summed, token sums over token counts,
  ratio extremes by pmin / pmax, the MoE layers' assignments per expert ([U, L_moe, E]) summed
  into moe/expert_load_max (`moe.expert_load_max`)."""
  out = {}
  for key, value in stats.items():
    if key == "moe/expert_tokens":
      out["moe/expert_load_max"] = moe.expert_load_max(jax.lax.psum(jnp.sum(value, 0), AXIS_NAME))
    elif key == "ratio_min":
      out[key] = jax.lax.pmin(jnp.min(value), AXIS_NAME)
    elif key == "ratio_max":
      out[key] = jax.lax.pmax(jnp.max(value), AXIS_NAME)
    elif key.endswith("_sum"):
      name = "ratio_mean" if key == "ratio_sum" else key[:-len("_sum")]
      out[name] = jax.lax.psum(jnp.sum(value), AXIS_NAME) / jnp.maximum(counts["tokens"], 1.0)
    else:
      out[key] = jax.lax.psum(jnp.sum(value), AXIS_NAME)
  return out


def update_step(state: TrainState, batch, rng: jax.Array, *, model_config: ModelConfig, rl_cfg,
                optimizer: optax.GradientTransformation,
                critic_optimizer: Optional[optax.GradientTransformation] = None,
                measure_noise_scale: bool = False):
  """One RL step on one device's part of a rollout batch (call inside pmap, axis "batch").

  Runs rl.epochs passes; each pass (shuffling the device's rows when rl.minibatches > 1) makes
  rl.minibatches optimizer updates, each accumulating gradients over rl.microbatches slices by
  `lax.scan` (rl.microbatches None: `microbatch_count` chooses from the minibatch's shape, the
  group size and `measure_noise_scale`, train.measure_noise_scale). Loss per token: policy loss (rl.policy_loss) + kl_coef * KL(logp, ref_logp) when
  rl.kl_mode == "loss" - entropy_coef * entropy (+ vf_coef * clipped value loss for the critic),
  aggregated by rl.loss_agg_mode over the global minibatch.

  Args:
    state: TrainState (this device's replica).
    batch: dict of per-device arrays [b, ...] (see the module docstring).
    rng: PRNG key; the device index is folded in.
    model_config: the policy architecture. rl_cfg: a resolved and validated `rl` section.
    optimizer / critic_optimizer: optax transformations of the policy / critic.

  Returns:
    (new state with step + 1, metrics: dict of float32 scalars, identical on every device):
    loss, pg_loss, kl_loss (when a loss term), entropy_loss, value_loss (PPO) — each aggregated
    by the mode, coefficients not applied except in `loss`; token means kl, entropy,
    approx_kl_old (k3 to the behaviour policy), sampler_trainer_k3 (with rl.old_logp "sampler":
    approx_kl_old of the first optimizer update, before any parameter change, i.e. the mean k3
    between the trainer's and the sampler's log-probs), clip_fraction, dual_clip_fraction (dual-clip),
    value_clip_fraction, value_mean (PPO), ratio_mean; for a model with experts moe/aux_loss
    (the load-balancing loss, before its coefficient; the loss includes coef x it) and
    moe/expert_load_max (E x the largest expert's share of a layer's assignments, 1 = balanced)
    and, with sampler_experts in the batch, moe/routing_mismatch (`moe.routing_mismatch`: the
    token mean of the fraction of MoE layers whose top-k set differs from the sampler's, in the
    first optimizer update, with the parameters that sampled; 0 under routing replay);
    ratio_min, ratio_max; grad_norm (before
    clipping), update_norm, learning_rate, critic_grad_norm (PPO); the gradient noise scale
    inputs (McCandlish et al. 2018; B_simple = tr(Sigma) / |G|^2 from them, see design.md):
    gns_grad_sq_small, |g_small|^2 averaged over the small batches, each gradient of its own mean
    loss (with several devices a device's part of the minibatch, on one device a microbatch),
    gns_grad_sq_big, |g_big|^2 of the minibatch's gradient (= grad_norm^2), and gns_batch_small,
    gns_batch_big, the responses in each (B_small, B_big; equal, so no estimate, on one device
    with rl.microbatches = 1). All averaged over the epochs x minibatches updates, except
    ratio_min / ratio_max (extremes), learning_rate (last), sampler_trainer_k3 and
    moe/routing_mismatch (first).
  """
  rl = rl_cfg
  rng = jax.random.fold_in(rng, jax.lax.axis_index(AXIS_NAME))
  policy_loss = bind_policy_loss(rl.policy_loss, rl)
  minibatch_update = functools.partial(
      _minibatch_update, model_config=model_config, rl=rl, optimizer=optimizer,
      critic_optimizer=critic_optimizer, policy_loss=policy_loss,
      measure_noise_scale=measure_noise_scale)
  local_batch = batch["tokens"].shape[0]

  def epoch(state, index):
    rows = batch
    if rl.minibatches > 1:
      order = jax.random.permutation(jax.random.fold_in(rng, index), local_batch)
      rows = jax.tree.map(lambda x: x[order], batch)
    return jax.lax.scan(minibatch_update, state, _split(rows, rl.minibatches))

  state, metrics = jax.lax.scan(epoch, state, jnp.arange(rl.epochs))
  reduced = {}
  for key, value in metrics.items():
    if key in _MIN_METRICS:
      reduced[key] = jnp.min(value)
    elif key in _MAX_METRICS:
      reduced[key] = jnp.max(value)
    elif key == "learning_rate":
      reduced[key] = value[-1, -1]
    else:
      reduced[key] = jnp.mean(value)
  if rl.old_logp == "sampler":
    # The first optimizer update scores the batch with the parameters that sampled it: its k3 to
    # old_logp is the sampler-trainer mismatch, free of any update's drift.
    reduced["sampler_trainer_k3"] = metrics["approx_kl_old"][0, 0]
  if "moe/routing_mismatch" in metrics:  # the sampler's parameters: the first update's forward
    reduced["moe/routing_mismatch"] = metrics["moe/routing_mismatch"][0, 0]
  return state.replace(step=state.step + 1), reduced


def _num_local_devices(devices) -> int:
  """Devices this process feeds: len(devices), or all local devices when devices is None."""
  return len(devices) if devices is not None else jax.local_device_count()


def make_update_fn(model_config: ModelConfig, rl_cfg, optimizer: optax.GradientTransformation, *,
                   critic_optimizer: Optional[optax.GradientTransformation] = None,
                   devices=None, cpu_compiler_options=CPU_UPDATE_OPTIONS,
                   measure_noise_scale: bool = False) -> Callable:
  """`update_step` pmapped with axis "batch" and the state donated, over `devices`, or by default
  over every device of every process (multi-host: each process feeds its local devices, and the
  psums span all processes, so the loss is over all processes' responses).

  On CPU the step's executable is compiled with `cpu_compiler_options` (default: YNNPACK dot
  fusions, see `rlscale.train.compile_options`; {} or None for XLA's defaults), once per batch
  shape; the sampler and every other function keep XLA's defaults. Ignored on GPU/TPU.
  `measure_noise_scale` (train.measure_noise_scale) makes an unset rl.microbatches give two or
  more slices on one device where whole groups allow it (`microbatch_count`).

  Returns fn(state, batch, rng) -> (state, metrics): state replicated ([D, ...] leaves), batch
  with a leading device axis (`shard_batch`), rng one key or D keys (`replicate_key`); metrics
  are [D] arrays holding the same value on every device. `fn.pmapped` is the pmapped step without
  the checks (rng must be D keys), e.g. to `.lower()` it for abstract inputs, and
  `fn.compiler_options` the XLA options its executable gets here ({} where none apply).

  Resolves and validates `rl_cfg` (`presets.resolve_rl_config`, `presets.validate_rl_config`),
  once, then builds with `make_update_fn_from_checked`; a caller holding an already checked rl
  section (the runner: `builders.CheckedConfig.rl`) calls that directly.

  Raises: ValueError for an invalid rl config (naming the field), or, when called, for a batch
  with missing keys or inconsistent shapes.
  """
  rl = resolve_rl_config(rl_cfg)
  validate_rl_config(rl, num_devices=_num_local_devices(devices))
  return make_update_fn_from_checked(model_config, rl, optimizer,
                                     critic_optimizer=critic_optimizer, devices=devices,
                                     cpu_compiler_options=cpu_compiler_options,
                                     measure_noise_scale=measure_noise_scale)


def make_update_fn_from_checked(model_config: ModelConfig, rl,
                                optimizer: optax.GradientTransformation, *,
                                critic_optimizer: Optional[optax.GradientTransformation] = None,
                                devices=None, cpu_compiler_options=CPU_UPDATE_OPTIONS,
                                measure_noise_scale: bool = False) -> Callable:
  """`make_update_fn` for an `rl` section already resolved and validated (e.g.
  `builders.CheckedConfig.rl`, from `builders.check_config`): no config check runs here, so each
  runs once per run. Arguments and the returned fn as for `make_update_fn`.

  Raises: ValueError, when called, for a state without critic_params that a critic needs, or for
  a batch with missing keys or inconsistent shapes.
  """
  num_devices = _num_local_devices(devices)
  if uses_critic(rl) and critic_optimizer is None:
    critic_optimizer = optimizer
  step = functools.partial(update_step, model_config=model_config, rl_cfg=rl, optimizer=optimizer,
                           critic_optimizer=critic_optimizer,
                           measure_noise_scale=measure_noise_scale)
  raw = jax.pmap(step, axis_name=AXIS_NAME, donate_argnums=(0,), devices=devices)
  pmapped = with_cpu_compiler_options(raw, cpu_compiler_options, devices)

  def update(state: TrainState, batch, rng: jax.Array):
    if uses_critic(rl) and state.critic_params is None:
      raise ValueError(f"rl.advantage={rl.advantage!r} trains a critic: create the state with "
                       "critic_params (see state.critic_params_from_policy)")
    check_batch(batch, rl, num_devices)
    if rng.ndim == 0 or (rng.dtype == jnp.uint32 and rng.ndim == 1):
      rng = replicate_key(rng, num_devices)
    return pmapped(state, dict(batch), rng)

  # The pmapped step and the options its executable is compiled with, to `.lower(...)` and
  # compile it for abstract inputs (train/memory.py).
  update.pmapped = raw
  update.compiler_options = {} if pmapped is raw else dict(cpu_compiler_options)
  return update


def _forward_response(fn, model_config: ModelConfig, microbatches: Optional[int], devices):
  """pmapped fn(params, batch) -> [D, b, Tr] of `fn(params, output, response_tokens)` over
  microbatches (output: `forward(..., head=False)` at the Tr response-predicting positions only,
  replaying batch["routing"] when the batch has it), 0 where response_mask is 0."""

  def per_device(params, batch):
    tr = batch["response_mask"].shape[-1]

    def one(mb):
      tokens = mb["tokens"]
      out = forward(params, model_config, tokens, mb["input_mask"], head=False,
                    outputs=response_positions(tokens.shape[1], tr),
                    routing=replayed(mb, tokens.shape[1]))
      return jnp.where(mb["response_mask"] > 0, fn(params, out, tokens[:, -tr:]), 0.0)

    count = microbatch_count(microbatches, *batch["tokens"].shape)
    parts = _split({k: batch[k] for k in PASS_KEYS if k in batch}, count)
    out = jax.lax.map(one, parts)
    return out.reshape((-1,) + out.shape[2:])

  return jax.pmap(per_device, axis_name=AXIS_NAME, devices=devices)


def make_logp_fn(model_config: ModelConfig, temperature: float, *,
                 microbatches: Optional[int] = 1, devices=None) -> Callable:
  """pmapped fn(params, batch) -> logp [D, b, Tr] float32: log pi(token) of each response token at
  `temperature` (0 where response_mask is 0). For `ref_logp` (reference params) or recomputed
  `old_logp`. batch needs tokens, input_mask, response_mask with a leading device axis; the forward
  runs in `microbatches` slices (b must divide; None: `microbatch_count` chooses)."""
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature}")
  return _forward_response(
      lambda params, out, targets: response_states_logp(
          params, model_config, out.hidden, targets, temperature)[0],
      model_config, microbatches, devices)


def make_value_fn(model_config: ModelConfig, *, microbatches: Optional[int] = 1,
                  devices=None) -> Callable:
  """pmapped fn(critic_params, batch) -> values [D, b, Tr] float32: the PPO critic's V(s_t) before
  each response token (0 where response_mask is 0), for the batch's `old_values`. `model_config` is
  the policy's; the critic adds the value head."""
  return _forward_response(
      lambda params, out, targets: out.values,
      critic_config(model_config), microbatches, devices)
