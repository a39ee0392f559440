"""TrainState: everything the update step changes, as one pytree that the mesh shards and orbax
saves; its shardings over a mesh (`state_shardings`), derived once from its abstract shapes.

The frozen reference policy is not part of the state: its log-probabilities (`ref_logp`) are
computed by the runner with `train.passes.make_logp_fn` and passed in the batch, so the state, its
checkpoints and the donated buffers hold only what training changes.

PPO's critic is the same architecture as the policy with `value_head=True`, kept as a separate
parameter tree with its own optimizer state (`critic_params`, `critic_opt_state`; None otherwise): a
separate critic keeps value-loss gradients out of the policy (no shared trunk to balance with
vf_coef) and lets the critic use its own learning rate.
"""

from __future__ import annotations

from typing import Any, Optional

import flax.struct
import jax
import jax.numpy as jnp
import optax

from rlscale.model.config import ModelConfig
from rlscale.model.transformer import init_params, param_shardings
from rlscale.parallel import rules as rules_lib
from rlscale.parallel.shardings import REPLICATED_TOLERANCE, check_sufficiently_sharded


@flax.struct.dataclass
class TrainState:
  """Attributes:
    step: int32 scalar, update-step calls (RL steps) applied so far. The optimizer's own update
      count (epochs x minibatches per RL step) lives in opt_state.
    params: policy parameters.
    opt_state: optax state of the policy optimizer.
    critic_params: PPO critic parameters (value_head=True model), or None.
    critic_opt_state: optax state of the critic optimizer, or None.
  """
  step: jax.Array
  params: Any
  opt_state: Any
  critic_params: Any = None
  critic_opt_state: Any = None


def init_optimizer_state(optimizer: optax.GradientTransformation, params):
  """optimizer.init on float32 copies of `params`: Adam moments stay float32 whatever the
  parameter dtype (mixed precision as in MaxText), so bfloat16 parameters updated with the float32
  gradients the update step accumulates keep one state dtype (a lax.scan carry must). The
  parameters themselves keep their dtype: optax.apply_updates casts p + u back to p's dtype."""
  return optimizer.init(jax.tree.map(lambda p: jnp.asarray(p, jnp.float32), params))


def create_train_state(params, optimizer: optax.GradientTransformation, *,
                       critic_params=None,
                       critic_optimizer: Optional[optax.GradientTransformation] = None) -> TrainState:
  """A fresh TrainState at step 0 (arrays as given: place it on a mesh with
  `parallel.shardings.put_on_mesh(state, fn.state_shardings)`).

  Args:
    params: policy parameters. optimizer: the policy's optax transformation.
    critic_params: PPO critic parameters or None. critic_optimizer: its transformation (default:
      `optimizer`).

  Raises: ValueError when critic_optimizer is given without critic_params.
  """
  if critic_params is None and critic_optimizer is not None:
    raise ValueError("critic_optimizer given without critic_params")
  critic_opt_state = None
  if critic_params is not None:
    critic_opt_state = init_optimizer_state(critic_optimizer or optimizer, critic_params)
  return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                    opt_state=init_optimizer_state(optimizer, params),
                    critic_params=critic_params, critic_opt_state=critic_opt_state)


def critic_config(model_config: ModelConfig) -> ModelConfig:
  """The PPO critic's architecture: the policy's, with a scalar value head."""
  return model_config.replace(value_head=True)


def critic_params_from_policy(policy_params, model_config: ModelConfig, rng: jax.Array) -> dict:
  """Critic parameters initialised from the policy: every policy tensor copied, plus a fresh value
  head (zero kernel, so V = 0 at the start) from `rng`. The usual start for LLM PPO critics."""
  value_head = init_params(critic_config(model_config), rng)["value_head"]
  return {**jax.tree.map(jnp.copy, dict(policy_params)), "value_head": value_head}


def abstract_train_state(model_config: ModelConfig, optimizer: optax.GradientTransformation, *,
                         critic: bool = False,
                         critic_optimizer: Optional[optax.GradientTransformation] = None):
  """`jax.eval_shape` of a fresh TrainState (params of `init_params`, the optimizer state, the
  PPO critic when `critic`, its optimizer `critic_optimizer` or `optimizer`): a TrainState of
  ShapeDtypeStruct leaves (float32 optimizer moments, parameters in model_config.param_dtype),
  nothing allocated."""

  def init():
    params = init_params(model_config, jax.random.key(0))
    critic_params = (critic_params_from_policy(params, model_config, jax.random.key(1))
                     if critic else None)
    return create_train_state(params, optimizer, critic_params=critic_params,
                              critic_optimizer=(critic_optimizer or optimizer) if critic else None)

  return jax.eval_shape(init)


def state_shardings(model_config: ModelConfig, optimizer: optax.GradientTransformation, mesh, *,
                    critic: bool = False,
                    critic_optimizer: Optional[optax.GradientTransformation] = None,
                    rules=rules_lib.DEFAULT_RULES, check: bool = True,
                    tolerance: float = REPLICATED_TOLERANCE):
  """(abstract TrainState, its NamedShardings) over `mesh` (a Mesh or AbstractMesh): derived once
  from `abstract_train_state` by `transformer.param_shardings` (the parameter table
  `transformer.PARAM_LOGICAL_AXES` and `rules`; Adam's moments follow their parameters, scalars
  are replicated); with `check`, refused by `parallel.shardings.check_sufficiently_sharded` when
  the mesh has fsdp > 1 and leaves more than `tolerance` of the bytes replicated along it.

  Raises: ValueError from `param_shardings` (a rule of the wrong rank, an unknown mesh axis) or
    `check_sufficiently_sharded` (one line: the replicated share and the largest arrays)."""
  abstract = abstract_train_state(model_config, optimizer, critic=critic,
                                  critic_optimizer=critic_optimizer)
  shardings = param_shardings(abstract, mesh, rules=rules)
  if check:
    check_sufficiently_sharded(abstract, shardings, mesh, tolerance=tolerance)
  return abstract, shardings
