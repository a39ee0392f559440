"""The RL update step: one pure function in the global view (flax lm1b / big_vision / MaxText).

One call consumes one rollout batch: rl.epochs passes of rl.minibatches optimizer updates each,
every update accumulating gradients over microbatches with `lax.scan` (memory is bounded by the
microbatch). The step is written for the whole batch: every array is global ([B, ...], no device
axis), every reduction a plain `jnp` one, and no axis names appear. `rlscale.train.update_fn`
jits it over a `jax.sharding.Mesh` (rows sharded over its batch axes, the state by
`train.state.state_shardings`) and XLA's partitioner inserts the collectives; one device is the
mesh {data: 1}. So the numbers depend on neither the device count nor the mesh shape, up to
float summation order: that includes the minibatch shuffling (one permutation of the global rows
from the one key), the microbatches and the gradient noise scale's small batches.

Loss aggregation: every loss is aggregated with weights that use the token and sequence counts of
the whole minibatch (see `rl.aggregation`), so each microbatch's loss is its exact share of the
minibatch loss and the shares add up (`rlscale.train.objective.microbatch_loss`); the update does
not depend on the microbatch count either.

Batch (numpy or jax arrays, global; Tp + Tr = T, responses in the last Tr columns):
  tokens [B, T] int32; input_mask [B, T] int32 (1 for real prompt and response tokens);
  response_mask [B, Tr] int32; old_logp [B, Tr] float32 (behaviour policy, at rl.temperature);
  ref_logp [B, Tr] float32 (needed when kl_coef > 0: a loss term, or logged when the KL is in
    the reward);
  advantages [B] or [B, Tr] float32; for PPO old_values and returns [B, Tr] float32;
  behaviour_logp [B, Tr] float32 (the sampler's) with an off-policy correction
    (rl.off_policy_correction, `rl.off_policy`; old_logp is then the recomputed proximal policy's).
Optional, for a model with experts: sampler_experts [B, Tr, L_moe, k] int32 (the sampler's
  routing, `Rollout.experts`: logged against the trainer's as moe/routing_mismatch) and routing
  [B, Tr, L_moe, k] int32 (the same, replayed by the trainer: `transformer.replay_window`).
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import optax

from rlscale.model import moe
from rlscale.model.config import ModelConfig
from rlscale.rl import aggregation, off_policy
from rlscale.rl.advantages import ADVANTAGE_ESTIMATORS
from rlscale.rl.losses import bind_policy_loss
from rlscale.train.objective import microbatch_loss
from rlscale.train.optimizer import current_learning_rate
from rlscale.train.state import TrainState

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
  """Gradient-accumulation slices K for a minibatch of `rows` rows of `width` tokens.

  Args:
    setting: rl.microbatches: an int is used as it is; None chooses K among the splits that keep
      whole groups (below): on CPU the largest K with rows / K * width >= CPU_MICROBATCH_TOKENS
      (1 when even one slice is smaller), elsewhere 1 (GPU/TPU matmuls want the whole
      minibatch); then, with measure_noise_scale, the smallest K >= 2 when that K is 1 (the
      gradient noise scale needs two slices: McCandlish et al. 2018), if a split allows one.
    rows, width: the minibatch's global rows (B / rl.minibatches, on any number of devices) and
      its token width T.
    platform: "cpu", "gpu", "tpu"; default jax.default_backend().
    group_size: G (rl.group_size): when rows is a multiple of G, an automatic K gives every slice
      a multiple of G rows, so no GRPO group is divided (`update_step` slices whole groups);
      None: any divisor of rows.
    measure_noise_scale: train.measure_noise_scale (the microbatches are its small batches).
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


def noise_scale_split_warning(rl_cfg) -> Optional[str]:
  """One line saying why train.measure_noise_scale gets no estimate at this batch, or None.

  The small batches of the gradient noise scale are the microbatches, on any number of devices,
  so the estimate needs K >= 2 slices of a minibatch's B / rl.minibatches rows: none when
  rl.microbatches is 1, or unset and no split into 2 or more slices keeps whole groups of
  rl.group_size (`microbatch_count`).

  Args: rl_cfg: a resolved rl section (prompts_per_step, group_size, minibatches, microbatches).
  Returns: "warning: train.measure_noise_scale: ..." naming the reason and the fix, or None.
  """
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
          f"this batch: {why}")


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


