"""Supervised warm start: teach the built-in model the task's answer format before RL.

RL from a random policy gets no reward signal, so the built-in model is first fine-tuned by
cross-entropy on (prompt, reference answer) pairs, in the same [prompt | response] layout the RL
update uses. The result is cached under a key of everything it depends on, so every run of a sweep
reuses one warm start.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any, Callable

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax

from rlscale import outputs
from rlscale.model import ModelConfig, forward
from rlscale.runner.interrupts import raise_if_requested
from rlscale.train.state import init_optimizer_state


def sequence_cross_entropy(params, model_config: ModelConfig, tokens: jax.Array,
                           input_mask: jax.Array, response_mask: jax.Array) -> jax.Array:
  """Token-mean negative log-likelihood of the response tokens.

  Args:
    tokens: [B, Tp + Tr] int32, prompt left-padded then response right-padded.
    input_mask: [B, Tp + Tr] {0,1}, 1 for real prompt and response tokens.
    response_mask: [B, Tr] {0,1}, 1 for the response tokens to learn (answer and EOS).
  Returns: scalar float32, mean over response tokens of -log p(token | prefix).
  """
  t_r = response_mask.shape[1]
  logits = forward(params, model_config, tokens, input_mask).logits[:, -t_r - 1:-1]
  logp = jax.nn.log_softmax(logits, axis=-1)
  nll = -jnp.take_along_axis(logp, tokens[:, -t_r:, None], axis=-1)[..., 0]
  mask = response_mask.astype(jnp.float32)
  return jnp.sum(nll * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def effective_sft_seed(config) -> int:
  """The warm start's seed: `sft.seed`, or the run's `seed` when sft.seed is None (the default, so
  a config without the field trains the warm start it always did).

  It seeds everything the warm start depends on: the built-in policy's random init and the order
  of the SFT data (the task's training stream under this seed). `seed` seeds RL alone (sampling
  keys, the prompt stream, a critic's head), so runs with different `seed` and one `sft.seed`
  start RL from the same parameters (common random numbers for the warm start)."""
  seed = config.sft.get("seed")
  return config.seed if seed is None else seed


def warm_start_sft_fields(sft_fields: dict) -> dict:
  """The `sft` section's fields that enter the warm start's cache key as they are: all but
  cache_dir (where it is stored) and seed (the key holds the effective one,
  `effective_sft_seed`, so sft.seed=None and sft.seed=seed share one warm start)."""
  return {k: v for k, v in sft_fields.items() if k not in ("cache_dir", "seed")}


def warm_start_key(parts: dict) -> str:
  """Stable short hash of a JSON-able description of everything the warm start depends on."""
  blob = json.dumps(parts, sort_keys=True, default=str).encode()
  return hashlib.sha256(blob).hexdigest()[:16]


def save_params(path: str, params: Any) -> None:
  """Atomic msgpack write (`outputs.write_atomic`): a crash never leaves a torn file."""
  outputs.write_atomic(path, flax.serialization.msgpack_serialize(
      jax.tree.map(np.asarray, jax.device_get(params))))


def load_params(path: str) -> Any:
  with open(path, "rb") as f:
    return flax.serialization.msgpack_restore(f.read())


def supervised_warm_start(
    params: Any,
    model_config: ModelConfig,
    make_batch: Callable[[int], dict],
    *,
    steps: int,
    learning_rate: float,
    cache_path: str | None = None,
    log: Callable[[str], None] = print,
) -> tuple[Any, dict]:
  """Adam fine-tuning of `params` by response cross-entropy, cached at `cache_path`.

  Args:
    params: initial parameters.
    make_batch: step -> {"tokens", "input_mask", "response_mask"} numpy arrays (see
      `sequence_cross_entropy`); deterministic in the step so the warm start is reproducible.
    steps: optimizer steps (0 returns params unchanged).
    learning_rate: Adam learning rate (cosine decay to 10% over `steps`).
    cache_path: msgpack file; read if present, written after training.
  Returns: (params, info) with info {"loss": final loss, "seconds": wall time, "cached": bool}.
  Raises: ValueError for steps < 0 or learning_rate <= 0 (naming the sft.* field).
  """
  if steps < 0:
    raise ValueError(f"sft.steps must be >= 0, got {steps}")
  if learning_rate <= 0:
    raise ValueError(f"sft.learning_rate must be > 0, got {learning_rate}")
  if cache_path and os.path.exists(cache_path):
    log(f"warm start: loading cached SFT parameters from {cache_path}")
    cached = load_params(cache_path)
    return jax.tree.map(lambda ref, x: jnp.asarray(x, ref.dtype), params, cached), {
        "loss": None, "seconds": 0.0, "cached": True}
  if steps == 0:
    return params, {"loss": None, "seconds": 0.0, "cached": False}
  schedule = optax.cosine_decay_schedule(learning_rate, steps, alpha=0.1)
  optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(schedule))
  opt_state = init_optimizer_state(optimizer, params)

  @jax.jit
  def train_step(params, opt_state, batch):
    loss, grads = jax.value_and_grad(sequence_cross_entropy)(
        params, model_config, batch["tokens"], batch["input_mask"], batch["response_mask"])
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  start = time.perf_counter()
  loss = None
  for step in range(steps):
    raise_if_requested()  # a stop request the handler's KeyboardInterrupt may not have carried
    params, opt_state, loss = train_step(params, opt_state, make_batch(step))
    if step % max(1, steps // 5) == 0 or step == steps - 1:
      log(f"warm start: SFT step {step + 1}/{steps} loss {float(loss):.4f}")
  seconds = time.perf_counter() - start
  if cache_path:
    os.makedirs(os.path.dirname(cache_path) or ".", exist_ok=True)
    save_params(cache_path, params)
  return params, {"loss": float(loss), "seconds": seconds, "cached": False}

