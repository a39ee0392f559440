"""Per-token estimators of KL(pi || pi_ref) from the log-probabilities of sampled tokens
(Schulman 2020, "Approximating KL divergence"), registered by name (`rl.kl_estimator`).

With tokens sampled from pi and d = ref_logp - logp = log(pi_ref / pi):
- k1 = -d                    unbiased, high variance, can be negative per token;
- k2 = d^2 / 2               biased, low variance, >= 0;
- k3 = exp(d) - d - 1        unbiased, low variance, >= 0 (GRPO's estimator). Following verl's
  "low_var_kl", d is clamped to [-20, 20] before exp and k3 to [-10, 10] so one token whose
  probabilities differ wildly cannot produce Inf or dominate the batch.

Every estimator reads the log-ratio from `log_ratio`, so a token that both policies give probability
0 (logp = ref_logp = -inf, a masked vocabulary entry) has d = 0 and KL 0, not NaN.

An estimator is `fn(logp [...], ref_logp [...]) -> [...] float32`; add one with
`KL_ESTIMATORS.register("name", fn)`.
"""

from __future__ import annotations

from typing import Callable

import chex
import jax.numpy as jnp

from rlscale.rl.registry import Registry

KL_ESTIMATORS: Registry[Callable[[chex.Array, chex.Array], chex.Array]] = Registry(
    "rl.kl_estimator", register_with="@rlscale.rl.kl.KL_ESTIMATORS.register")

# verl's clamps for k3: the log-ratio before exp, and the estimate itself.
K3_LOG_RATIO_CLAMP = 20.0
K3_VALUE_CLAMP = 10.0


def log_ratio(logp: chex.Array, other_logp: chex.Array) -> chex.Array:
  """log(pi / pi_other) = logp - other_logp, and 0 where both are -inf (the two policies agree that
  the token is impossible; the plain difference would be NaN). [...] float32 in and out.

  The guard is a `where` on the -inf case only, so the gradient elsewhere is the difference's
  (+1 and -1), and 0 (never NaN) at the guarded entries."""
  both_impossible = jnp.isneginf(logp) & jnp.isneginf(other_logp)
  return jnp.where(both_impossible, 0.0, logp - other_logp)


@KL_ESTIMATORS.register("k1")
def k1(logp: chex.Array, ref_logp: chex.Array) -> chex.Array:
  """k1 = logp - ref_logp; [...] float32 in and out."""
  return log_ratio(logp, ref_logp)


@KL_ESTIMATORS.register("k2")
def k2(logp: chex.Array, ref_logp: chex.Array) -> chex.Array:
  """k2 = (logp - ref_logp)^2 / 2; [...] float32 in and out."""
  return 0.5 * jnp.square(log_ratio(logp, ref_logp))


@KL_ESTIMATORS.register("k3")
def k3(logp: chex.Array, ref_logp: chex.Array) -> chex.Array:
  """k3 = exp(d) - d - 1 with d = clip(ref_logp - logp, -20, 20), clipped to [-10, 10] (verl)."""
  d = jnp.clip(log_ratio(ref_logp, logp), -K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)
  return jnp.clip(jnp.exp(d) - d - 1.0, -K3_VALUE_CLAMP, K3_VALUE_CLAMP)


def kl_divergence(name: str, logp: chex.Array, ref_logp: chex.Array) -> chex.Array:
  """Per-token KL estimate with the estimator registered as `name`.

  Args: name: "k1", "k2", "k3" or a registered one. logp, ref_logp: [...] float32, equal shapes.
  Returns: [...] float32 (not masked: multiply by the response mask or aggregate).
  Raises: ValueError for an unknown name (listing the registered ones) or unequal shapes.
  """
  estimator = KL_ESTIMATORS.get(name)
  logp, ref_logp = jnp.asarray(logp, jnp.float32), jnp.asarray(ref_logp, jnp.float32)
  if logp.shape != ref_logp.shape:
    raise ValueError(f"logp shape {logp.shape} must equal ref_logp shape {ref_logp.shape}")
  return estimator(logp, ref_logp)
