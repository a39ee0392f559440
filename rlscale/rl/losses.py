"""Per-token policy losses (registered by name, `rl.policy_loss`) and the PPO value loss.

A policy loss is a pure function

  loss_fn(logp, old_logp, advantages, response_mask, *, <hyperparameters>) -> (loss, aux)

with logp, old_logp, advantages, response_mask all [B, Tr] (float32; the mask {0,1}) and returns
the per-token loss [B, Tr] float32 to be minimised, before aggregation (see `aggregation`), and
`aux`, a dict of per-token float32 [B, Tr] diagnostics (e.g. "clip_fraction" as a 0/1 indicator)
that the update step averages over real tokens. Keyword-only hyperparameters are filled from the
`rl` config fields of the same name (`bind_policy_loss`). Register a new one with

  @register_policy_loss("my_loss")
  def my_loss(logp, old_logp, advantages, response_mask, *, clip_eps_low):
    ...

and select it with `--config.rl.policy_loss=my_loss`.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import chex
import jax.numpy as jnp

from rlscale.rl.kl import log_ratio
from rlscale.rl.registry import Registry, hyperparameters_from

PolicyLoss = Callable[..., tuple[chex.Array, dict[str, chex.Array]]]
POLICY_LOSSES: Registry[PolicyLoss] = Registry(
    "rl.policy_loss", register_with="@rlscale.rl.losses.register_policy_loss")

# Log-ratios are clamped before exp (as verl does) so a token whose probability collapsed cannot
# turn the ratio into Inf; real PPO ratios never come near e^20.
LOG_RATIO_CLAMP = 20.0


def register_policy_loss(name: str, *, overwrite: bool = False):
  """Decorator registering a policy loss under `name` (see the module docstring for the signature).

  Raises ValueError when `name` is taken (unless overwrite=True)."""
  return functools.partial(POLICY_LOSSES.register, name, overwrite=overwrite)


def _check_policy_inputs(logp, old_logp, advantages, response_mask) -> None:
  chex.assert_rank(logp, 2)
  chex.assert_equal_shape([logp, old_logp, advantages, response_mask])


def importance_ratio(logp: chex.Array, old_logp: chex.Array) -> chex.Array:
  """pi / pi_old = exp(clip(logp - old_logp, -20, 20)); [...] float32 in and out; 1 (not NaN) where
  both log-probabilities are -inf (see `kl.log_ratio`)."""
  return jnp.exp(jnp.clip(log_ratio(logp, old_logp), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


@register_policy_loss("ppo_clip")
def ppo_clip(logp: chex.Array, old_logp: chex.Array, advantages: chex.Array,
             response_mask: chex.Array, *, clip_eps_low: float, clip_eps_high: float,
             dual_clip_c: Optional[float] = None) -> tuple[chex.Array, dict[str, chex.Array]]:
  """PPO clipped surrogate (Schulman et al. 2017) with decoupled clip range (DAPO "clip-higher",
  Yu et al. 2025) and optional dual-clip (Ye et al. 2020).

  Per token, with r = pi / pi_old and A the advantage:
    L = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))
  and with dual-clip constant c > 1, for A < 0 only: L = min(L, -A c), which bounds the loss of a
  token whose ratio exploded. E.g. c = 3, eps = 0.2: A = +2, r = 1 -> L = -2 (objective 2);
  A = -1, r = 5 -> L = 3.

  Args:
    logp, old_logp, advantages, response_mask: [B, Tr] (see module docstring).
    clip_eps_low: eps_low >= 0 (0.2). clip_eps_high: eps_high >= 0 (0.2; DAPO 0.28).
    dual_clip_c: None or 0 for off, else c > 1 (3.0 in the paper).

  Returns:
    (loss [B, Tr] float32, aux) with per-token indicators "clip_fraction" (the clipped term was
    the larger one) and "dual_clip_fraction" (the dual clip bound was active), and "ratio".

  Raises:
    ValueError: on shape mismatch, negative eps, or 0 < c <= 1.
  """
  _check_policy_inputs(logp, old_logp, advantages, response_mask)
  if clip_eps_low < 0 or clip_eps_high < 0:
    raise ValueError(f"rl.clip_eps_low and rl.clip_eps_high must be >= 0, "
                     f"got {clip_eps_low} and {clip_eps_high}")
  ratio = importance_ratio(logp, old_logp)
  unclipped = -advantages * ratio
  clipped = -advantages * jnp.clip(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high)
  loss = jnp.maximum(unclipped, clipped)
  aux = {"clip_fraction": (clipped > unclipped).astype(jnp.float32), "ratio": ratio}
  if dual_clip_c:
    if dual_clip_c <= 1.0:
      raise ValueError(f"rl.dual_clip_c must be > 1 (or None/0 for off), got {dual_clip_c}")
    bound = -advantages * dual_clip_c
    dual_active = (advantages < 0) & (loss > bound)
    loss = jnp.where(dual_active, bound, loss)
    aux["dual_clip_fraction"] = dual_active.astype(jnp.float32)
  return loss, aux


@register_policy_loss("pg")
def policy_gradient(logp: chex.Array, old_logp: chex.Array, advantages: chex.Array,
                    response_mask: chex.Array) -> tuple[chex.Array, dict[str, chex.Array]]:
  """Unclipped importance-weighted policy gradient L = -A pi/pi_old (REINFORCE when on-policy,
  Williams 1992: its gradient at r = 1 is -A grad log pi). Shapes as `ppo_clip`."""
  _check_policy_inputs(logp, old_logp, advantages, response_mask)
  ratio = importance_ratio(logp, old_logp)
  return -advantages * ratio, {"ratio": ratio}


def bind_policy_loss(name: str, rl_cfg) -> Callable[..., tuple[chex.Array, dict[str, chex.Array]]]:
  """The registered loss `name` with its keyword-only hyperparameters taken from `rl_cfg`.

  Returns fn(logp, old_logp, advantages, response_mask) -> (loss, aux).
  Raises: ValueError for an unknown name (listing the registered ones) or when the loss has a
  required hyperparameter that `rl_cfg` lacks.
  """
  loss_fn = POLICY_LOSSES.get(name)
  return functools.partial(loss_fn, **hyperparameters_from(loss_fn, rl_cfg,
                                                           f"rl.policy_loss={name!r}"))


def clipped_value_loss(values: chex.Array, old_values: chex.Array, returns: chex.Array, *,
                       value_clip_eps: Optional[float]) -> tuple[chex.Array, dict[str, chex.Array]]:
  """PPO value loss with clipping around the rollout's old values (Schulman et al. 2017; the
  OpenAI baselines / verl form):

    L = 0.5 * max((V - R)^2, (clip(V, V_old - eps, V_old + eps) - R)^2).

  E.g. V_old = 0, V = 1, R = 1, eps = 0.2 -> 0.5 * max(0, 0.64) = 0.32. V_old must be the values
  recorded at rollout time, not the current critic's, or the clip is a no-op.

  Args:
    values: [B, Tr] float32 V from the critic being trained. old_values, returns: [B, Tr] float32.
    value_clip_eps: eps > 0, or None / 0 for the unclipped 0.5 (V - R)^2.

  Returns:
    (loss [B, Tr] float32, {"value_clip_fraction": [B, Tr] 0/1, the clipped term was larger}).

  Raises:
    ValueError: on shape mismatch or eps < 0.
  """
  chex.assert_equal_shape([values, old_values, returns])
  unclipped = jnp.square(values - returns)
  if not value_clip_eps:
    return 0.5 * unclipped, {"value_clip_fraction": jnp.zeros_like(unclipped)}
  if value_clip_eps < 0:
    raise ValueError(f"rl.value_clip_eps must be > 0 (or 0/None for no clipping), got {value_clip_eps}")
  clipped_values = old_values + jnp.clip(values - old_values, -value_clip_eps, value_clip_eps)
  clipped = jnp.square(clipped_values - returns)
  return (0.5 * jnp.maximum(unclipped, clipped),
          {"value_clip_fraction": (clipped > unclipped).astype(jnp.float32)})