def check_batch(batch, rl_cfg) -> None:
  """Checks a global update batch (the layout of the module docstring: [B, ...], no device axis).

  Args: batch: dict of numpy or jax arrays (or ShapeDtypeStructs). rl_cfg: a resolved rl section.
  Raises: ValueError for a missing key (advantages, ref_logp when rl.kl_coef > 0, old_values and
    returns for a critic, ...) or inconsistent shapes, naming the key, its shape and the expected
    one."""
  rl = rl_cfg
  required = list(REQUIRED_KEYS) + (list(CRITIC_KEYS) if uses_critic(rl) else [])
  if uses_ref_logp(rl):
    required.append("ref_logp")
  if off_policy.uses_behaviour_logp(rl):
    required.append("behaviour_logp")
  missing = [k for k in required if k not in batch]
  if missing:
    raise ValueError(f"update batch lacks {missing} (has {sorted(batch)})")
  shape = lambda k: tuple(batch[k].shape)  # noqa: E731
  if len(shape("tokens")) != 2 or len(shape("response_mask")) != 2:
    raise ValueError(f"batch['tokens'] and batch['response_mask'] must be [B, T] and [B, Tr] "
                     f"(global rows, no device axis), got {shape('tokens')} and "
                     f"{shape('response_mask')}")
  b, t = shape("tokens")
  tr = shape("response_mask")[1]
  expect = {"tokens": (b, t), "input_mask": (b, t), "response_mask": (b, tr), "old_logp": (b, tr),
            "ref_logp": (b, tr), "old_values": (b, tr), "returns": (b, tr),
            "behaviour_logp": (b, tr)}
  for key, want in expect.items():
    if key in required and shape(key) != want:
      raise ValueError(f"batch[{key!r}] has shape {shape(key)}, expected {want} "
                       f"(B = {b} responses, T = {t} tokens, Tr = {tr} response tokens)")
  if shape("advantages") not in ((b,), (b, tr)):
    raise ValueError(f"batch['advantages'] has shape {shape('advantages')}, "
                     f"expected ({b},) or ({b}, {tr})")
  if tr >= t:
    raise ValueError(f"response width Tr = {tr} must be below the sequence width T = {t}")


