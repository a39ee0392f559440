"""The optimizer: global-norm clipping, then Adam or AdamW whose hyperparameters follow the batch size.

For a batch of B responses per optimizer step and the config's reference batch B0 (k = B / B0):

- learning rate (`optim.lr_scaling`): "none" lr0; "linear" lr0 * k (Goyal et al. 2017);
  "sqrt" lr0 * sqrt(k), the square-root rule for Adam (Malladi et al. 2022); "sqrt_adam" the
  square-root rule in full: lr0 * sqrt(k) with the Adam adjustment below (as `adjust_adam`);
- with `optim.adjust_adam` (or lr_scaling "sqrt_adam"), the Adam moment decays keep their horizon in samples rather than steps:
  beta_i -> 1 - k (1 - beta_i), and eps -> eps / sqrt(k) (the gradient noise, and so sqrt(v),
  shrinks like 1/sqrt(B)) (Malladi et al. 2022, "On the SDEs and scaling rules for adaptive
  gradient algorithms"). The rule needs k (1 - beta_i) < 1 (a decay in (0, 1)); beyond it the
  average would have to span less than one step, the rule no longer holds, and the batch is
  refused with a ValueError rather than silently clamped to beta = 0. Betas above 0.99999 (k < 1)
  are capped there to keep bias correction well conditioned.

The learning rate follows a schedule (linear warmup, then constant, cosine or linear decay) and is
injected with `optax.inject_hyperparams`, so `current_learning_rate(opt_state)` reads back the value
used by the last update for logging. `optim.schedule_unit` says what the schedule counts:

- "steps" (the default): optimizer updates; warmup over `optim.warmup_steps`, decay until
  `optim.decay_steps` (None: the run's optimizer updates), see `make_schedule`;
- "samples": responses consumed; warmup over `optim.warmup_samples`, decay until
  `optim.decay_samples` (None: the run's budget in responses), see `make_sample_schedule`. Runs of
  different batch sizes then apply the same learning rate at the same number of responses
  consumed, so the LR a run has at a given sample count, and the samples it needs to reach a
  target, do not depend on its batch size or its budget through the schedule.
"""

from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp
import ml_collections
import optax

LR_SCALINGS = ("none", "linear", "sqrt", "sqrt_adam")
# Rules that adjust Adam's betas and eps with the batch ratio (besides optim.adjust_adam).
ADAM_ADJUSTING_SCALINGS = ("sqrt_adam",)
SCHEDULES = ("constant", "cosine", "linear")
SCHEDULE_UNITS = ("steps", "samples")
OPTIMIZERS = ("adam", "adamw")
# Largest adjusted Adam beta (see the module docstring).
MAX_ADJUSTED_BETA = 0.99999


def _check_number(field: str, value, *, positive: bool) -> None:
  """Raises ValueError naming `field` unless `value` is a finite number > 0 (positive) or >= 0.

  NaN fails every comparison, so `value <= 0` alone lets it through (a NaN learning rate trained
  a NaN policy to the end); infinity is refused too."""
  bound = "> 0" if positive else ">= 0"
  number = isinstance(value, (int, float)) and not isinstance(value, bool)
  if not number or not math.isfinite(value) or value < 0 or (positive and value == 0):
    raise ValueError(f"{field} must be {bound} and finite, got {value!r}")


def _batch_ratio(optim_cfg: ml_collections.ConfigDict, batch_size: int) -> float:
  """k = batch_size / optim.reference_batch; raises ValueError unless both are positive."""
  if not batch_size or batch_size <= 0:
    raise ValueError(f"batch_size must be > 0, got {batch_size!r}")
  if not optim_cfg.reference_batch or optim_cfg.reference_batch <= 0:
    raise ValueError(f"optim.reference_batch must be > 0, got {optim_cfg.reference_batch!r}")
  return batch_size / optim_cfg.reference_batch


