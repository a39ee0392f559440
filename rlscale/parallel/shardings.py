"""NamedShardings of a params / train-state tree over a mesh, derived once from its abstract
shapes, and the check that FSDP actually shards (MaxText's `assert_params_sufficiently_sharded`).

The shardings depend only on the tree's paths and shapes: the tree of `jax.eval_shape(init)`
gives the same shardings as any params tree of that structure (a checkpoint, an HF-loaded one),
so they are computed once (`tree_shardings`; a TrainState's: `rlscale.train.state.state_shardings`)
and applied with `put_on_mesh`.
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec

from rlscale.parallel import rules as rules_lib

# Refuse an FSDP mesh leaving more than this fraction of the tree's bytes replicated along
# `fsdp` (MaxText's sharding_tolerance default is 2%: norms and biases are that small).
REPLICATED_TOLERANCE = 0.02


def tree_shardings(abstract_tree, mesh, *, table: Sequence[tuple[str, tuple]],
                   rules=rules_lib.DEFAULT_RULES):
  """NamedShardings for every leaf of `abstract_tree` (arrays or ShapeDtypeStructs: params, a
  TrainState, an optimizer state) by `rules.tree_specs` with the regex `table` of logical axis
  names by path (the model's: `model.transformer.param_shardings`).

  Raises: ValueError from `rules.tree_specs` (a rule of the wrong rank, an unknown mesh axis)."""
  specs = rules_lib.tree_specs(abstract_tree, mesh, table, rules)
  return jax.tree.map(lambda spec: NamedSharding(mesh, spec), specs,
                      is_leaf=lambda x: isinstance(x, PartitionSpec))


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
