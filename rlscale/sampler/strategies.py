"""Sampling strategies: greedy, temperature, top-k, top-p (nucleus) and min-p over next-token logits.

Order of operations (as transformers' `generate` builds its warpers, `_get_logits_processor`):
divide the logits by the temperature, keep the top-k tokens, keep the nucleus of the remaining
distribution, then keep the tokens whose probability is at least min_p times the largest (of what
is left, renormalised), then draw. Top-p before min-p matters: probabilities [0.5, 0.3, 0.15,
0.05] with top_p 0.81 and min_p 0.2 keep tokens {0, 1, 2} (min-p first would renormalise to
[0.526, 0.316, 0.158] and top-p would then keep {0, 1}).

The log-probability returned with each token is log softmax(logits / temperature)[token]: the policy
at the sampling temperature BEFORE top-k / top-p filtering. That is the quantity the trainer
recomputes from a full forward (`rlscale.model.token_logp(logits, tokens, temperature)`), so
`old_logp` from the sampler and the trainer's `logp` agree exactly when the parameters are the same.
With filtering on, the tokens are drawn from the truncated distribution, so this logp is not the
log-probability of the behaviour distribution; it is the log-probability under the policy the loss
optimises (the usual choice in PPO/GRPO implementations, which treat truncation as part of the
environment).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from rlscale.model.transformer import token_logp


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
  """How to pick the next token from logits [B, V].

  Attributes:
    temperature: >= 0; 0 means greedy (argmax), otherwise logits are divided by it.
    top_k: >= 0; keep the k most likely tokens (0 = off). Ignored when greedy.
    top_p: in (0, 1]; keep the smallest set of most likely tokens whose probability mass reaches
      top_p (Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration"); 1.0 = off.
      Ignored when greedy.
    min_p: in [0, 1]; keep the tokens whose probability is at least min_p times the most likely
      token's (Nguyen et al. 2024, "Turning Up the Heat: Min-p Sampling"; as vLLM, TRL and
      transformers' `min_p`); 0.0 = off. Ignored when greedy.

  Hashable (frozen), so it can be a static argument of a jitted function. Python or numpy numbers
  are accepted and stored as Python float / int / float.

  Raises:
    ValueError: naming the field, when a value is not a number of the right kind (a bool is not)
      or lies outside the range above.
  """
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  min_p: float = 0.0

  def __post_init__(self):
    # Stored as Python numbers (numpy scalars converted), so equal configs hash alike and a
    # jitted sampler compiles once per distinct strategy.
    temperature, top_p = _as_float(self.temperature), _as_float(self.top_p)
    min_p = _as_float(self.min_p)
    top_k = _as_int(self.top_k)
    if temperature is None or not temperature >= 0:
      raise ValueError("sampling.temperature must be a float >= 0 (0 = greedy), "
                       f"got {self.temperature!r}")
    if top_k is None or top_k < 0:
      raise ValueError(f"sampling.top_k must be an int >= 0 (0 = off), got {self.top_k!r}")
    if top_p is None or not 0 < top_p <= 1:
      raise ValueError(f"sampling.top_p must be a float in (0, 1] (1.0 = off), got {self.top_p!r}")
    if min_p is None or not 0 <= min_p <= 1:
      raise ValueError(f"sampling.min_p must be a float in [0, 1] (0.0 = off), got {self.min_p!r}")
    object.__setattr__(self, "temperature", temperature)
    object.__setattr__(self, "top_k", top_k)
    object.__setattr__(self, "top_p", top_p)
    object.__setattr__(self, "min_p", min_p)

  @property
  def greedy(self) -> bool:
    return self.temperature == 0


def _as_float(value):
  """A Python or numpy real number as a Python float; None for anything else (bool included)."""
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                    np.floating)):
    return None
  return float(value)


def _as_int(value):
  """A Python or numpy integer as a Python int; None for anything else (bool, float included)."""
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
    return None
  return int(value)

def top_k_filter(logits: jax.Array, k: int) -> jax.Array:
  """Sets every logit below the k-th largest of its row to -inf.

  Args:
    logits: [..., V] float32.
    k: number of tokens to keep, 0 = keep all. Ties with the k-th largest are all kept.
  Returns:
    [..., V] float32, the kept logits unchanged.
  Raises:
    ValueError: if k < 0.
  """
  if k < 0:
    raise ValueError(f"top_k must be >= 0, got {k}")
  if k == 0 or k >= logits.shape[-1]:
    return logits
  kth_largest = jax.lax.top_k(logits, k)[0][..., -1:]
  return jnp.where(logits >= kth_largest, logits, -jnp.inf)


def top_p_filter(logits: jax.Array, p: float) -> jax.Array:
  """Nucleus filter: keeps the smallest set of most likely tokens whose probability reaches p.

  A token is kept iff the probability mass of the tokens ranked strictly above it is < p, so the
  token that crosses p is included and the most likely token is always kept (never empty).
  E.g. probs [0.5, 0.3, 0.15, 0.05]: p=0.8 keeps {0, 1}; p=0.5 keeps {0}; p=0.81 keeps {0, 1, 2}.
  Ties in probability are ranked by token id.

  Args:
    logits: [..., V] float32 (already divided by the temperature); -inf entries are never kept.
    p: in (0, 1]; 1.0 keeps everything.
  Returns:
    [..., V] float32, the kept logits unchanged and the others -inf.
  Raises:
    ValueError: if p is not in (0, 1].
  """
  if not 0 < p <= 1:
    raise ValueError(f"top_p must be in (0, 1], got {p}")
  if p == 1:
    return logits
  order = jnp.argsort(-logits, axis=-1, stable=True)
  sorted_probs = jnp.take_along_axis(jax.nn.softmax(logits, axis=-1), order, axis=-1)
  mass_above = jnp.cumsum(sorted_probs, axis=-1) - sorted_probs
  keep_sorted = mass_above < p
  # Scatter the decisions back from rank order to token order.
  keep = jnp.zeros_like(keep_sorted).at[
      tuple(jnp.indices(order.shape)[:-1]) + (order,)].set(keep_sorted)
  return jnp.where(keep, logits, -jnp.inf)


def min_p_filter(logits: jax.Array, min_p: float) -> jax.Array:
  """Min-p filter: keeps the tokens with probability >= min_p * (the row's largest probability).

  As transformers' `MinPLogitsWarper` (probabilities from a softmax of `logits`, the most likely
  token always kept). E.g. probs [0.5, 0.3, 0.15, 0.05] with min_p 0.2 (threshold 0.1) keep
  {0, 1, 2}, which renormalise to [0.5, 0.3, 0.15] / 0.95 = [0.526, 0.316, 0.158].

  Args:
    logits: [..., V] float32 (already divided by the temperature); -inf entries are never kept
      unless min_p is 0.
    min_p: in [0, 1]; 0.0 keeps everything.
  Returns:
    [..., V] float32, the kept logits unchanged and the others -inf.
  Raises:
    ValueError: if min_p is not in [0, 1].
  """
  if not 0 <= min_p <= 1:
    raise ValueError(f"min_p must be in [0, 1], got {min_p}")
  if min_p == 0:
    return logits
  probs = jax.nn.softmax(logits, axis=-1)
  top = jnp.max(probs, axis=-1, keepdims=True)
  return jnp.where(probs >= min_p * top, logits, -jnp.inf)  # min_p <= 1: the top token stays


def filter_logits(logits: jax.Array, sampling: SamplingConfig) -> jax.Array:
  """Temperature, then top-k, then top-p, then min-p (the order of transformers' warpers):
  logits [..., V] float32 -> the logits drawn from.

  Not meant for greedy configs (temperature 0): raises ValueError there."""
  if sampling.greedy:
    raise ValueError("filter_logits needs sampling.temperature > 0; greedy decoding takes the argmax")
  logits = logits.astype(jnp.float32) / sampling.temperature
  logits = top_p_filter(top_k_filter(logits, sampling.top_k), sampling.top_p)
  return min_p_filter(logits, sampling.min_p)


def first_argmax(x: jax.Array) -> jax.Array:
  """Index of the first maximum along the last axis: [..., V] -> [...] int32 (like jnp.argmax).

  Computed as a max-reduce then a min-reduce over matching indices: two vectorised reductions,
  several times faster on XLA:CPU than jnp.argmax's variadic (value, index) reduce. A row with a
  NaN gives V - 1 (jnp.argmax would give the NaN's index).
  """
  size = x.shape[-1]
  hit = x == jnp.max(x, axis=-1, keepdims=True)
  first = jnp.min(jnp.where(hit, jnp.arange(size, dtype=jnp.int32), size), axis=-1)
  return jnp.minimum(first, size - 1)


def sample_token(logits: jax.Array, rng: jax.Array, sampling: SamplingConfig):
  """Draws one token per row.

  Args:
    logits: [B, V] float32 next-token logits.
    rng: a PRNG key (unused when greedy).
    sampling: the strategy; temperature 0 takes the argmax (first maximum on ties).
  Returns:
    token: [B] int32.
    logp: [B] float32, log softmax(logits / temperature)[token] before top-k / top-p / min-p filtering
      (module docstring); for greedy decoding the temperature-1 log-probability.
  """
  gumbel = None if sampling.greedy else jax.random.gumbel(rng, logits.shape, jnp.float32)
  return sample_token_from_noise(logits, gumbel, sampling)


def sample_token_from_noise(logits: jax.Array, gumbel, sampling: SamplingConfig):
  """`sample_token` with its Gumbel noise drawn by the caller.

  Gumbel-max (the same draw as jax.random.categorical(rng, logits) with a faster argmax): the
  token is argmax(filtered logits + gumbel). `sample_token(logits, rng, s)` equals
  `sample_token_from_noise(logits, jax.random.gumbel(rng, logits.shape), s)`, so a sampler may draw
  the noise of many steps in one vectorised call and get the same tokens.

  Args:
    logits: [B, V] float32 next-token logits.
    gumbel: [B, V] float32 standard Gumbel noise; ignored (may be None) when greedy.
    sampling: the strategy.
  Returns:
    (token [B] int32, logp [B] float32) as `sample_token`.
  Raises:
    ValueError: if sampling is not greedy and gumbel is None or its shape differs from logits.
  """
  if sampling.greedy:
    token = first_argmax(logits)
  else:
    if gumbel is None or gumbel.shape != logits.shape:
      raise ValueError(f"gumbel must have the logits shape {logits.shape} when sampling, got "
                       f"{None if gumbel is None else gumbel.shape}")
    token = first_argmax(filter_logits(logits, sampling) + gumbel)
  return token, token_logp(logits, token, sampling.temperature)