def scaled_learning_rate(optim_cfg: ml_collections.ConfigDict, batch_size: int,
                         base_learning_rate: Optional[float] = None) -> float:
  """Peak learning rate for `batch_size` responses per step (see the module docstring).

  Args:
    optim_cfg: the `optim` config section (learning_rate, lr_scaling, reference_batch).
    batch_size: B, responses per optimizer step.
    base_learning_rate: lr0 at the reference batch; default optim.learning_rate.

  Returns: the scaled learning rate (float).
  Raises: ValueError for an unknown lr_scaling (listing the allowed ones), lr0 <= 0, NaN or
  infinite (naming optim.learning_rate, or optim.critic_learning_rate when base_learning_rate is
  given), or a non-positive batch size.
  """
  field = "optim.learning_rate" if base_learning_rate is None else "optim.critic_learning_rate"
  lr0 = optim_cfg.learning_rate if base_learning_rate is None else base_learning_rate
  _check_number(field, lr0, positive=True)
  k = _batch_ratio(optim_cfg, batch_size)
  if optim_cfg.lr_scaling == "none":
    return float(lr0)
  if optim_cfg.lr_scaling == "linear":
    return float(lr0 * k)
  if optim_cfg.lr_scaling in ("sqrt", "sqrt_adam"):
    return float(lr0 * math.sqrt(k))
  raise ValueError(f"optim.lr_scaling={optim_cfg.lr_scaling!r} is not one of {list(LR_SCALINGS)}")


def adjusts_adam(optim_cfg: ml_collections.ConfigDict) -> bool:
  """Whether Adam's betas and eps follow the batch ratio: optim.adjust_adam, or an LR rule that
  includes the adjustment (optim.lr_scaling "sqrt_adam")."""
  return (bool(optim_cfg.get("adjust_adam"))
          or optim_cfg.get("lr_scaling") in ADAM_ADJUSTING_SCALINGS)


def adam_hyperparams(optim_cfg: ml_collections.ConfigDict, batch_size: int) -> dict[str, float]:
  """{"b1", "b2", "eps"} for `batch_size`: the config's values, adjusted for k = B / B0 when
  `adjusts_adam` (optim.adjust_adam, or optim.lr_scaling "sqrt_adam"; see the module docstring).
  At k = 1 the adjusted values equal the config's (1 - (1 - beta) is exact for beta >= 0.5).

  Raises ValueError for bad batch sizes, betas outside [0, 1), eps not a finite number >= 0, or,
  when adjusting, a batch
  outside the rule's range k (1 - beta) < 1 (naming the rule, the beta, k and the largest batch
  allowed)."""
  b1, b2, eps = optim_cfg.b1, optim_cfg.b2, optim_cfg.eps
  for name, beta in (("b1", b1), ("b2", b2)):
    if not 0.0 <= beta < 1.0:  # NaN fails it too
      raise ValueError(f"optim.{name} must be in [0, 1), got {beta}")
  _check_number("optim.eps", eps, positive=False)
  if not adjusts_adam(optim_cfg):
    return {"b1": float(b1), "b2": float(b2), "eps": float(eps)}
  k = _batch_ratio(optim_cfg, batch_size)
  if optim_cfg.get("adjust_adam"):
    rule, off = "optim.adjust_adam", "optim.adjust_adam=False"
  else:
    rule, off = f"optim.lr_scaling={optim_cfg.lr_scaling!r}", "optim.lr_scaling='sqrt'"
  for name, beta in (("b1", b1), ("b2", b2)):
    if k * (1.0 - beta) >= 1.0 - 1e-9:  # tolerance: 10 * (1 - 0.9) rounds below 1
      raise ValueError(
          f"{rule}: batch {batch_size} is k = {k:g} x optim.reference_batch="
          f"{optim_cfg.reference_batch}, and k (1 - optim.{name}) = {k * (1.0 - beta):g} >= 1, "
          f"outside the scaling rule's range k (1 - beta) < 1 (optim.{name}={beta} allows "
          f"k < {1.0 / (1.0 - beta):g}); use a smaller batch, a larger optim.reference_batch or "
          f"optim.{name}, or {off}")
  adjust = lambda beta: float(min(1.0 - k * (1.0 - beta), MAX_ADJUSTED_BETA))  # noqa: E731
  return {"b1": adjust(b1), "b2": adjust(b2), "eps": float(eps / math.sqrt(k))}


def _decay_factor(schedule: str, progress, final_lr_frac: float):
  """Multiplier of the peak at decay progress p in [0, 1] (float32 array): "constant" 1;
  "cosine" f + (1 - f) (1 + cos(pi p)) / 2 (Loshchilov & Hutter 2017); "linear" 1 - (1 - f) p."""
  if schedule == "cosine":
    return final_lr_frac + (1.0 - final_lr_frac) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
  if schedule == "linear":
    return 1.0 - (1.0 - final_lr_frac) * progress
  return 1.0


