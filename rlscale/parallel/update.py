"""The pure RL update step (`rlscale.train.update.update_step`) jitted over a mesh, in the global
view: the batch is one global array per key, rows sharded over data x fsdp, the state sharded by
`shardings.state_shardings`, and XLA's partitioner inserts the collectives (flax lm1b's jitted
step with in/out shardings; MaxText).

`update_step` is written for a pmap axis ("batch"): its psums add the devices' parts. Here it runs
as one part holding every row, `jax.vmap` over an axis of size 1 named "batch", so every psum is
the identity and each loss is the plain global-batch loss: the numbers of the one-device pmap step
(up to float summation order), whatever the mesh, including the minibatch permutation, one global
permutation of the rows (the rng is folded with part index 0, as on one device). The gradient
noise scale's small batches are therefore the microbatches, as on one device.
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
from rlscale.parallel.shardings import state_shardings as derive_state_shardings
from rlscale.rl.presets import resolve_rl_config, validate_rl_config
from rlscale.train import update as update_lib
from rlscale.train.compile_options import CPU_UPDATE_OPTIONS, with_cpu_compiler_options
from rlscale.train.devices import AXIS_NAME
from rlscale.train.state import TrainState


def sharded_update_step(state: TrainState, batch, rng: jax.Array, **step_kwargs):
  """`update_step` on the whole global batch as a single part (see the module docstring).

  Args:
    state: TrainState (global arrays, any sharding). batch: dict of global arrays [B, ...] (the
      layout of `update.check_batch` without a device axis). rng: one PRNG key.
    step_kwargs: the keywords of `update.update_step` (model_config, rl_cfg, optimizer, ...).
  Returns: (new state, metrics of float32 scalars), as `update_step` on one device.
  """
  step = functools.partial(update_lib.update_step, **step_kwargs)
  one_part = jax.vmap(step, in_axes=(None, 0, None), out_axes=0, axis_name=AXIS_NAME, axis_size=1)
  new_state, metrics = one_part(state, jax.tree.map(lambda x: x[None], batch), rng)
  return jax.tree.map(lambda x: x[0], (new_state, metrics))


def make_sharded_update_fn(model_config: ModelConfig, rl_cfg, optimizer: optax.GradientTransformation,
                           mesh, *, critic_optimizer: Optional[optax.GradientTransformation] = None,
                           state_shardings=None, rules=None,
                           cpu_compiler_options=CPU_UPDATE_OPTIONS,
                           measure_noise_scale: bool = False) -> Callable:
  """`sharded_update_step` under `jax.jit` over `mesh`, in and out shardings from the mesh, the
  state donated.

  Args:
    model_config, rl_cfg, optimizer, critic_optimizer, measure_noise_scale: as for
      `update.make_update_fn`.
    mesh: a `mesh.make_mesh` Mesh. state_shardings: NamedShardings of the TrainState (default:
      `shardings.state_shardings`, which refuses an FSDP mesh that shards too little).
    rules: logical axis rules (`rules.DEFAULT_RULES` format) of the state (when derived here)
      and of the model's activation constraints (`transformer.constrain_activations`); None:
      `rules.rules_for_mesh(mesh)` (EXPERT_RULES when the mesh has an expert axis).
    cpu_compiler_options: XLA options of the step's executable on CPU (see compile_options).
  Returns: fn(state, batch, rng) -> (state, metrics): state placed by `fn.state_shardings`
    (`shardings.put_on_mesh`), batch global arrays (`data.global_batch`) or this process's host
    rows (converted), rng one key; metrics float32 scalars, replicated. `fn.jitted` is the jitted
    step for a batch's keys and ranks (`fn.jitted(batch)`), e.g. to `.lower()` it for abstract
    inputs.
  Resolves and validates `rl_cfg` once, then builds with `make_sharded_update_fn_from_checked`,
  which a caller holding an already checked rl section (the runner) calls directly.

  Raises: ValueError for an invalid rl config or mesh (naming the field), or, when called, for a
    batch with missing keys or inconsistent shapes.
  """
  rl = resolve_rl_config(rl_cfg)
  validate_rl_config(rl, num_devices=batch_parallelism(mesh))
  return make_sharded_update_fn_from_checked(
      model_config, rl, optimizer, mesh, critic_optimizer=critic_optimizer,
      state_shardings=state_shardings, rules=rules, cpu_compiler_options=cpu_compiler_options,
      measure_noise_scale=measure_noise_scale)


def make_sharded_update_fn_from_checked(
    model_config: ModelConfig, rl, optimizer: optax.GradientTransformation, mesh, *,
    critic_optimizer: Optional[optax.GradientTransformation] = None, state_shardings=None,
    rules=None, cpu_compiler_options=CPU_UPDATE_OPTIONS,
    measure_noise_scale: bool = False) -> Callable:
  """`make_sharded_update_fn` for an `rl` section already resolved and validated (e.g.
  `builders.CheckedConfig.rl`, from `builders.check_config`): no rl check runs here. Arguments
  and the returned fn as for `make_sharded_update_fn`; raises ValueError for a mesh that the
  state shardings refuse, or, when called, for a bad state or batch."""
  rules = rules_for_mesh(mesh) if rules is None else rules
  if update_lib.uses_critic(rl) and critic_optimizer is None:
    critic_optimizer = optimizer
  if state_shardings is None:
    _, state_shardings = derive_state_shardings(
        model_config, optimizer, mesh, critic=update_lib.uses_critic(rl),
        critic_optimizer=critic_optimizer, rules=rules)
  step_kwargs = dict(model_config=model_config, rl_cfg=rl, optimizer=optimizer,
                     critic_optimizer=critic_optimizer, measure_noise_scale=measure_noise_scale)

  def step(state, batch, rng):
    # Traced under the (abstract) mesh and the rules, so the model's activation constraints
    # (`transformer.constrain_activations`) apply; `jax.set_mesh` is refused inside jit.
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(rules):
      return sharded_update_step(state, batch, rng, **step_kwargs)
  replicated = NamedSharding(mesh, PartitionSpec())
  compiled_by_layout = {}

  def jitted(batch):
    layout = tuple(sorted((k, v.ndim) for k, v in batch.items()))
    if layout not in compiled_by_layout:
      batch_shardings = {k: batch_sharding(mesh, ndim) for k, ndim in layout}
      fn = jax.jit(step, in_shardings=(state_shardings, batch_shardings, replicated),
                   out_shardings=(state_shardings, replicated), donate_argnums=(0,))
      compiled_by_layout[layout] = (fn, with_cpu_compiler_options(
          fn, cpu_compiler_options, list(mesh.devices.flat)))
    return compiled_by_layout[layout]

  def update(state: TrainState, batch, rng: jax.Array):
    if update_lib.uses_critic(rl) and state.critic_params is None:
      raise ValueError(f"rl.advantage={rl.advantage!r} trains a critic: create the state with "
                       "critic_params (see state.critic_params_from_policy)")
    update_lib.check_batch(batch, rl)
    if not all(isinstance(v, jax.Array) for v in batch.values()):
      batch = global_batch(batch, mesh)
    return jitted(batch)[1](state, dict(batch), rng)

  update.jitted = lambda batch: jitted(batch)[0]
  update.state_shardings = state_shardings
  return update
