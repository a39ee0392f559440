"""NamedShardings of a params / train-state tree over a mesh, derived once from its abstract
shapes, and the check that FSDP actually shards (MaxText's `assert_params_sufficiently_sharded`).

The shardings depend only on the tree's paths and shapes: the tree of `jax.eval_shape(init)`
gives the same shardings as any params tree of that structure (a checkpoint, an HF-loaded one),
so they are computed once (`state_shardings`) and applied with `put_on_mesh`.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import jax
import optax
from jax.sharding import NamedSharding, PartitionSpec

from rlscale.model.config import ModelConfig
from rlscale.model.transformer import PARAM_LOGICAL_AXES, init_params
from rlscale.parallel import rules as rules_lib
from rlscale.train.state import create_train_state, critic_params_from_policy

# Refuse an FSDP mesh leaving more than this fraction of the tree's bytes replicated along
# `fsdp` (MaxText's sharding_tolerance default is 2%: norms and biases are that small).
REPLICATED_TOLERANCE = 0.02


def tree_shardings(abstract_tree, mesh, *, table: Sequence[tuple[str, tuple]] = PARAM_LOGICAL_AXES,
                   rules=rules_lib.DEFAULT_RULES):
  """NamedShardings for every leaf of `abstract_tree` (arrays or ShapeDtypeStructs: params, a
  TrainState, an optimizer state) by `rules.tree_specs`.

  Raises: ValueError from `rules.tree_specs` (a rule of the wrong rank, an unknown mesh axis)."""
  specs = rules_lib.tree_specs(abstract_tree, mesh, table, rules)
  return jax.tree.map(lambda spec: NamedSharding(mesh, spec), specs,
                      is_leaf=lambda x: isinstance(x, PartitionSpec))


def abstract_train_state(model_config: ModelConfig, optimizer: optax.GradientTransformation, *,
                         critic: bool = False,
                         critic_optimizer: Optional[optax.GradientTransformation] = None):
  """`jax.eval_shape` of a fresh TrainState (params of `init_params`, the optimizer state, the
  PPO critic when `critic`): ShapeDtypeStruct leaves, nothing allocated."""

  def init():
    params = init_params(model_config, jax.random.key(0))
    critic_params = critic_params_from_policy(params, model_config, jax.random.key(1)) if critic else None
    return create_train_state(params, optimizer, critic_params=critic_params,
                              critic_optimizer=(critic_optimizer or optimizer) if critic else None)

  return jax.eval_shape(init)


def state_shardings(model_config: ModelConfig, optimizer: optax.GradientTransformation, mesh, *,
                    critic: bool = False,
                    critic_optimizer: Optional[optax.GradientTransformation] = None,
                    rules=rules_lib.DEFAULT_RULES, check: bool = True,
                    tolerance: float = REPLICATED_TOLERANCE):
  """(abstract TrainState, its NamedShardings) over `mesh`: derived once from
  `abstract_train_state`; with `check`, refused by `check_sufficiently_sharded` when the mesh has
  fsdp > 1 and leaves too much replicated.

  Raises: ValueError from `tree_shardings` or `check_sufficiently_sharded`."""
  abstract = abstract_train_state(model_config, optimizer, critic=critic,
                                  critic_optimizer=critic_optimizer)
  shardings = tree_shardings(abstract, mesh, rules=rules)
  if check:
    check_sufficiently_sharded(abstract, shardings, mesh, tolerance=tolerance)
  return abstract, shardings


def replicated_fraction(abstract_tree, shardings, axis: str = "fsdp") -> tuple[float, list]:
  """(fraction of the tree's bytes whose sharding does not use mesh `axis`, those leaves as
  (path, shape, bytes) largest first)."""
  flat, _ = jax.tree_util.tree_flatten_with_path(abstract_tree)
  flat_shardings = jax.tree.leaves(shardings, is_leaf=lambda x: isinstance(x, NamedSharding))
  total, replicated = 0, []
  for (path, leaf), sharding in zip(flat, flat_shardings):
    size = math.prod(leaf.shape) * jax.numpy.dtype(leaf.dtype).itemsize
    total += size
    used = {a for entry in sharding.spec if entry for a in ((entry,) if isinstance(entry, str) else entry)}
    if axis not in used:
      replicated.append((rules_lib.path_string(path), tuple(leaf.shape), size))
  replicated.sort(key=lambda item: -item[2])
  return sum(item[2] for item in replicated) / max(total, 1), replicated


def check_sufficiently_sharded(abstract_tree, shardings, mesh, *,
                               tolerance: float = REPLICATED_TOLERANCE) -> None:
  """Refuses an FSDP mesh (mesh.fsdp > 1) whose shardings leave more than `tolerance` of the
  tree's bytes replicated along `fsdp` (as MaxText's assert_params_sufficiently_sharded): the
  memory FSDP was asked to save would not be saved, typically because the fsdp size divides no
  dimension of the big arrays. No check when mesh.fsdp == 1.

  Raises: ValueError, one line: the replicated share, the mesh and the largest replicated arrays.
  """
  if mesh.shape.get("fsdp", 1) <= 1:
    return
  fraction, replicated = replicated_fraction(abstract_tree, shardings)
  if fraction > tolerance:
    largest = ", ".join(f"{path} {list(shape)}" for path, shape, _ in replicated[:3])
    raise ValueError(f"mesh {dict(mesh.shape)} leaves {fraction:.1%} of the state's bytes "
                     f"replicated along fsdp (tolerance {tolerance:.0%}), e.g. {largest}: choose "
                     "an fsdp size that divides the model's hidden size")


def put_on_mesh(tree, shardings):
  """`tree` (host numpy or jax arrays of the structure `shardings` was derived for: a checkpoint,
  an HF-loaded params tree) placed on the mesh by `jax.device_put`.

  Raises: ValueError naming both structures when they differ."""
  is_sharding = lambda x: isinstance(x, NamedSharding)  # noqa: E731
  want = jax.tree.structure(shardings, is_leaf=is_sharding)
  got = jax.tree.structure(tree)
  if want != got:
    raise ValueError(f"tree structure {got} does not match the shardings' {want}")
  return jax.device_put(tree, shardings)
