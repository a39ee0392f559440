"""Logical axis names -> mesh axes, and the regex table that names a tree's dimensions by path.

Two designs combined:
- flax lm1b / MaxText: each array dimension carries a logical name (embed, heads, mlp, vocab,
  ...) and a rule list in the config maps names to mesh axes; a name may list several candidate
  axes, the first one not yet used by another dimension of the same array wins (as
  `flax.linen.logical_to_mesh_axes`).
- big_vision `sharding.py`: rules are regular expressions over parameter paths, so any tree is
  covered without annotations (an HF-loaded one, an optimizer state whose leaves sit under
  `mu/...`, `nu/...`); leaves no rule names fall back to big_vision's FSDP strategy: shard the
  largest dimension that the `fsdp` axis size divides.

Beyond both: a mesh axis is used for a dimension only when its size divides the dimension (else
that dimension is replicated there; `shardings.check_sufficiently_sharded` refuses a mesh that
leaves too much replicated), and mesh axes of size 1 are dropped from the specs.
"""

from __future__ import annotations

import math
import re
from typing import Optional, Sequence, Union

import jax
from jax.sharding import PartitionSpec

MeshAxes = Union[None, str, tuple[str, ...]]

# Logical name -> mesh axes, in order of preference (MaxText's base.yml logical_axis_rules in
# miniature). Parameters: FSDP shards the model dimension (embed), tensor parallelism the heads,
# the MLP's intermediate dimension and the vocabulary (Megatron: column- then row-parallel
# layers); norms and head_dim stay replicated. Activations (`transformer.ACTIVATION_AXES`):
# rows over data x fsdp, the rest replicated (FSDP gathers weights, never the batch).
DEFAULT_RULES: tuple[tuple[str, MeshAxes], ...] = (
    ("batch", ("data", "fsdp")),
    ("vocab", "tensor"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("mlp", "tensor"),
    ("embed", "fsdp"),
    ("head_dim", None),
    ("norm", None),
    ("activation_batch", ("data", "fsdp")),
    ("activation_length", None),
    ("activation_embed", None),
)


# With an `expert` mesh axis (`mesh.EXPERT_AXIS`): the expert kernels' leading [E] dimension
# over it, an expert's SwiGLU width (moe_mlp) over tensor as the dense MLP's, and the batch and
# activation rows over it as well (expert parallelism shards the tokens of the attention and
# dense layers like data parallelism; XLA moves the tokens to their experts' devices).
EXPERT_RULES: tuple[tuple[str, MeshAxes], ...] = tuple(
    (name, ("data", "fsdp", "expert")) if name in ("batch", "activation_batch") else (name, axes)
    for name, axes in DEFAULT_RULES) + (("expert", "expert"), ("moe_mlp", "tensor"))


def rules_for_mesh(mesh) -> tuple[tuple[str, MeshAxes], ...]:
  """EXPERT_RULES for a mesh with an `expert` axis, else DEFAULT_RULES (whose meshes lack it;
  the expert kernels' names then have no rule and FSDP shards their embed dimension)."""
  return EXPERT_RULES if "expert" in mesh.shape else DEFAULT_RULES


def path_string(path) -> str:
  """A `jax.tree_util` key path as "a/b/0/c" (dict keys, attribute names, sequence indices)."""
  parts = []
  for key in path:
    for attr in ("key", "name", "idx"):
      if hasattr(key, attr):
        parts.append(str(getattr(key, attr)))
        break
    else:
      parts.append(str(key))
  return "/".join(parts)


def match_logical_axes(path: str, ndim: int, table: Sequence[tuple[str, tuple]]
                       ) -> Optional[tuple[Optional[str], ...]]:
  """The logical names of the first `table` rule whose regex matches the end of `path` (after a
  "/" or at its start, so "layers_\\d+/mlp/up_proj/kernel" also names "opt_state/0/mu/layers_3/
  mlp/up_proj/kernel"), or None when none matches.

  Args:
    path: a `path_string`. ndim: the leaf's rank. table: (regex, names) pairs, names one logical
      name (or None) per dimension.
  Raises: ValueError when the matching rule names a different number of dimensions than ndim.
  """
  for pattern, names in table:
    if re.search(rf"(?:^|/)(?:{pattern})$", path):
      if len(names) != ndim:
        raise ValueError(f"sharding rule {pattern!r} names {len(names)} dimensions {names}, but "
                         f"{path!r} has {ndim}")
      return tuple(names)
  return None


def _axes_tuple(axes: MeshAxes) -> tuple[str, ...]:
  return () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)


