"""Per-token log-probabilities and entropies of the response part of [prompt | response] sequences.

The model's logits at position t predict token t + 1, so the Tr response tokens (the last Tr
columns of `tokens`) are scored by the logits at columns T - Tr - 1 ... T - 2. The update step
scores them with `chunked_response_logp`: the output head on those Tr positions only, a chunk of
positions at a time, so memory never holds [B, T, V] float32 logits (for a 151,936-token vocabulary
and 8 x 1,024 tokens that array alone is 4.6 GiB, and its gradient as much again).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from rlscale.model.transformer import output_logits, tempered_log_softmax, token_logp


def response_positions(total_len: int, response_len: int) -> tuple[int, int]:
  """(start, stop): the positions [start, stop) whose outputs predict the last `response_len` of
  `total_len` tokens, T - Tr - 1 and T - 1 (for `forward(..., outputs=...)`).

  Raises: ValueError when Tr is not in [1, T - 1]."""
  if not 1 <= response_len < total_len:
    raise ValueError(f"response length {response_len} must be in [1, {total_len - 1}] for "
                     f"{total_len} tokens (at least one prompt token precedes the response)")
  return total_len - response_len - 1, total_len - 1


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
  start, stop = response_positions(logits.shape[1], response_len)
  return logits[:, start:stop]


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


# Logits held at once by `chunked_response_logp`: 2^25 float32 = 128 MiB per chunk (a 0.6B Qwen3
# with V = 151,936 and 8 rows scores 27 positions per chunk).
LOGITS_CHUNK_ELEMENTS = 2 ** 25


def logits_chunk_size(rows: int, response_len: int, vocab_size: int,
                      max_elements: int = LOGITS_CHUNK_ELEMENTS) -> int:
  """Response positions per chunk so that rows x chunk x V logits stay within `max_elements`:
  at least 1, at most Tr (one chunk when the whole [b, Tr, V] fits)."""
  return int(max(1, min(response_len, max_elements // max(rows * vocab_size, 1))))


def chunked_response_logp(params, model_config, hidden: chex.Array, tokens: chex.Array,
                          response_len: int, temperature: float = 1.0, *,
                          chunk_size: int | None = None) -> tuple[chex.Array, chex.Array]:
  """log pi(token) and the entropy of each response position, from the final hidden states, the
  output head applied to `chunk_size` positions at a time.

  Only the Tr positions that predict response tokens go through the output head (no logits over
  the prompt), and with several chunks each chunk's logits are recomputed in the backward pass
  (`jax.checkpoint` inside `lax.map`), so no [B, Tr, V] float32 array exists in the forward or
  the backward: memory holds one [B, chunk, V] block. The numbers equal
  `response_logp(forward(...).logits, ...)` and `entropy_from_logits` of the same logits (the same
  operations per position; only the order in which positions are visited changes).

  Args:
    params, model_config: the policy (`transformer.output_logits` reads the output head).
    hidden: [B, T, hidden_size], `forward(..., head=False).hidden`.
    tokens: [B, T] int32 (the response is the last Tr columns).
    response_len: Tr, 1 <= Tr < T. temperature: the sampler's (> 0).
    chunk_size: positions per chunk; None picks `logits_chunk_size` (128 MiB of logits).

  Returns:
    (logp [B, Tr] float32, entropy [B, Tr] float32 in nats, >= 0).

  Raises:
    ValueError: Tr not in [1, T - 1], or chunk_size < 1.
  """
  chex.assert_rank(tokens, 2)
  chex.assert_equal_shape_prefix([hidden, tokens], 2)
  return response_states_logp(params, model_config, response_logits(hidden, response_len),
                              tokens[:, -response_len:], temperature, chunk_size=chunk_size)


def response_states_logp(params, model_config, states: chex.Array, targets: chex.Array,
                         temperature: float = 1.0, *,
                         chunk_size: int | None = None) -> tuple[chex.Array, chex.Array]:
  """`chunked_response_logp` from the final hidden states of the response-predicting positions
  alone, e.g. `forward(..., head=False, outputs=response_positions(T, Tr)).hidden`.

  Args: states [B, Tr, hidden_size]; targets [B, Tr] int32, the response tokens; temperature,
  chunk_size as in `chunked_response_logp`.
  Returns: (logp [B, Tr] float32, entropy [B, Tr] float32 in nats).
  Raises: ValueError for chunk_size < 1.
  """
  chex.assert_rank(targets, 2)
  chex.assert_equal_shape_prefix([states, targets], 2)
  b, response_len = targets.shape
  if chunk_size is None:
    chunk_size = logits_chunk_size(b, response_len, model_config.vocab_size,
                                   LOGITS_CHUNK_ELEMENTS)  # read when called (tests patch it)
  if chunk_size < 1:
    raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")

  def score(h, target):
    logits = output_logits(params, model_config, h)
    return token_logp(logits, target, temperature), entropy_from_logits(logits, temperature)

  if chunk_size >= response_len:  # one chunk: nothing to save by recomputing
    return score(states, targets)
  chunks = -(-response_len // chunk_size)
  pad = chunks * chunk_size - response_len  # padded positions are scored, then dropped
  states = jnp.pad(states, ((0, 0), (0, pad), (0, 0)))
  targets = jnp.pad(targets, ((0, 0), (0, pad)))
  # [B, n * c, ...] -> [n, B, c, ...]: lax.map runs over the chunk axis.
  to_chunks = lambda x: jnp.moveaxis(x.reshape((b, chunks, chunk_size) + x.shape[2:]), 1, 0)  # noqa: E731
  logp, entropy = jax.lax.map(lambda args: jax.checkpoint(score)(*args),
                              (to_chunks(states), to_chunks(targets)))
  from_chunks = lambda x: jnp.moveaxis(x, 0, 1).reshape(b, chunks * chunk_size)[:, :response_len]  # noqa: E731
  return from_chunks(logp), from_chunks(entropy)