def interleaved_slices(tree, parts: int, block: int = 1):
  """Every leaf [n, ...] -> [parts, n / parts, ...], slice c holding the blocks c, c + parts,
  c + 2 parts, ... of `block` consecutive rows (block 1: rows c, c + parts, ...).

  Strided rather than contiguous: rows sharded over the mesh's batch axes stay so in every slice
  (each device holds n / (parts x devices) rows of each slice when parts x block x devices
  divides n), so no slice sits on a few devices; a reshape [n / (parts x block), parts, block,
  ...], a swap of the first two axes and a reshape. Raises: ValueError (from reshape) when
  parts x block does not divide n."""

  def split(x):
    n = x.shape[0]
    y = x.reshape((n // (parts * block), parts, block) + x.shape[1:])
    return y.swapaxes(0, 1).reshape((parts, n // parts) + x.shape[1:])

  return jax.tree.map(split, tree)


def _own_mean_scale(mode: str, counts: dict, part_counts: dict) -> jax.Array:
  """Factor turning a part's share of the minibatch loss (weights over the minibatch's counts)
  into the part's own mean loss (weights over its own counts): denominator ratio of `mode`."""
  return aggregation.denominator(mode, counts) / aggregation.denominator(mode, part_counts)


def _minibatch_update(state: TrainState, mb, *, model_config, rl, optimizer, critic_optimizer,
                      policy_loss, measure_noise_scale=False):
  """One optimizer update on one (global) padded minibatch; returns (state, metrics)."""
  rows = mb["response_mask"].shape[0]
  microbatches = microbatch_count(rl.microbatches, rows, mb["tokens"].shape[1],
                                  group_size=rl.group_size,
                                  measure_noise_scale=measure_noise_scale)
  # Slices of whole groups when they fit (a group's responses share a prompt: the noise scale's
  # small batches should be samples of prompts), else of single rows.
  group = rl.group_size or 1
  block = group if rows % (microbatches * group) == 0 else 1
  slices = interleaved_slices(mb, microbatches, block)
  part_counts = jax.vmap(aggregation.aggregation_counts)(slices["response_mask"])
  return accumulate_and_apply(
      state, slices, aggregation.aggregation_counts(mb["response_mask"]), part_counts,
      jnp.ones((microbatches,), jnp.float32), batch_big=jnp.float32(rows),
      model_config=model_config, rl=rl, optimizer=optimizer, critic_optimizer=critic_optimizer,
      policy_loss=policy_loss)


def accumulate_and_apply(state: TrainState, slices, counts: dict, part_counts: dict,
                         nonempty: jax.Array, *, batch_big: jax.Array, model_config, rl,
                         optimizer, critic_optimizer, policy_loss):
  """One optimizer update from a minibatch's K microbatches: gradients accumulated by `lax.scan`.

  Args:
    state: TrainState. slices: the microbatches, a dict of arrays with a leading [K] axis (padded
      rows or packed ones: `objective.microbatch_loss`).
    counts: the minibatch's {"tokens": N, "sequences": S} (`aggregation.aggregation_counts`).
    part_counts: each microbatch's own counts, {"tokens": [K], "sequences": [K]} float32.
    nonempty: [K] float32, 1 for the microbatches holding loss tokens (0 for the padding
      microbatches of a packed minibatch): the noise scale's small batches.
    batch_big: the minibatch's responses (float32 scalar), gns_batch_big.
  Returns: (state, metrics) as one update of `update_step` (before the reduction over updates).
  """
  microbatches = nonempty.shape[0]
  mode = rl.loss_agg_mode
  trainables = (state.params, state.critic_params)
  grad_fn = jax.grad(functools.partial(microbatch_loss, model_config=model_config, rl=rl,
                                       policy_loss=policy_loss, aux_parts=microbatches),
                     has_aux=True)
  # Gradient noise scale inputs (McCandlish et al. 2018): |g|^2 of the small batches' own mean
  # losses (the microbatches) and of the minibatch (the big batch); with one microbatch,
  # small = big carries no information.
  micro_gns = microbatches > 1

  def accumulate(grad_sum, inputs):
    micro, part = inputs
    grads, stats = grad_fn(trainables, micro, counts)
    if micro_gns:
      own = _own_mean_scale(mode, counts, part)
      stats["micro_grad_sq"] = optax.tree_utils.tree_norm(grads[0], squared=True) * own ** 2
    return jax.tree.map(lambda a, g: a + g.astype(jnp.float32), grad_sum, grads), stats

  zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), trainables)
  grads, stats = jax.lax.scan(accumulate, zeros, (slices, part_counts))
  policy_grads, critic_grads = grads
  global_sq = optax.tree_utils.tree_norm(policy_grads, squared=True)
  small_count = jnp.maximum(jnp.sum(nonempty), 1.0)
  small_sq = global_sq
  if micro_gns:
    small_sq = jnp.sum(stats.pop("micro_grad_sq") * nonempty) / small_count

  updates, opt_state = optimizer.update(policy_grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  metrics = {
      "grad_norm": jnp.sqrt(global_sq), "update_norm": optax.tree_utils.tree_norm(updates),
      "learning_rate": current_learning_rate(opt_state),
      "gns_grad_sq_small": small_sq, "gns_grad_sq_big": global_sq,
      "gns_batch_small": jnp.floor(batch_big / small_count), "gns_batch_big": batch_big,
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
  """Microbatch stats [K] -> minibatch metrics: loss shares summed, token sums over the token
  count, ratio extremes by min / max, the MoE layers' assignments per expert ([K, L_moe, E])
  summed into moe/expert_load_max (`moe.expert_load_max`)."""
  out = {}
  for key, value in stats.items():
    if key == "moe/expert_tokens":
      out["moe/expert_load_max"] = moe.expert_load_max(jnp.sum(value, 0))
    elif key == "ratio_min":
      out[key] = jnp.min(value)
    elif key == "ratio_max":
      out[key] = jnp.max(value)
    elif key.endswith("_sum"):
      name = "ratio_mean" if key == "ratio_sum" else key[:-len("_sum")]
      out[name] = jnp.sum(value) / jnp.maximum(counts["tokens"], 1.0)
    else:
      out[key] = jnp.sum(value)
  return out


def update_step(state: TrainState, batch, rng: jax.Array, *, model_config: ModelConfig, rl_cfg,
                optimizer: optax.GradientTransformation,
                critic_optimizer: Optional[optax.GradientTransformation] = None,
                measure_noise_scale: bool = False):
  """One RL step on a global rollout batch (pure: jit it, e.g. by `update_fn.make_update_fn`).

  Runs rl.epochs passes; each pass makes rl.minibatches optimizer updates. With
  rl.minibatches > 1 each pass permutes the B rows with `jax.random.permutation(fold_in(rng,
  epoch), B)` (one global permutation: the same minibatches on any device count) and minibatch m
  holds the permuted rows m, m + M, m + 2M, ... (M = rl.minibatches). Each update accumulates
  gradients over K microbatches by `lax.scan` (K = rl.microbatches, or when None
  `microbatch_count` chooses from the minibatch's global rows, its width, the group size and
  `measure_noise_scale`, train.measure_noise_scale). The microbatches are strided slices of the
  minibatch, `interleaved_slices`: slice c holds the groups c, c + K, ... of rl.group_size
  consecutive rows when K x G divides the minibatch's rows, else its rows c, c + K, ...; so
  each slice stays sharded over the mesh's batch axes. Loss per token
  (`objective.microbatch_loss`): policy loss (rl.policy_loss) + kl_coef x KL(logp, ref_logp) when
  rl.kl_mode == "loss" - entropy_coef x entropy (+ vf_coef x clipped value loss for the critic),
  aggregated by rl.loss_agg_mode over the whole minibatch (+ the MoE load-balancing loss).

  Args:
    state: TrainState (global arrays, any sharding).
    batch: dict of global arrays [B, ...] (see the module docstring, `check_batch`).
    rng: one PRNG key (the minibatch permutations); unused with rl.minibatches == 1.
    model_config: the policy architecture. rl_cfg: a resolved and validated `rl` section.
    optimizer / critic_optimizer: optax transformations of the policy / critic.
    measure_noise_scale: an unset rl.microbatches gives K >= 2 where whole groups allow it.

  Returns:
    (new state with step + 1, metrics: dict of float32 scalars):
    loss, pg_loss, kl_loss (when a loss term), entropy_loss, value_loss (PPO) — each aggregated
    by the mode, coefficients not applied except in `loss`; token means kl, entropy,
    approx_kl_old (k3 to the behaviour policy), sampler_trainer_k3 (with rl.old_logp "sampler":
    approx_kl_old of the first optimizer update, before any parameter change, i.e. the mean k3
    between the trainer's and the sampler's log-probs), clip_fraction, dual_clip_fraction
    (dual-clip), value_clip_fraction, value_mean (PPO), ratio_mean; for a model with experts
    moe/aux_loss (the load-balancing loss averaged over the microbatches, before its
    coefficient; the loss includes coef x it) and moe/expert_load_max (E x the largest expert's
    share of a layer's assignments, 1 = balanced) and, with sampler_experts in the batch,
    moe/routing_mismatch (`moe.routing_mismatch`: the token mean of the fraction of MoE layers
    whose top-k set differs from the sampler's, in the first optimizer update, with the
    parameters that sampled; 0 under routing replay); ratio_min, ratio_max; grad_norm (before
    clipping), update_norm, learning_rate, critic_grad_norm (PPO); the gradient noise scale
    inputs (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training"; B_simple =
    tr(Sigma) / |G|^2 from them, see design.md): gns_grad_sq_small, |g_small|^2 averaged over
    the small batches, the microbatches, each gradient of its own mean loss; gns_grad_sq_big,
    |g_big|^2 of the minibatch's gradient (= grad_norm^2); gns_batch_small, gns_batch_big, the
    responses in each (B_small = minibatch rows / K, B_big = B / rl.minibatches; equal, so no
    estimate, with one microbatch). All averaged over the epochs x minibatches updates, except
    ratio_min / ratio_max (extremes), learning_rate (last), sampler_trainer_k3 and
    moe/routing_mismatch (first).
  """
  rl = rl_cfg
  policy_loss = bind_policy_loss(rl.policy_loss, rl)
  minibatch_update = functools.partial(
      _minibatch_update, model_config=model_config, rl=rl, optimizer=optimizer,
      critic_optimizer=critic_optimizer, policy_loss=policy_loss,
      measure_noise_scale=measure_noise_scale)
  rows = batch["tokens"].shape[0]

  def epoch(state, index):
    shuffled = batch
    if rl.minibatches > 1:
      order = jax.random.permutation(jax.random.fold_in(rng, index), rows)
      shuffled = jax.tree.map(lambda x: x[order], batch)
    return jax.lax.scan(minibatch_update, state, interleaved_slices(shuffled, rl.minibatches))

  state, metrics = jax.lax.scan(epoch, state, jnp.arange(rl.epochs))
  return state.replace(step=state.step + 1), reduce_updates(metrics, rl)


def reduce_updates(metrics: dict, rl) -> dict:
  """The metrics of a step's optimizer updates (leading axes [epochs, minibatches], or [U] in
  that order) -> float32 scalars, as `update_step` documents: means, except ratio_min / ratio_max
  (extremes), learning_rate (the last update's), sampler_trainer_k3 (with rl.old_logp
  "sampler") and moe/routing_mismatch (the first update's)."""
  metrics = {k: v.reshape(-1) for k, v in metrics.items()}
  reduced = {}
  for key, value in metrics.items():
    if key in _MIN_METRICS:
      reduced[key] = jnp.min(value)
    elif key in _MAX_METRICS:
      reduced[key] = jnp.max(value)
    elif key == "learning_rate":
      reduced[key] = value[-1]
    else:
      reduced[key] = jnp.mean(value)
  if rl.old_logp == "sampler":
    # The first optimizer update scores the batch with the parameters that sampled it: its k3 to
    # old_logp is the sampler-trainer mismatch, free of any update's drift.
    reduced["sampler_trainer_k3"] = metrics["approx_kl_old"][0]
  if "moe/routing_mismatch" in metrics:  # the sampler's parameters: the first update's forward
    reduced["moe/routing_mismatch"] = metrics["moe/routing_mismatch"][0]
  return reduced
