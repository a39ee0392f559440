"""Off-policy corrections for stale rollouts (`rl.off_policy_correction`), registered by name.

With asynchronous rollouts (`rl.max_off_policy_steps` = k >= 1, `rlscale.runner.async_rollouts`)
a batch is drawn by a behaviour policy up to k updates older than the policy its update starts
from, so three log-probabilities of each response token differ ([B, Tr] float32 each):

  behaviour_logp = log pi_behav   the sampler's (`Rollout.logp`): the policy that drew the token;
  old_logp       = log pi_prox    the proximal policy: the trainer's parameters at the start of
                                  this update (rl.old_logp = "recompute", a trainer forward);
  logp           = log pi_theta   the parameters being optimised.

The policy loss (rl.policy_loss, e.g. PPO's clip) is taken against pi_prox, so its trust region
sits around the policy the update starts from, and a correction multiplies it per token by an
importance weight w of the proximal over the behaviour policy, held constant (no gradient):

  loss_t = w_t x policy_loss(logp, old_logp, A)_t.

A correction is a pure function

  fn(old_logp, behaviour_logp, response_mask, *, <hyperparameters>) -> (weights, aux)

of [B, Tr] float32 arrays (the mask {0, 1}) returning weights [B, Tr] float32 and a dict of
per-token [B, Tr] float32 diagnostics, which the update step averages over real tokens
(`train/<name>`). Keyword-only hyperparameters come from the rl fields of the same name.
Registered:

- "none": no weight (the loss is the plain policy loss); the default at k = 0, where pi_prox =
  pi_behav up to the sampler-trainer mismatch.
- "decoupled": the decoupled PPO objective of AReaL (Fu et al. 2025, "AReaL: A Large-Scale
  Asynchronous Reinforcement Learning System for Language Reasoning", arXiv 2505.24298):
  w = pi_prox / pi_behav, the clip of `ppo_clip` around pi_prox; with rl.decoupled_weight_cap
  = c > 1, tokens with w > c get weight 0 (AReaL's behav_imp_weight_cap filters them).
  **The default with k >= 1**: it is the objective designed for bounded staleness (AReaL trains
  with up to 8 versions of lag on it).
- "tis": truncated importance sampling (Yao et al. 2025, "Your Efficient RL Framework Secretly
  Brings You Off-Policy RL Training"; verl's tis_imp_ratio_cap): w = min(pi_prox / pi_behav,
  rl.tis_cap), C = 2 in the paper's runs.

Both need rl.old_logp = "recompute" (with "sampler" pi_prox would be pi_behav and w = 1), which
`resolve_off_policy` chooses when rl.old_logp is unset. The bias that stale data leaves grows with
staleness x learning rate (2607.01083), which is why k is an axis of the study.

Add a correction with

  @register_correction("my_correction")
  def my_correction(old_logp, behaviour_logp, response_mask, *, tis_cap):
    ...

and select it with `--config.rl.off_policy_correction=my_correction`.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import chex
import jax
import jax.numpy as jnp

from rlscale.rl.losses import importance_ratio
from rlscale.rl.registry import Registry, hyperparameters_from

Correction = Callable[..., tuple[chex.Array, dict[str, chex.Array]]]
OFF_POLICY_CORRECTIONS: Registry[Correction] = Registry(
    "rl.off_policy_correction", register_with="@rlscale.rl.off_policy.register_correction")

NO_CORRECTION = "none"
# The correction an unset rl.off_policy_correction means with k >= 1 (see the module docstring).
ASYNC_DEFAULT = "decoupled"
# Values an rl section without the asynchronous fields means (configs written before them).
FIELD_DEFAULTS = {"max_off_policy_steps": 0, "tis_cap": 2.0, "decoupled_weight_cap": None}


def register_correction(name: str, *, overwrite: bool = False):
  """Decorator registering a correction under `name` (signature: the module docstring).

  Raises ValueError when `name` is taken (unless overwrite=True)."""
  return functools.partial(OFF_POLICY_CORRECTIONS.register, name, overwrite=overwrite)


def _check(old_logp, behaviour_logp, response_mask) -> None:
  chex.assert_rank(old_logp, 2)
  chex.assert_equal_shape([old_logp, behaviour_logp, response_mask])


@register_correction(NO_CORRECTION)
def no_correction(old_logp: chex.Array, behaviour_logp: chex.Array,
                  response_mask: chex.Array) -> tuple[chex.Array, dict[str, chex.Array]]:
  """w = 1 for every token: the stale batch is trained as if on-policy. [B, Tr] in and out."""
  _check(old_logp, behaviour_logp, response_mask)
  return jnp.ones_like(old_logp), {}


@register_correction("decoupled")
def decoupled_ppo(old_logp: chex.Array, behaviour_logp: chex.Array, response_mask: chex.Array,
                  *, decoupled_weight_cap: float | None = None
                  ) -> tuple[chex.Array, dict[str, chex.Array]]:
  """AReaL's decoupled PPO weight (Fu et al. 2025, arXiv 2505.24298, eq. 5):
  w = pi_prox / pi_behav = exp(old_logp - behaviour_logp) (log-ratio clamped to +-20, as
  `losses.importance_ratio`), multiplying the policy loss clipped around pi_prox.

  E.g. pi_prox = 0.5, pi_behav = 0.25: w = 2; with a cap c = 1.5 that token gets w = 0.

  Args:
    old_logp, behaviour_logp, response_mask: [B, Tr] (module docstring).
    decoupled_weight_cap: None for no cap, else c > 1: tokens with w > c get weight 0 (filtered,
      as AReaL's behav_imp_weight_cap, not truncated).
  Returns: (weights [B, Tr] float32, {"is_weight": w after the cap, "is_weight_capped": 1.0
    where the cap removed the token}).
  Raises: ValueError on shape mismatch or a cap <= 1."""
  _check(old_logp, behaviour_logp, response_mask)
  weights = importance_ratio(old_logp, behaviour_logp)
  capped = jnp.zeros_like(weights)
  if decoupled_weight_cap is not None:
    if not decoupled_weight_cap > 1:
      raise ValueError(f"rl.decoupled_weight_cap must be > 1 (or None for no cap), "
                       f"got {decoupled_weight_cap}")
    capped = (weights > decoupled_weight_cap).astype(jnp.float32)
    weights = jnp.where(capped > 0, 0.0, weights)
  return weights, {"is_weight": weights, "is_weight_capped": capped}


@register_correction("tis")
def truncated_importance_sampling(old_logp: chex.Array, behaviour_logp: chex.Array,
                                  response_mask: chex.Array, *, tis_cap: float
                                  ) -> tuple[chex.Array, dict[str, chex.Array]]:
  """Truncated importance sampling of the old (proximal) over the behaviour policy (Yao et al.
  2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"; verl's
  `tis_imp_ratio_cap`): w = min(pi_old / pi_behav, C) = min(exp(old_logp - behaviour_logp), C).

  E.g. C = 2: pi_old / pi_behav = 0.5 -> w = 0.5; 3 -> w = 2 (truncated).

  Args:
    old_logp, behaviour_logp, response_mask: [B, Tr] (module docstring).
    tis_cap: C >= 1 (2 in the paper).
  Returns: (weights [B, Tr] float32, {"is_weight": w, "is_weight_capped": 1.0 where the ratio
    exceeded C}).
  Raises: ValueError on shape mismatch or C < 1."""
  _check(old_logp, behaviour_logp, response_mask)
  if not tis_cap >= 1:
    raise ValueError(f"rl.tis_cap must be >= 1, got {tis_cap}")
  ratio = importance_ratio(old_logp, behaviour_logp)
  weights = jnp.minimum(ratio, tis_cap)
  return weights, {"is_weight": weights,
                   "is_weight_capped": (ratio > tis_cap).astype(jnp.float32)}


def setting(rl_cfg, field: str):
  """rl.<field> of the asynchronous-rollout fields, FIELD_DEFAULTS[field] when the section lacks
  it or leaves it None (an rl section written before the field existed)."""
  value = rl_cfg.get(field)
  return FIELD_DEFAULTS[field] if value is None else value


def correction_name(rl_cfg) -> str:
  """rl.off_policy_correction of a resolved rl section; "none" for one without the field."""
  return rl_cfg.get("off_policy_correction") or NO_CORRECTION


def uses_behaviour_logp(rl_cfg) -> bool:
  """Whether the update batch carries behaviour_logp (the sampler's log-probs) beside old_logp:
  a correction other than "none" is on."""
  return correction_name(rl_cfg) != NO_CORRECTION


def corrected(pg_loss: chex.Array, aux: dict, old_logp: chex.Array, behaviour_logp: chex.Array,
              response_mask: chex.Array, rl_cfg) -> tuple[chex.Array, dict]:
  """The per-token policy loss pg_loss [B, Tr] float32 times the weights of the correction
  rl.off_policy_correction (its hyperparameters from `rl_cfg`), held constant (no gradient);
  `aux` (the policy loss's per-token diagnostics) with the correction's added.

  Raises: ValueError for an unregistered name or a missing or bad hyperparameter."""
  name = correction_name(rl_cfg)
  fn = OFF_POLICY_CORRECTIONS.get(name)
  weights, extra = fn(old_logp, behaviour_logp, response_mask,
                      **hyperparameters_from(fn, rl_cfg, f"rl.off_policy_correction={name!r}"))
  return jax.lax.stop_gradient(weights) * pg_loss, {**aux, **extra}


def resolve_off_policy(resolved, given) -> None:
  """Fills the asynchronous-rollout fields of the resolved rl section `resolved` in place:
  FIELD_DEFAULTS where unset; rl.off_policy_correction unset -> "none" at k = 0, ASYNC_DEFAULT
  ("decoupled") at k >= 1; and rl.old_logp -> "recompute" when a correction is on and `given`
  (the rl section as the user wrote it) leaves old_logp unset. A bad k is left for
  `validate_off_policy` to name."""
  for field in FIELD_DEFAULTS:
    resolved[field] = setting(resolved, field)
  k = resolved.max_off_policy_steps
  if resolved.get("off_policy_correction") is None:
    steps_ahead = isinstance(k, int) and not isinstance(k, bool) and k >= 1
    resolved["off_policy_correction"] = ASYNC_DEFAULT if steps_ahead else NO_CORRECTION
  if uses_behaviour_logp(resolved) and given.get("old_logp") is None:
    resolved.old_logp = "recompute"


def validate_off_policy(rl_cfg) -> None:
  """Raises ValueError naming the first bad asynchronous-rollout field of a resolved rl section:
  max_off_policy_steps an int >= 0; off_policy_correction registered; tis_cap a finite number
  >= 1; decoupled_weight_cap None or > 1; a correction other than "none" with
  old_logp = "recompute"."""
  k = setting(rl_cfg, "max_off_policy_steps")
  if isinstance(k, bool) or not isinstance(k, int) or k < 0:
    raise ValueError(f"rl.max_off_policy_steps must be an int >= 0 (0 = synchronous: every batch "
                     f"drawn by the current policy; k >= 1: at most k updates old), got {k!r}")
  name = correction_name(rl_cfg)
  OFF_POLICY_CORRECTIONS.get(name)
  cap = setting(rl_cfg, "tis_cap")
  if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not (
      math.isfinite(cap) and cap >= 1):
    raise ValueError(f"rl.tis_cap must be a finite number >= 1 (truncated importance sampling's "
                     f"C; 2 in Yao et al. 2025), got {cap!r}")
  cap = setting(rl_cfg, "decoupled_weight_cap")
  if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float))
                          or not cap > 1):
    raise ValueError(f"rl.decoupled_weight_cap must be None (no cap) or a number > 1, "
                     f"got {cap!r}")
  if name != NO_CORRECTION and rl_cfg.old_logp != "recompute":
    raise ValueError(f"rl.off_policy_correction={name!r} needs rl.old_logp='recompute' (the "
                     "proximal policy's log-probs; with 'sampler' they are the behaviour "
                     "policy's and every weight is 1): set rl.old_logp='recompute', leave it "
                     "unset, or set rl.off_policy_correction='none'")
