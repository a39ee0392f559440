"""Memory of the compiled update step, measured without running it.

`update_step_memory` lowers and compiles the pmapped update step of `update.make_update_fn` for
abstract inputs (shapes and dtypes only: no parameters are initialised, nothing is executed) and
reads XLA's `memory_analysis()` of the per-device executable. That is how a config's memory is
checked on a laptop CPU before it is sent to an accelerator: the buffer assignment of the CPU
backend is not the GPU's, but the big terms (logits, activations kept for the backward pass,
gradients and optimizer temporaries) are the same arrays on every backend.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import optax

from rlscale.model.config import ModelConfig
from rlscale.model.transformer import init_params
from rlscale.train import update as update_lib
from rlscale.train.compile_options import compile_lowered
from rlscale.train.state import create_train_state, critic_params_from_policy

GIB = 2 ** 30


@dataclasses.dataclass(frozen=True)
class StepMemory:
  """Bytes XLA assigns to one device's update-step executable (`CompiledMemoryStats`).

  Attributes:
    temp_bytes: temporaries (activations, logits, gradients, optimizer intermediates).
    argument_bytes: inputs (state: params and optimizer state; the batch).
    output_bytes: outputs (the new state and the metrics).
    alias_bytes: outputs that reuse donated input buffers (the state).
    generated_code_bytes: the executable's code.
  """
  temp_bytes: int
  argument_bytes: int
  output_bytes: int
  alias_bytes: int
  generated_code_bytes: int

  @property
  def peak_bytes(self) -> int:
    """Upper bound on live bytes: arguments + outputs not aliased to them + temporaries."""
    return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes

  def gib(self) -> dict[str, float]:
    """Every field and the peak in GiB (2^30 bytes), rounded to 3 decimals."""
    out = {k: v / GIB for k, v in dataclasses.asdict(self).items()}
    out["peak_bytes"] = self.peak_bytes / GIB
    return {k.replace("_bytes", "_gib"): round(v, 3) for k, v in out.items()}


def abstract_batch(rl_cfg, batch_size: int, prompt_len: int, response_len: int,
                   num_devices: int = 1) -> dict[str, jax.ShapeDtypeStruct]:
  """Shapes of an update batch ([D, b, ...] with b = batch_size / D) for `rl_cfg` (the keys
  `update.check_batch` requires; per-token advantages for a critic, per-response otherwise)."""
  b, t, tr = batch_size // num_devices, prompt_len + response_len, response_len
  spec = lambda *shape, dtype=jnp.float32: jax.ShapeDtypeStruct((num_devices,) + shape, dtype)  # noqa: E731
  batch = {"tokens": spec(b, t, dtype=jnp.int32), "input_mask": spec(b, t, dtype=jnp.int32),
           "response_mask": spec(b, tr, dtype=jnp.int32), "old_logp": spec(b, tr)}
  if update_lib.uses_critic(rl_cfg):
    batch.update(advantages=spec(b, tr), old_values=spec(b, tr), returns=spec(b, tr))
  else:
    batch["advantages"] = spec(b)
  if update_lib.uses_ref_logp(rl_cfg):
    batch["ref_logp"] = spec(b, tr)
  return batch


def update_step_memory(model_config: ModelConfig, rl_cfg, optimizer: optax.GradientTransformation,
                       *, batch_size: int, prompt_len: int, response_len: int,
                       critic_optimizer: Optional[optax.GradientTransformation] = None
                       ) -> StepMemory:
  """Compiles the update step for one device and `batch_size` rows of prompt_len + response_len
  tokens (abstract inputs only, with the XLA options the runner's step gets) and returns its
  `StepMemory`.

  Args:
    model_config: the policy (its dtype, param_dtype and remat are what gets compiled).
    rl_cfg: a resolved `rl` section (microbatches, epochs, minibatches, the loss).
    optimizer / critic_optimizer: as for `update.make_update_fn`.
    batch_size, prompt_len, response_len: the per-device batch b and Tp, Tr in tokens.

  Raises: ValueError from `make_update_fn` for an invalid rl config.
  """
  device = jax.local_devices()[:1]
  fn = update_lib.make_update_fn(model_config, rl_cfg, optimizer,
                                 critic_optimizer=critic_optimizer, devices=device)

  def abstract_state():
    params = init_params(model_config, jax.random.key(0))
    critic = None
    if update_lib.uses_critic(rl_cfg):
      critic = critic_params_from_policy(params, model_config, jax.random.key(1))
    return create_train_state(params, optimizer, critic_params=critic,
                              critic_optimizer=critic_optimizer or (optimizer if critic else None))

  state = jax.tree.map(lambda x: jax.ShapeDtypeStruct((1,) + x.shape, x.dtype),
                       jax.eval_shape(abstract_state))
  batch = abstract_batch(rl_cfg, batch_size, prompt_len, response_len)
  rng = jax.ShapeDtypeStruct((1,), jax.eval_shape(lambda: jax.random.key(0)).dtype)
  lowered = fn.pmapped.lower(state, batch, rng)
  stats = compile_lowered(lowered, fn.compiler_options).memory_analysis()
  return StepMemory(temp_bytes=int(stats.temp_size_in_bytes),
                    argument_bytes=int(stats.argument_size_in_bytes),
                    output_bytes=int(stats.output_size_in_bytes),
                    alias_bytes=int(stats.alias_size_in_bytes),
                    generated_code_bytes=int(stats.generated_code_size_in_bytes))
