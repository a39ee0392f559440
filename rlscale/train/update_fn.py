"""The update step (`rlscale.train.update.update_step`) jitted over a mesh (flax lm1b's jitted
step with in / out shardings; MaxText).

The batch is one global array per key, rows sharded over the mesh's batch axes (data x fsdp, x
expert: `parallel.data.global_batch`); the state is sharded by `train.state.state_shardings`
(parameters and optimizer state over fsdp and tensor) and donated; XLA's partitioner inserts the
collectives. One device is the mesh {data: 1}. The step is written in the global view, so the
numbers are the same on every mesh, up to float summation order.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import flax.linen as nn
import jax
import optax
from jax.sharding import NamedSharding, PartitionSpec

from rlscale.model.config import ModelConfig
from rlscale.parallel.data import batch_sharding, global_batch
from rlscale.parallel.mesh import batch_parallelism
from rlscale.parallel.rules import rules_for_mesh
from rlscale.rl.presets import resolve_rl_config, validate_rl_config
from rlscale.train import update as update_lib
from rlscale.train.packed_update import packed_update_step
from rlscale.train.compile_options import (CPU_UPDATE_OPTIONS, effective_options,
                                           with_cpu_compiler_options)
from rlscale.train.state import TrainState, state_shardings as derive_state_shardings


def make_update_fn(model_config: ModelConfig, rl_cfg, optimizer: optax.GradientTransformation,
                   mesh, *, critic_optimizer: Optional[optax.GradientTransformation] = None,
                   state_shardings=None, rules=None, cpu_compiler_options=CPU_UPDATE_OPTIONS,
                   measure_noise_scale: bool = False) -> Callable:
  """`update.update_step` under `jax.jit` over `mesh`, in and out shardings from the mesh, the
  state donated.

  Resolves and validates `rl_cfg` (`presets.resolve_rl_config`, `presets.validate_rl_config`
  with num_devices = `mesh.batch_parallelism(mesh)`, the parts the rows are split into: B must
  be divisible by parts x rl.minibatches x rl.microbatches, so every microbatch splits evenly
  over the batch axes), once, then builds with `make_update_fn_from_checked`, which a caller
  holding an already checked rl section (the runner: `validate.CheckedConfig.rl`) calls directly.

  Args:
    model_config: the policy's ModelConfig (dtype, remat, experts: what gets compiled).
    rl_cfg: an `rl` config section (resolved here).
    optimizer / critic_optimizer: optax transformations of the policy / PPO critic (default for
      a critic: `optimizer`).
    mesh: a `parallel.mesh.make_mesh` Mesh (one device: `make_mesh(mesh_config(),
      jax.devices()[:1])`).
    state_shardings: NamedShardings of the TrainState (default: `train.state.state_shardings`,
      which refuses an FSDP mesh that shards too little).
    rules: logical axis rules (`parallel.rules.DEFAULT_RULES` format) of the state (when derived
      here) and of the model's activation constraints (`transformer.constrain_activations`);
      None: `rules.rules_for_mesh(mesh)` (EXPERT_RULES when the mesh has an expert axis).
    cpu_compiler_options: XLA options of the step's executable on CPU (default: YNNPACK dot
      fusions, see `train.compile_options`; {} or None for XLA's defaults); ignored on GPU/TPU.
      The sampler and every other function keep XLA's defaults.
    measure_noise_scale: train.measure_noise_scale: an unset rl.microbatches gives two or more
      slices where whole groups allow it (`update.microbatch_count`), the noise scale's small
      batches.

  Returns: fn(state, batch, rng, plan=None) -> (state, metrics); with a packing plan
    (`rlscale.packing.layout.update_plan(...).arrays()`, host int32 arrays) the step is
    `packed_update.packed_update_step` (rng unused: the plan holds the minibatches). state: a TrainState placed by
    `fn.state_shardings` (`parallel.shardings.put_on_mesh`), donated; batch: global arrays
    [B, ...] (`parallel.data.global_batch`) or this process's host rows (placed by it); rng: one
    PRNG key; metrics: dict of float32 scalars (replicated), see `update.update_step`.
    `fn.state_shardings` is the state's NamedShardings, `fn.jitted(batch, packed=False)` the
    `jax.jit` function for that batch's keys and ranks (e.g. to `.lower()` it for abstract inputs, as
    `train.memory`), `fn.compiler_options` the XLA options its executable gets here ({} where
    none apply).

  Raises: ValueError for an invalid rl config or mesh (naming the field), or, when called, for a
    batch with missing keys or inconsistent shapes or a state without the critic PPO needs.
  """
  rl = resolve_rl_config(rl_cfg)
  validate_rl_config(rl, num_devices=batch_parallelism(mesh))
  return make_update_fn_from_checked(
      model_config, rl, optimizer, mesh, critic_optimizer=critic_optimizer,
      state_shardings=state_shardings, rules=rules, cpu_compiler_options=cpu_compiler_options,
      measure_noise_scale=measure_noise_scale)


def make_update_fn_from_checked(
    model_config: ModelConfig, rl, optimizer: optax.GradientTransformation, mesh, *,
    critic_optimizer: Optional[optax.GradientTransformation] = None, state_shardings=None,
    rules=None, cpu_compiler_options=CPU_UPDATE_OPTIONS,
    measure_noise_scale: bool = False) -> Callable:
  """`make_update_fn` for an `rl` section already resolved and validated (e.g.
  `validate.CheckedConfig.rl`, from `validate.check_config`): no rl check runs here, so each runs
  once per run. Arguments and the returned fn as for `make_update_fn`.

  Raises: ValueError for a mesh that the state shardings refuse, or, when called, for a state
    without critic_params that a critic needs, or for a batch with missing keys or inconsistent
    shapes."""
  rules = rules_for_mesh(mesh) if rules is None else rules
  if update_lib.uses_critic(rl) and critic_optimizer is None:
    critic_optimizer = optimizer
  if state_shardings is None:
    _, state_shardings = derive_state_shardings(
        model_config, optimizer, mesh, critic=update_lib.uses_critic(rl),
        critic_optimizer=critic_optimizer, rules=rules)
  step_fn = functools.partial(update_lib.update_step, model_config=model_config, rl_cfg=rl,
                              optimizer=optimizer, critic_optimizer=critic_optimizer,
                              measure_noise_scale=measure_noise_scale)
  packed_fn = functools.partial(packed_update_step, model_config=model_config, rl_cfg=rl,
                                optimizer=optimizer, critic_optimizer=critic_optimizer)

  def step(state, batch, rng_or_plan):
    # Traced under the (abstract) mesh and the rules, so the model's activation constraints
    # (`transformer.constrain_activations`) apply; `jax.set_mesh` is refused inside jit.
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(rules):
      if isinstance(rng_or_plan, dict):
        return packed_fn(state, batch, rng_or_plan)
      return step_fn(state, batch, rng_or_plan)

  replicated = NamedSharding(mesh, PartitionSpec())
  devices = list(mesh.devices.flat)
  by_layout = {}

  def compiled(batch, packed: bool = False):
    """(jitted step, the same with the CPU options) for the batch's keys and ranks (its third
    argument a PRNG key, or with `packed` a packing plan)."""
    layout = (packed,) + tuple(sorted((k, len(v.shape)) for k, v in batch.items()))
    if layout not in by_layout:
      batch_shardings = {k: batch_sharding(mesh, ndim) for k, ndim in layout[1:]}
      fn = jax.jit(step, in_shardings=(state_shardings, batch_shardings, replicated),
                   out_shardings=(state_shardings, replicated), donate_argnums=(0,))
      by_layout[layout] = (fn, with_cpu_compiler_options(fn, cpu_compiler_options, devices))
    return by_layout[layout]

  def update(state: TrainState, batch, rng: jax.Array, plan: Optional[dict] = None):
    if update_lib.uses_critic(rl) and state.critic_params is None:
      raise ValueError(f"rl.advantage={rl.advantage!r} trains a critic: create the state with "
                       "critic_params (see state.critic_params_from_policy)")
    update_lib.check_batch(batch, rl)
    if plan is not None and "routing" in batch:
      raise ValueError("train.max_tokens_per_row (packing) cannot replay the sampler's routing "
                       "(model.moe_routing_replay): a packed row's positions are not the sampler's")
    if not all(isinstance(v, jax.Array) for v in batch.values()):
      batch = global_batch(batch, mesh)
    if plan is None:
      return compiled(batch)[1](state, dict(batch), rng)
    plan = {k: v for k, v in plan.items()}
    return compiled(batch, packed=True)[1](state, dict(batch), plan)

  update.jitted = lambda batch, packed=False: compiled(batch, packed)[0]
  update.state_shardings = state_shardings
  update.compiler_options = effective_options(cpu_compiler_options, devices)
  return update
