"""Advantage estimators: pure, jittable functions registered by name (`rl.advantage` in a config).

Sequence-level estimators take rewards [B] float32 of B = P * G responses laid out group by group
(each prompt's G responses adjacent, as the sampler's `samples_per_prompt` makes them) and return one
advantage per response, [B] float32, which the update step broadcasts over the response tokens:

- `grpo` (Shao et al. 2024, DeepSeekMath): (r - group mean) / (group std + eps), unbiased std.
- `dr_grpo` (Liu et al. 2025, "Understanding R1-Zero-like training"): r - group mean.
- `rloo` (Ahmadian et al. 2024): r_i minus the mean of the other G - 1 rewards of its group.

Token-level estimators return [B, Tr] and are called through `compute_batch_advantages` (or
directly):

- `reinforce_pp` (Hu 2025, REINFORCE++): the return-to-go of the per-token rewards (the outcome
  reward on the last token, plus the KL penalty per token when it is in the reward), whitened over
  every real token of the batch, as the paper, verl and OpenRLHF do.
- `gae` (Schulman et al. 2016) needs per-token rewards and critic values (PPO).

A group (or batch) whose rewards are all equal carries no signal: its advantages are exactly 0,
even when float32 cancellation leaves a tiny nonzero mean difference or variance.

Add an estimator with

  @register_advantage("my_estimator", group_relative=True)
  def my_estimator(rewards, *, group_size):  # [B] float32 -> [B] float32
    ...
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import chex
import jax
import jax.numpy as jnp

from rlscale.rl import kl as kl_lib
from rlscale.rl.masks import masked_sum
from rlscale.rl.registry import Registry

# Added to the std before dividing (GRPO, REINFORCE++), as in verl.
STD_EPS = 1e-6


@dataclasses.dataclass(frozen=True)
class AdvantageEstimator:
  """A registered estimator.

  Attributes:
    fn: (rewards [B] float32, *, group_size: int) -> advantages [B] float32; None for token-level
      estimators.
    group_relative: the baseline comes from each prompt's group, so G >= 2 is required.
    needs_critic: token-level with a learned value function (PPO's GAE).
    token_fn: token-level without a critic: (token_rewards [B, Tr] float32, response_mask
      [B, Tr], *, gamma: float) -> advantages [B, Tr] float32 (REINFORCE++).
  """
  fn: Optional[Callable[..., chex.Array]]
  group_relative: bool = False
  needs_critic: bool = False
  token_fn: Optional[Callable[..., chex.Array]] = None


ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry(
    "rl.advantage", register_with="@rlscale.rl.advantages.register_advantage")


def register_advantage(name: str, *, group_relative: bool = False, overwrite: bool = False):
  """Decorator registering a sequence-level estimator `fn(rewards [B], *, group_size) -> [B]`.

  Raises ValueError when `name` is already registered (unless overwrite=True)."""

  def decorator(fn):
    ADVANTAGE_ESTIMATORS.register(
        name, AdvantageEstimator(fn, group_relative=group_relative), overwrite=overwrite)
    return fn

  return decorator


def _groups(rewards: chex.Array, group_size: int) -> chex.Array:
  """[B] -> [P, G]; raises ValueError when the shape or G does not fit a group-relative estimator."""
  rewards = jnp.asarray(rewards, jnp.float32)
  if rewards.ndim != 1:
    raise ValueError(f"rewards must be [B] (one per response), got shape {rewards.shape}")
  if not isinstance(group_size, int) or group_size < 2:
    raise ValueError(f"rl.group_size must be an int >= 2 for a group-relative advantage "
                     f"(the baseline comes from the other responses to the prompt), got {group_size!r}")
  if rewards.shape[0] % group_size:
    raise ValueError(f"{rewards.shape[0]} rewards do not split into groups of "
                     f"rl.group_size={group_size}")
  return rewards.reshape(-1, group_size)


def _zero_if_constant(advantages: chex.Array, rewards: chex.Array, axis) -> chex.Array:
  """Exactly 0 where every reward along `axis` is equal (no NaN, no float-cancellation residue)."""
  constant = jnp.max(rewards, axis=axis, keepdims=True) == jnp.min(rewards, axis=axis, keepdims=True)
  return jnp.where(constant, 0.0, advantages)


def _whiten(x: chex.Array, axis) -> chex.Array:
  """(x - mean) / (unbiased std + STD_EPS) along `axis`; exactly 0 when x is constant there."""
  centered = x - jnp.mean(x, axis=axis, keepdims=True)
  std = jnp.std(x, axis=axis, keepdims=True, ddof=1)
  return _zero_if_constant(centered / (std + STD_EPS), x, axis)


@register_advantage("grpo", group_relative=True)
def grpo(rewards: chex.Array, *, group_size: int) -> chex.Array:
  """GRPO outcome advantage (Shao et al. 2024): A_i = (r_i - mean_g) / (std_g + 1e-6).

  The std is the unbiased (Bessel-corrected, ddof=1) sample std of the G rewards of the group, as
  torch.std in the reference implementations.

  Args: rewards [B] float32, B = P * G, groups adjacent. group_size: G >= 2.
  Returns: [B] float32; exactly 0 for a group whose rewards are all equal.
  Raises: ValueError when rewards is not [B], G < 2, or B is not a multiple of G.
  """
  groups = _groups(rewards, group_size)
  return _whiten(groups, axis=1).reshape(-1)


@register_advantage("dr_grpo", group_relative=True)
def dr_grpo(rewards: chex.Array, *, group_size: int) -> chex.Array:
  """Dr. GRPO advantage (Liu et al. 2025): A_i = r_i - mean_g, no std division (removes the
  question-difficulty bias). Shapes and errors as `grpo`; exactly 0 for constant groups."""
  groups = _groups(rewards, group_size)
  centered = groups - jnp.mean(groups, axis=1, keepdims=True)
  return _zero_if_constant(centered, groups, axis=1).reshape(-1)


@register_advantage("rloo", group_relative=True)
def rloo(rewards: chex.Array, *, group_size: int) -> chex.Array:
  """RLOO advantage (Ahmadian et al. 2024): A_i = r_i - (sum_g - r_i) / (G - 1), the leave-one-out
  baseline; [1, 0, 0, 0] -> [1, -1/3, -1/3, -1/3]. Shapes and errors as `grpo`."""
  groups = _groups(rewards, group_size)
  others_mean = (jnp.sum(groups, axis=1, keepdims=True) - groups) / (group_size - 1)
  return _zero_if_constant(groups - others_mean, groups, axis=1).reshape(-1)


def gae(token_rewards: chex.Array, values: chex.Array, response_mask: chex.Array, *,
        gamma: float, lam: float) -> tuple[chex.Array, chex.Array]:
  """Generalised advantage estimation (Schulman et al. 2016) over response tokens.

  delta_t = r_t + gamma * V_{t+1} - V_t and A_t = delta_t + gamma * lam * A_{t+1}, computed by a
  reverse `lax.scan`; masked-out tokens are skipped (the next real token's value and advantage pass
  through them), so the last real token bootstraps from V = 0 (the episode ends there).
  E.g. gamma = lam = 1, r = [0, 1], V = [0.5, 0.8] -> A = [0.5, 0.2], returns [1.0, 1.0].

  Args:
    token_rewards: [B, Tr] float32 per-token rewards (the outcome reward on the last real token,
      plus any per-token KL penalty).
    values: [B, Tr] float32 V(s_t) from the critic at rollout time (old values).
    response_mask: [B, Tr] {0,1}.
    gamma: discount in [0, 1]. lam: GAE lambda in [0, 1].

  Returns:
    (advantages [B, Tr] float32, returns [B, Tr] float32 = advantages + values), 0 where masked.

  Raises:
    ValueError: on shape mismatch or gamma/lam outside [0, 1].
  """
  chex.assert_rank(token_rewards, 2)
  chex.assert_equal_shape([token_rewards, values, response_mask])
  for name, value in (("rl.gamma", gamma), ("rl.lam", lam)):
    if not 0.0 <= value <= 1.0:
      raise ValueError(f"{name} must be in [0, 1], got {value}")
  mask = response_mask.astype(bool)

  def step(carry, inputs):
    next_value, next_advantage = carry
    reward, value, real = inputs
    advantage = reward + gamma * next_value - value + gamma * lam * next_advantage
    carry = (jnp.where(real, value, next_value), jnp.where(real, advantage, next_advantage))
    return carry, jnp.where(real, advantage, 0.0)

  zeros = jnp.zeros(token_rewards.shape[0], jnp.float32)
  inputs = (token_rewards.T.astype(jnp.float32), values.T.astype(jnp.float32), mask.T)
  _, advantages = jax.lax.scan(step, (zeros, zeros), inputs, reverse=True)
  advantages = advantages.T
  returns = jnp.where(mask, advantages + values, 0.0)
  return advantages, returns


def discounted_returns(token_rewards: chex.Array, response_mask: chex.Array, *,
                       gamma: float) -> chex.Array:
  """Return-to-go G_t = sum_{s >= t, real} gamma^(s - t) r_s: GAE with V = 0 and lambda = 1.

  Args/returns: [B, Tr] float32 in and out; 0 where masked."""
  advantages, _ = gae(token_rewards, jnp.zeros_like(token_rewards), response_mask, gamma=gamma, lam=1.0)
  return advantages


def masked_whiten(x: chex.Array, mask: chex.Array) -> chex.Array:
  """(x - mean) / (unbiased std + 1e-6) over the real entries of x [B, Tr]; 0 where masked and
  exactly 0 everywhere when the real entries are all equal. Used by PPO and token-level REINFORCE++."""
  chex.assert_equal_shape([x, mask])
  real = mask.astype(bool)
  count = jnp.maximum(jnp.sum(real), 2)
  mean = masked_sum(x, real) / jnp.maximum(jnp.sum(real), 1)
  var = masked_sum(jnp.square(x - mean), real) / (count - 1)
  whitened = (x - mean) / (jnp.sqrt(var) + STD_EPS)
  big = jnp.finfo(jnp.float32).max
  constant = jnp.max(jnp.where(real, x, -big)) == jnp.min(jnp.where(real, x, big))
  return jnp.where(real & ~constant, whitened, 0.0)


def reinforce_pp(token_rewards: chex.Array, response_mask: chex.Array, *,
                 gamma: float) -> chex.Array:
  """REINFORCE++ advantage (Hu 2025): the return-to-go G_t = sum_{s >= t} gamma^(s - t) r_s of each
  token, whitened over all real tokens of the batch (unbiased std), as the paper, verl
  (`compute_reinforce_plus_plus_outcome_advantage`) and OpenRLHF do. No group baseline, so any G
  works. Whitening per token (not per response) makes the result the same function of the KL
  coefficient at 0 and above: with outcome rewards [1, 0], lengths [1, 3] and gamma = 1 the
  returns are [1 | 0, 0, 0] (mean 0.25, unbiased std 0.5), so A = [1.5 | -0.5, -0.5, -0.5].

  Args:
    token_rewards: [B, Tr] float32 (`outcome_token_rewards`, plus any per-token KL penalty).
    response_mask: [B, Tr] {0,1}. gamma: discount in [0, 1].
  Returns: [B, Tr] float32, 0 where masked and everywhere when all real returns are equal.
  Raises: ValueError on shape mismatch or gamma outside [0, 1].
  """
  returns = discounted_returns(token_rewards, response_mask, gamma=gamma)
  return masked_whiten(returns, response_mask)


ADVANTAGE_ESTIMATORS.register("reinforce_pp", AdvantageEstimator(None, token_fn=reinforce_pp))


def compute_advantages(name: str, rewards: chex.Array, *, group_size: int) -> chex.Array:
  """Sequence-level advantages from the estimator registered as `name`.

  Args: name: a registered sequence-level estimator (grpo, dr_grpo, rloo, or a user's).
  rewards: [B] float32. group_size: G.
  Returns: [B] float32.
  Raises: ValueError for an unknown name (listing the registered ones), a token-level estimator
  (gae, reinforce_pp: use `compute_batch_advantages`), or bad shapes / G.
  """
  estimator = ADVANTAGE_ESTIMATORS.get(name)
  if estimator.fn is None:
    raise ValueError(f"rl.advantage={name!r} is token-level (needs per-token rewards and a "
                     "response mask); call compute_batch_advantages instead")
  return estimator.fn(jnp.asarray(rewards, jnp.float32), group_size=group_size)


ADVANTAGE_ESTIMATORS.register("gae", AdvantageEstimator(None, needs_critic=True))


def outcome_token_rewards(rewards: chex.Array, response_mask: chex.Array) -> chex.Array:
  """Places each response's outcome reward on its last real token, the last position whose mask is
  1 (as verl's `token_level_rewards` and OpenRLHF put it on the final response token); a mask with
  gaps (tool output or forced text the loss skips) still gets it on a real token: mask [1, 0, 0, 1]
  -> index 3, not sum(mask) - 1 = 1, a masked slot GAE and the return-to-go skip.

  Args: rewards [B] float32; response_mask [B, Tr] {0,1}.
  Returns: [B, Tr] float32, zero except the reward at each row's last real token (all zeros for a
  row with no real token).
  """
  chex.assert_rank(response_mask, 2)
  chex.assert_shape(rewards, (response_mask.shape[0],))
  positions = jnp.arange(response_mask.shape[1])[None, :]
  last = jnp.max(jnp.where(response_mask.astype(bool), positions, -1), axis=1)
  return jnp.where((positions == last[:, None]) & (last[:, None] >= 0),
                   jnp.asarray(rewards, jnp.float32)[:, None], 0.0)


def compute_batch_advantages(rl_cfg, rewards: chex.Array, response_mask: chex.Array, *,
                             old_logp: Optional[chex.Array] = None,
                             ref_logp: Optional[chex.Array] = None,
                             values: Optional[chex.Array] = None) -> dict[str, chex.Array]:
  """Advantages (and PPO value targets) for one rollout batch, as the resolved `rl_cfg` asks.

  With `rl.kl_mode == "reward"` and `rl.kl_coef > 0`, the per-token KL penalty
  -kl_coef * KL(old_logp, ref_logp) (estimator `rl.kl_estimator`) is folded into the reward first:
  summed over the response for sequence-level estimators, per token for the token-level ones (gae,
  and reinforce_pp: the return-to-go with gamma, whitened over all real tokens, with or without
  the penalty, so the advantages are continuous in kl_coef).

  Args:
    rl_cfg: a config resolved by `presets.resolve_rl_config`.
    rewards: [B] float32 outcome rewards. response_mask: [B, Tr] {0,1}.
    old_logp, ref_logp: [B, Tr] float32; needed when KL is folded into the reward.
    values: [B, Tr] float32 old critic values; needed for gae.

  Returns:
    {"advantages": [B] (sequence-level) or [B, Tr] (token-level) float32} plus "returns"
    [B, Tr] for gae.

  Raises:
    ValueError: when an input the configuration needs is missing, or from the estimator.
  """
  estimator = ADVANTAGE_ESTIMATORS.get(rl_cfg.advantage)
  rewards = jnp.asarray(rewards, jnp.float32)
  kl_penalty = None
  if rl_cfg.kl_mode == "reward" and rl_cfg.kl_coef > 0:
    if old_logp is None or ref_logp is None:
      raise ValueError("rl.kl_mode='reward' with rl.kl_coef > 0 needs old_logp and ref_logp")
    kl_penalty = -rl_cfg.kl_coef * kl_lib.kl_divergence(
        rl_cfg.kl_estimator, old_logp, ref_logp) * response_mask
  if estimator.needs_critic:
    if values is None:
      raise ValueError(f"rl.advantage={rl_cfg.advantage!r} needs the critic's old values")
    token_rewards = outcome_token_rewards(rewards, response_mask)
    if kl_penalty is not None:
      token_rewards = token_rewards + kl_penalty
    advantages, returns = gae(token_rewards, values, response_mask, gamma=rl_cfg.gamma, lam=rl_cfg.lam)
    if rl_cfg.whiten_advantages:
      advantages = masked_whiten(advantages, response_mask)
    return {"advantages": advantages, "returns": returns}
  if estimator.token_fn is not None:
    token_rewards = outcome_token_rewards(rewards, response_mask)
    if kl_penalty is not None:
      token_rewards = token_rewards + kl_penalty
    return {"advantages": estimator.token_fn(token_rewards, response_mask, gamma=rl_cfg.gamma)}
  if kl_penalty is not None:
    rewards = rewards + jnp.sum(kl_penalty, axis=1)
  return {"advantages": compute_advantages(rl_cfg.advantage, rewards, group_size=rl_cfg.group_size)}
