"""Memory of a run: formulas for the big arrays, and the compiled update step measured.

Two tools, for two questions:

- The formulas (`train_state_bytes`, `kv_cache_bytes`, `logits_bytes`, `activation_bytes`,
  `host_rollout_bytes`) count the bytes of the arrays a run cannot do without, from the model's
  and the batch's sizes alone, in microseconds: `rlscale.runner.preflight` compares them with the
  machine's memory before a run starts. They are estimates from below: XLA's temporaries, the
  attention scores, the MLP's intermediates and fragmentation come on top, so a run they pass may
  still not fit, but a run they refuse cannot.
- `update_step_memory` lowers and compiles the update step that `update_fn.make_update_fn` jits
  over a mesh (one device by default), for abstract inputs (shapes, dtypes and shardings only: no
  parameters are initialised, nothing is executed), and reads XLA's `memory_analysis()` of the
  per-device program. That is how a config's memory is checked on a laptop CPU before it is sent
  to an accelerator: the buffer assignment of the CPU backend is not the GPU's, but the big terms
  (logits, activations kept for the backward pass, gradients and optimizer temporaries) are the
  same arrays on every backend. It takes a compile (seconds to minutes), so it is a tool for
  sizing, not a check run before every run.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import optax

from jax.sharding import NamedSharding, PartitionSpec

from rlscale.model.config import DTYPES, ModelConfig
from rlscale.parallel.data import batch_sharding
from rlscale.parallel.mesh import make_mesh, mesh_config
from rlscale.rl.presets import resolve_rl_config
from rlscale.train import update as update_lib
from rlscale.train.compile_options import compile_lowered
from rlscale.train.state import abstract_train_state
from rlscale.train.update_fn import make_update_fn

GIB = 2 ** 30
FLOAT32_BYTES = 4
INT32_BYTES = 4
# Bytes per parameter of a trained model: float32 master weight + Adam's two float32 moments
# (the training state every source keeps, `builders.build_model`).
TRAINED_PARAM_BYTES = 3 * FLOAT32_BYTES


def dtype_bytes(dtype: str) -> int:
  """Bytes of one element of the model dtype named `dtype` ("float32" 4, "bfloat16" and
  "float16" 2). Raises: KeyError for a name outside `model.config.DTYPES`."""
  return jnp.dtype(DTYPES[dtype]).itemsize


def train_state_bytes(num_params: int, *, trained: bool = True) -> int:
  """Bytes of a model's parameters kept between steps: float32 weights, with Adam's two float32
  moments when `trained` (12 bytes per parameter), without (4: a frozen reference policy).
  The gradients (4 more while the update runs) are counted by the caller with the update."""
  return num_params * (TRAINED_PARAM_BYTES if trained else FLOAT32_BYTES)


def kv_cache_bytes(model_config: ModelConfig, rows: int, slots: int) -> int:
  """Bytes of the sampler's preallocated KV cache (`transformer.init_cache`): keys and values of
  every layer for `rows` sequences of `slots` = prompt + response tokens, in the compute dtype:
  rows x layers x 2 x kv_heads x head_dim x slots x dtype bytes."""
  c = model_config
  return (rows * c.num_layers * 2 * c.num_kv_heads * c.head_dim * slots
          * dtype_bytes(c.dtype))


def logits_bytes(model_config: ModelConfig, tokens: int) -> int:
  """Bytes of float32 logits [tokens, V] (the model's logits are float32 whatever the compute
  dtype): one decode step's [B, V], or an update microbatch's positions."""
  return tokens * model_config.vocab_size * FLOAT32_BYTES


def activation_bytes(model_config: ModelConfig, tokens: int, logit_tokens: int) -> int:
  """Bytes the update step keeps for the backward pass of a microbatch of `tokens` positions, at
  least: every layer's input [tokens, hidden] in the compute dtype (all that per-layer
  rematerialisation keeps; without remat far more is kept) and float32 logits of
  `logit_tokens` positions (the response log-probs are scored in chunks of positions,
  `rl.logprob.chunked_response_logp`: one chunk holds at least one position per row).
  Left out: attention scores, the MLP's intermediates, the logits' gradient and XLA's
  temporaries, which depend on the kernels and on remat; so this is a lower bound."""
  c = model_config
  layer_inputs = tokens * c.num_layers * c.hidden_size * dtype_bytes(c.dtype)
  return layer_inputs + logits_bytes(model_config, logit_tokens)


def host_rollout_bytes(rows: int, prompt_tokens: int, response_tokens: int) -> int:
  """Bytes of one step's rollout and update batch as host numpy arrays, at least: tokens and
  input_mask [rows, Tp + Tr] int32, and response_mask, old_logp (sampler log-probs) and the
  sampler's response tokens [rows, Tr] int32 / float32 (reference log-probs, values and returns
  come on top when the loss needs them)."""
  return rows * (2 * (prompt_tokens + response_tokens) + 3 * response_tokens) * INT32_BYTES


@dataclasses.dataclass(frozen=True)
class StepMemory:
  """Bytes XLA assigns to one device's part of the update-step executable
  (`CompiledMemoryStats` of the SPMD program: the same on every device of the mesh).

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
                   mesh=None) -> dict[str, jax.ShapeDtypeStruct]:
  """Shapes of a global update batch for `rl_cfg` (the keys `update.check_batch` requires;
  per-token advantages for a critic, per-response otherwise): tokens, input_mask [B, Tp + Tr]
  int32, response_mask [B, Tr] int32, the rest float32, B = batch_size. With `mesh`, each carries
  the rows' sharding (`parallel.data.batch_sharding`)."""
  b, t, tr = batch_size, prompt_len + response_len, response_len

  def spec(*shape, dtype=jnp.float32):
    sharding = None if mesh is None else batch_sharding(mesh, len(shape))
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

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
                       critic_optimizer: Optional[optax.GradientTransformation] = None,
                       mesh=None) -> StepMemory:
  """Compiles the update step for `batch_size` global rows of prompt_len + response_len tokens
  over `mesh` (abstract inputs only, with the XLA options the runner's step gets) and returns the
  per-device `StepMemory`.

  Args:
    model_config: the policy (its dtype, param_dtype and remat are what gets compiled).
    rl_cfg: an `rl` section (microbatches, epochs, minibatches, the loss; resolved and validated
      by `make_update_fn`).
    optimizer / critic_optimizer: as for `update_fn.make_update_fn`.
    batch_size, prompt_len, response_len: the global rows B and Tp, Tr in tokens.
    mesh: a `parallel.mesh.make_mesh` Mesh; default the mesh {data: 1} over the first local
      device.

  Raises: ValueError from `make_update_fn` for an invalid rl config or mesh.
  """
  if mesh is None:
    mesh = make_mesh(mesh_config(), jax.local_devices()[:1])
  fn = make_update_fn(model_config, rl_cfg, optimizer, mesh, critic_optimizer=critic_optimizer)
  rl = resolve_rl_config(rl_cfg)
  critic = update_lib.uses_critic(rl)
  abstract = abstract_train_state(model_config, optimizer, critic=critic,
                                  critic_optimizer=critic_optimizer)
  state = jax.tree.map(
      lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
      abstract, fn.state_shardings)
  batch = abstract_batch(rl, batch_size, prompt_len, response_len, mesh)
  replicated = NamedSharding(mesh, PartitionSpec())
  rng = jax.ShapeDtypeStruct((), jax.eval_shape(lambda: jax.random.key(0)).dtype,
                             sharding=replicated)
  lowered = fn.jitted(batch).lower(state, batch, rng)
  stats = compile_lowered(lowered, fn.compiler_options).memory_analysis()
  return StepMemory(temp_bytes=int(stats.temp_size_in_bytes),
                    argument_bytes=int(stats.argument_size_in_bytes),
                    output_bytes=int(stats.output_size_in_bytes),
                    alias_bytes=int(stats.alias_size_in_bytes),
                    generated_code_bytes=int(stats.generated_code_size_in_bytes))