def _spec_entry(axes: tuple[str, ...]) -> MeshAxes:
  return None if not axes else axes[0] if len(axes) == 1 else axes


def logical_to_spec(names: Sequence[Optional[str]], shape: Sequence[int], mesh,
                    rules: Sequence[tuple[str, MeshAxes]] = DEFAULT_RULES) -> PartitionSpec:
  """PartitionSpec of an array of `shape` whose dimensions carry logical `names`.

  For each dimension, the first rule for its name whose mesh axes (those of size > 1) are not
  used by an earlier dimension and whose size product divides the dimension; no such rule, or a
  name of None: replicated along that dimension.

  Args:
    names: one logical name or None per dimension. shape: the array's shape.
    mesh: a Mesh or AbstractMesh (only its axis names and sizes are read).
    rules: (logical name, mesh axes) pairs; mesh axes None, one name or a tuple of names.
  Raises: ValueError when names and shape differ in length, or a rule names an axis the mesh
    lacks.
  """
  if len(names) != len(shape):
    raise ValueError(f"{len(names)} logical names {tuple(names)} for a shape of rank {len(shape)}")
  used: set[str] = set()
  spec = []
  for name, size in zip(names, shape):
    chosen: tuple[str, ...] = ()
    for logical, axes in rules:
      if logical != name or name is None:
        continue
      axes = _axes_tuple(axes)
      unknown = [a for a in axes if a not in mesh.shape]
      if unknown:
        raise ValueError(f"sharding rule ({logical!r}, {axes}) names mesh axes {unknown} not in "
                         f"the mesh {tuple(mesh.shape)}")
      axes = tuple(a for a in axes if mesh.shape[a] > 1)
      if axes and not used & set(axes) and size % math.prod(mesh.shape[a] for a in axes) == 0:
        chosen = axes
        break
    used |= set(chosen)
    spec.append(_spec_entry(chosen))
  return PartitionSpec(*spec)


def fsdp_fallback_spec(shape: Sequence[int], mesh, axis: str = "fsdp") -> PartitionSpec:
  """big_vision's FSDP strategy for a leaf no rule names: `axis` on its largest dimension that
  the axis size divides (the first of equal ones), replicated when none does or the axis has
  size 1 (scalars too)."""
  size = mesh.shape.get(axis, 1)
  spec: list[MeshAxes] = [None] * len(shape)
  if size > 1:
    for dim in sorted(range(len(shape)), key=lambda d: -shape[d]):
      if shape[dim] % size == 0:
        spec[dim] = axis
        break
  return PartitionSpec(*spec)


def tree_specs(tree, mesh, table: Sequence[tuple[str, tuple]],
               rules: Sequence[tuple[str, MeshAxes]] = DEFAULT_RULES):
  """PartitionSpecs for every array leaf of `tree` (arrays or `jax.ShapeDtypeStruct`s): by the
  logical names of `match_logical_axes` and `logical_to_spec`, else by `fsdp_fallback_spec`.

  Raises: ValueError from `match_logical_axes` / `logical_to_spec`."""

  def spec(path, leaf):
    shape = tuple(leaf.shape)
    names = match_logical_axes(path_string(path), len(shape), table)
    if names is None:
      return fsdp_fallback_spec(shape, mesh)
    return logical_to_spec(names, shape, mesh, rules)

  return jax.tree_util.tree_map_with_path(spec, tree)
