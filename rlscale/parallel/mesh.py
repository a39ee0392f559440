"""The device mesh from the config's `mesh` section (flax lm1b, MaxText `ici_*_parallelism`).

Axes, outermost first: `data` (pure data parallelism: parameters replicated), `fsdp` (data
parallelism with parameters and optimizer state sharded, ZeRO-3 / FSDP), `tensor` (Megatron-style
tensor parallelism of heads, MLP and vocabulary), and, when the section has the field, `expert`
(expert parallelism: each device holds E / expert of every MoE layer's experts; the batch is
split over it too, as MaxText's activation_batch, so the attention and dense layers are data
parallel there). One size may be -1: the rest of the devices, as MaxText's
`ici_fsdp_parallelism: -1`. The batch is split over `data` x `fsdp` (x `expert`).
"""

from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence

import jax
import ml_collections
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh

MESH_AXES = ("data", "fsdp", "tensor")
# Mesh axes the batch rows are split over (the rest hold copies of each row).
BATCH_AXES = ("data", "fsdp")
# The expert-parallel axis: a mesh has it (last, after tensor, as MaxText's ici axes) only when
# the mesh section names it, so sections and meshes without experts stay as they were.
EXPERT_AXIS = "expert"


def mesh_axes(mesh_cfg: Mapping[str, int]) -> tuple[str, ...]:
  """The mesh axes of a `mesh` section: MESH_AXES, then EXPERT_AXIS when the section has it."""
  return MESH_AXES + ((EXPERT_AXIS,) if EXPERT_AXIS in dict(mesh_cfg) else ())


def batch_axes(mesh) -> tuple[str, ...]:
  """The axes `mesh` splits batch rows over: BATCH_AXES, and EXPERT_AXIS when the mesh has it."""
  return BATCH_AXES + ((EXPERT_AXIS,) if EXPERT_AXIS in mesh.shape else ())


def mesh_config(data: int = -1, fsdp: int = 1, tensor: int = 1,
                expert: Optional[int] = None) -> ml_collections.ConfigDict:
  """A `mesh` config section; the default {data: -1} is data parallelism over every device.
  With `expert` the section (and its mesh) gets the expert axis."""
  section = {"data": data, "fsdp": fsdp, "tensor": tensor}
  if expert is not None:
    section[EXPERT_AXIS] = expert
  return ml_collections.ConfigDict(section)


def mesh_shape(mesh_cfg: Mapping[str, int], num_devices: int) -> tuple[int, ...]:
  """(data, fsdp, tensor[, expert]) sizes of `mesh_cfg` on `num_devices` devices, the -1 resolved.

  Args:
    mesh_cfg: mapping with the keys of MESH_AXES, optionally EXPERT_AXIS (a `mesh` ConfigDict);
      each an int >= 1, or -1 for at most one of them.
    num_devices: the device count the mesh spans (>= 1).
  Returns: the sizes of `mesh_axes(mesh_cfg)`, whose product is num_devices.
  Raises: ValueError (one line naming the field) for a missing or unknown key, a size that is
    not an int >= 1 or -1, two sizes of -1, or sizes whose product is not num_devices.
  """
  keys = set(dict(mesh_cfg))
  axes = mesh_axes(mesh_cfg)
  if keys != set(axes):
    raise ValueError(f"mesh needs exactly the fields {list(MESH_AXES)} (and optionally "
                     f"{EXPERT_AXIS!r}), got {sorted(keys)}")
  sizes = {axis: mesh_cfg[axis] for axis in axes}
  for axis, size in sizes.items():
    if isinstance(size, bool) or not isinstance(size, int) or not (size >= 1 or size == -1):
      raise ValueError(f"mesh.{axis} must be an int >= 1 or -1 (the rest of the devices), "
                       f"got {size!r}")
  rest = [axis for axis, size in sizes.items() if size == -1]
  if len(rest) > 1:
    raise ValueError(f"only one mesh size may be -1, got -1 for mesh.{rest[0]} and mesh.{rest[1]}")
  fixed = math.prod(size for size in sizes.values() if size != -1)
  named = ", ".join(f"mesh.{axis}={size}" for axis, size in sizes.items())
  if rest:
    if num_devices % fixed:
      raise ValueError(f"mesh.{rest[0]}=-1: the other sizes ({named}) multiply to {fixed}, "
                       f"which does not divide the {num_devices} devices")
    sizes[rest[0]] = num_devices // fixed
  elif fixed != num_devices:
    raise ValueError(f"mesh sizes {named} multiply to {fixed}, not to the {num_devices} devices "
                     "(set one of them to -1 for the rest)")
  return tuple(sizes[axis] for axis in axes)


def make_mesh(mesh_cfg: Mapping[str, int], devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
  """The `jax.sharding.Mesh` of `mesh_cfg` over `devices` (default: every device of every
  process), axes `mesh_axes(mesh_cfg)`, all `AxisType.Auto` (XLA's partitioner places the collectives; the
  step is written in the global view). On a TPU torus an axis whose size is no product of whole
  physical axes (e.g. 8 on a 4x4x4 v5p slice) splits a physical axis, as MaxText allows.

  Raises: ValueError from `mesh_shape`."""
  devices = list(jax.devices() if devices is None else devices)
  shape = mesh_shape(mesh_cfg, len(devices))
  axes = mesh_axes(mesh_cfg)
  types = (AxisType.Auto,) * len(axes)
  try:
    return jax.make_mesh(shape, axes, axis_types=types, devices=devices)
  except NotImplementedError:  # jax's torus assignment refuses to split a physical axis
    grid = mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)
    return Mesh(grid, axes, axis_types=types)


def batch_parallelism(mesh) -> int:
  """How many parts the batch rows are split into: the product of the `batch_axes` sizes."""
  return math.prod(mesh.shape[axis] for axis in batch_axes(mesh))