def _check_schedule_shape(schedule: str, final_lr_frac: float) -> None:
  """Raises ValueError for an unknown optim.schedule or optim.final_lr_frac outside [0, 1]."""
  if schedule not in SCHEDULES:
    raise ValueError(f"optim.schedule={schedule!r} is not one of {list(SCHEDULES)}")
  if not 0.0 <= final_lr_frac <= 1.0:
    raise ValueError(f"optim.final_lr_frac must be in [0, 1], got {final_lr_frac}")


def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def make_schedule(peak_learning_rate: float, *, schedule: str, warmup_steps: int, total_steps: int,
                  final_lr_frac: float = 0.0, decay_steps: Optional[int] = None) -> optax.Schedule:
  """Learning rate as a function of the optimizer-update count c (0 for the first update).

  Warmup: lr = peak * (c + 1) / W for c < W (the first update already moves; c = W - 1 reaches the
  peak). Then with progress p = clip((c - W) / (D - W), 0, 1), D = decay_steps or total_steps:
  "constant" peak; "cosine" peak * (f + (1 - f) * (1 + cos(pi p)) / 2) (Loshchilov & Hutter 2017);
  "linear" peak * (1 - (1 - f) p); f = final_lr_frac, reached at c = D (and kept after it).

  Args:
    decay_steps: `optim.decay_steps`, the decay horizon D in optimizer updates; None = total_steps
      (the run's updates; a D beyond them leaves the run ending above the final LR).

  Raises:
    ValueError: for an unknown schedule, total_steps < 1, decay_steps not None and < 1,
    warmup_steps outside [0, D], or final_lr_frac outside [0, 1].
  """
  _check_schedule_shape(schedule, final_lr_frac)
  if not isinstance(total_steps, int) or total_steps < 1:
    raise ValueError(f"total_steps (optimizer updates) must be an int >= 1, got {total_steps!r}")
  if decay_steps is not None and (not _is_int(decay_steps) or decay_steps < 1):
    raise ValueError(f"optim.decay_steps must be an int >= 1 (optimizer updates) or None (the "
                     f"run's {total_steps} updates), got {decay_steps!r}")
  horizon = total_steps if decay_steps is None else decay_steps
  if not 0 <= warmup_steps <= horizon:
    where = (f"total_steps={total_steps}" if decay_steps is None
             else f"optim.decay_steps={decay_steps}")
    raise ValueError(f"optim.warmup_steps must be in [0, {where}], got {warmup_steps}")
  decay_span = max(horizon - warmup_steps, 1)

  def learning_rate(count):
    count = jnp.asarray(count, jnp.float32)
    warm = jnp.minimum((count + 1.0) / warmup_steps, 1.0) if warmup_steps else 1.0
    progress = jnp.clip((count - warmup_steps) / decay_span, 0.0, 1.0)
    return peak_learning_rate * warm * _decay_factor(schedule, progress, final_lr_frac)

  return learning_rate


def make_sample_schedule(peak_learning_rate: float, *, schedule: str, warmup_samples: int,
                         decay_samples: int, step_samples: int, updates_per_step: int = 1,
                         final_lr_frac: float = 0.0) -> optax.Schedule:
  """Learning rate of optimizer update c (0 for the first) as a function of responses consumed.

  Convention: update c belongs to RL step c // U (U = updates_per_step = epochs x minibatches),
  and is applied after that step's rollouts, so it sees s(c) = (c // U + 1) * B responses consumed
  (B = step_samples = P x G per RL step; every update of a step, PPO's epochs x minibatches
  included, gets the same LR). With W = warmup_samples and D = decay_samples:
  lr = peak * min(s / W, 1) (1 when W = 0) * decay(p), p = clip((s - W) / (D - W), 0, 1), decay as
  in `make_schedule` ("constant", "cosine", "linear" to f = final_lr_frac at s = D). Two runs of
  batch sizes B1, B2 thus apply the same LR whenever they have consumed the same responses. At
  s = W the steps schedule's (c + 1) / W warmup is the same rule with W counted in responses.
  The responses are the B each step trains on (DAPO's discarded extra sampling rounds are not
  counted, as the step count from train.total_samples does not count them).

  Raises:
    ValueError: unknown schedule, final_lr_frac outside [0, 1], step_samples or updates_per_step
    not an int >= 1, warmup_samples not an int >= 0, decay_samples not an int >= 1, or
    warmup_samples > decay_samples (each naming the optim.* field).
  """
  _check_schedule_shape(schedule, final_lr_frac)
  for name, value in (("step_samples", step_samples), ("updates_per_step", updates_per_step)):
    if not _is_int(value) or value < 1:
      raise ValueError(f"{name} must be an int >= 1, got {value!r}")
  if not _is_int(warmup_samples) or warmup_samples < 0:
    raise ValueError(f"optim.warmup_samples must be an int >= 0 (responses), "
                     f"got {warmup_samples!r}")
  if not _is_int(decay_samples) or decay_samples < 1:
    raise ValueError(f"optim.decay_samples must be an int >= 1 (responses) or None (the budget), "
                     f"got {decay_samples!r}")
  if warmup_samples > decay_samples:
    raise ValueError(f"optim.warmup_samples={warmup_samples} must be <= the decay horizon "
                     f"optim.decay_samples={decay_samples} (responses)")
  decay_span = max(decay_samples - warmup_samples, 1)

  def learning_rate(count):
    steps_done = jnp.asarray(count, jnp.int32) // updates_per_step + 1
    samples = steps_done.astype(jnp.float32) * step_samples
    warm = jnp.minimum(samples / warmup_samples, 1.0) if warmup_samples else 1.0
    progress = jnp.clip((samples - warmup_samples) / decay_span, 0.0, 1.0)
    return peak_learning_rate * warm * _decay_factor(schedule, progress, final_lr_frac)

  return learning_rate


