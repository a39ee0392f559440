"""Per-token log-probabilities and entropies of the response part of [prompt | response] sequences.

The model's logits at position t predict token t + 1, so the Tr response tokens (the last Tr
columns of `tokens`) are scored by the logits at columns T - Tr - 1 ... T - 2.
"""

from __future__ import annotations

import chex
import jax.numpy as jnp

from rlscale.model.transformer import tempered_log_softmax, token_logp


def response_logits(logits: chex.Array, response_len: int) -> chex.Array:
  """The model outputs at the positions that predict the last `response_len` tokens.

  Args:
    logits: [B, T, V] float32 from a full causal forward over [prompt | response] (or any
      per-position output [B, T, ...], e.g. critic values [B, T]).
    response_len: Tr, the response width; 1 <= Tr < T.

  Returns:
    [B, Tr, ...]: logits[:, T - Tr - 1 : T - 1].

  Raises:
    ValueError: when Tr is not in [1, T - 1] or the input has rank < 2.
  """
  if logits.ndim < 2:
    raise ValueError(f"expected per-position outputs [B, T, ...], got shape {logits.shape}")
  t = logits.shape[1]
  if not 1 <= response_len < t:
    raise ValueError(f"response length {response_len} must be in [1, {t - 1}] for {t} tokens "
                     "(at least one prompt token precedes the response)")
  return logits[:, t - response_len - 1: t - 1]


def response_logp(logits: chex.Array, tokens: chex.Array, response_len: int,
                  temperature: float = 1.0) -> chex.Array:
  """log pi(token) of each response token at the sampling temperature.

  Args:
    logits: [B, T, V] float32; tokens: [B, T] int32 (the response is the last Tr columns).
    response_len: Tr. temperature: the sampler's temperature (> 0; ratios need the same one).

  Returns:
    [B, Tr] float32 log softmax(logits / temperature) gathered at tokens[:, T - Tr:].
  """
  chex.assert_rank(tokens, 2)
  chex.assert_equal_shape_prefix([logits, tokens], 2)
  return token_logp(response_logits(logits, response_len), tokens[:, -response_len:], temperature)


def entropy_from_logits(logits: chex.Array, temperature: float = 1.0) -> chex.Array:
  """Entropy H = -sum_v p_v log p_v of softmax(logits / temperature), in nats.

  Args: logits [..., V] float32; -inf entries (masked vocabulary) are allowed if each row has one
  finite entry. temperature: > 0 (see `tempered_log_softmax`).
  Returns: [...] float32, >= 0. Terms with p_v = 0 (masked entries, or underflow at a tiny
  temperature) count 0 log 0 = 0, in the value and in the gradient: [0, -inf] has entropy 0 and a
  zero gradient, never NaN.
  """
  logp = tempered_log_softmax(logits, temperature)
  probs = jnp.exp(logp)
  # Double where: the inner one keeps -inf out of the product, so its gradient is 0 * 0 and not
  # 0 * inf; the outer mask is then exact (p = 0 gives a 0 term).
  safe_logp = jnp.where(probs > 0, logp, 0.0)
  return jnp.maximum(-jnp.sum(probs * safe_logp, axis=-1), 0.0)