def learning_rate_schedule(optim_cfg: ml_collections.ConfigDict, peak_learning_rate: float, *,
                           total_steps: int, updates_per_step: int = 1,
                           step_samples: Optional[int] = None,
                           budget_samples: Optional[int] = None) -> optax.Schedule:
  """The config's schedule of the optimizer-update count (see the module docstring).

  Args:
    optim_cfg: the `optim` section: schedule, schedule_unit (default "steps"), warmup_steps,
      decay_steps, warmup_samples, decay_samples, final_lr_frac (absent fields take the defaults
      of experiments/configs/default.py).
    peak_learning_rate: the batch-scaled peak (`scaled_learning_rate`).
    total_steps: optimizer updates in the run. updates_per_step: epochs x minibatches.
    step_samples: B = P x G responses per RL step (needed with schedule_unit "samples").
    budget_samples: the run's budget in responses (train.total_samples, or RL steps x B), the
      horizon when optim.decay_samples is None; default total_steps / updates_per_step x B.

  Raises: ValueError naming the optim.* field for an unknown schedule_unit, a field of the other
    unit set (warmup_steps or decay_steps with "samples"; warmup_samples or decay_samples with
    "steps"), or a bad value (see `make_schedule`, `make_sample_schedule`).
  """
  unit = optim_cfg.get("schedule_unit", "steps")
  warmup_steps, decay_steps = optim_cfg.get("warmup_steps", 0), optim_cfg.get("decay_steps")
  warmup_samples, decay_samples = optim_cfg.get("warmup_samples", 0), optim_cfg.get("decay_samples")
  final_lr_frac = optim_cfg.get("final_lr_frac", 0.0) or 0.0
  if unit == "steps":
    if warmup_samples or decay_samples is not None:
      raise ValueError(f"optim.warmup_samples={warmup_samples} / optim.decay_samples="
                       f"{decay_samples} count responses: set optim.schedule_unit='samples', or "
                       "use optim.warmup_steps / optim.decay_steps")
    return make_schedule(peak_learning_rate, schedule=optim_cfg.schedule,
                         warmup_steps=warmup_steps, total_steps=total_steps,
                         final_lr_frac=final_lr_frac, decay_steps=decay_steps)
  if unit != "samples":
    raise ValueError(f"optim.schedule_unit={unit!r} is not one of {list(SCHEDULE_UNITS)}")
  if warmup_steps or decay_steps is not None:
    raise ValueError(f"optim.warmup_steps={warmup_steps} / optim.decay_steps={decay_steps} count "
                     "optimizer updates: with optim.schedule_unit='samples' set them to 0 / None "
                     "and use optim.warmup_samples / optim.decay_samples (responses)")
  if step_samples is None:
    raise ValueError("optim.schedule_unit='samples' needs step_samples, the responses per RL "
                     "step (update.optimizer_args gives it)")
  if budget_samples is None:
    budget_samples = -(-total_steps // updates_per_step) * step_samples
  return make_sample_schedule(
      peak_learning_rate, schedule=optim_cfg.schedule, warmup_samples=warmup_samples,
      decay_samples=budget_samples if decay_samples is None else decay_samples,
      step_samples=step_samples, updates_per_step=updates_per_step, final_lr_frac=final_lr_frac)


def _decay_mask(params):
  """Weight decay on matrices only (kernels, embeddings), not on norms' scales or biases."""
  return jax.tree.map(lambda p: p.ndim >= 2, params)


def clipping_threshold(optim_cfg: ml_collections.ConfigDict) -> Optional[float]:
  """The global-norm clipping threshold `optim.grad_clip_norm`, or None when clipping is off
  (None or <= 0). Clipping fires on an update whose pre-clip global gradient norm exceeds it."""
  clip = optim_cfg.get("grad_clip_norm")
  return float(clip) if clip is not None and clip > 0 else None


def make_optimizer(optim_cfg: ml_collections.ConfigDict, *, batch_size: int, total_steps: int,
                   learning_rate: Optional[float] = None, updates_per_step: int = 1,
                   step_samples: Optional[int] = None,
                   budget_samples: Optional[int] = None) -> optax.GradientTransformation:
  """optax chain: clip_by_global_norm(optim.grad_clip_norm) -> Adam/AdamW with the scheduled,
  batch-scaled learning rate injected as a hyperparameter.

  Args:
    optim_cfg: the `optim` section: optimizer ("adam", "adamw"), learning_rate, b1, b2, eps,
      weight_decay (AdamW; matrices only), grad_clip_norm (<= 0 or None: no clipping), schedule,
      schedule_unit, warmup_steps, decay_steps, warmup_samples, decay_samples, final_lr_frac
      (default 0), lr_scaling, reference_batch, adjust_adam.
    batch_size: B, responses per optimizer update (with rl.minibatches > 1, the minibatch size).
    total_steps: optimizer updates over the run (RL steps x epochs x minibatches), for decay.
    learning_rate: lr0 to use instead of optim.learning_rate (e.g. a PPO critic's).
    updates_per_step, step_samples, budget_samples: optimizer updates per RL step, responses per
      RL step and the run's budget in responses, for optim.schedule_unit "samples"
      (`learning_rate_schedule`; `update.optimizer_args` gives all of them).

  Returns: the GradientTransformation; `current_learning_rate(opt_state)` reads its LR.
  Raises: ValueError naming the bad optim field and the allowed values.
  """
  if optim_cfg.optimizer not in OPTIMIZERS:
    raise ValueError(f"optim.optimizer={optim_cfg.optimizer!r} is not one of {list(OPTIMIZERS)}")
  _check_number("optim.weight_decay", optim_cfg.weight_decay, positive=False)
  clip = optim_cfg.get("grad_clip_norm")
  if clip is not None and not math.isfinite(clip):  # NaN would read as "off" (NaN > 0 is False)
    raise ValueError(f"optim.grad_clip_norm must be a finite number (<= 0 or None: no clipping), "
                     f"got {clip!r}")
  peak = scaled_learning_rate(optim_cfg, batch_size, learning_rate)
  schedule = learning_rate_schedule(optim_cfg, peak, total_steps=total_steps,
                                    updates_per_step=updates_per_step, step_samples=step_samples,
                                    budget_samples=budget_samples)
  hyper = adam_hyperparams(optim_cfg, batch_size)
  if optim_cfg.optimizer == "adamw":
    adam = optax.inject_hyperparams(optax.adamw, static_args=("mask",))(
        learning_rate=schedule, weight_decay=optim_cfg.weight_decay, mask=_decay_mask, **hyper)
  else:
    if optim_cfg.weight_decay:
      raise ValueError("optim.weight_decay needs optim.optimizer='adamw' (Adam has no decoupled decay)")
    adam = optax.inject_hyperparams(optax.adam)(learning_rate=schedule, **hyper)
  clip = clipping_threshold(optim_cfg)
  if clip is not None:
    return optax.chain(optax.clip_by_global_norm(clip), adam)
  return optax.chain(adam)


def current_learning_rate(opt_state) -> jax.Array:
  """The learning rate of the last update (the initial one before any) from the state of a
  `make_optimizer` chain: float32 scalar. Raises ValueError when the state has no injected LR."""
  for part in opt_state:
    hyperparams = getattr(part, "hyperparams", None)
    if hyperparams is not None and "learning_rate" in hyperparams:
      return hyperparams["learning_rate"]
  raise ValueError("optimizer state has no injected learning_rate (not built by make_optimizer)")
