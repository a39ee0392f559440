"""TPU slices without a TPU: the devices of a named topology, and what each chip offers.

With libtpu installed (`pip install "rlscale[tpu]"`, i.e. `jax[tpu]` at the project's jax
version; Linux only), `jax.experimental.topologies.get_topology_desc("v5e:2x4", platform="tpu")`
returns compile-only devices of that slice on any machine, a CPU laptop included: a `Mesh` of
them and `jax.jit(...).lower(...).compile()` run the real TPU compiler (MaxText's
`train_compile.py`). Nothing executes and nothing is allocated on a TPU.

`load_topology(name)` returns a `Topology`: the devices, the chip kind, and the HBM the compiler
lets one program use per chip (`load_topology("local")`: this process's own devices instead, e.g.
one GPU: `benchmarks/gpu.sh` sizes the table's rows on a GPU at hand that way), read from the compiler itself (`usable_hbm_bytes`: an oversized
probe program is refused with "exceeds available HBM (15.75G)"), since libtpu keeps part of the
nominal HBM for itself. libtpu prints initialisation warnings on stderr when it starts on a
machine without TPUs; they are captured here and shown only when loading fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import sys
import tempfile
from typing import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

GIB = 2 ** 30
# Topologies checked with jax 0.10.2 + libtpu 0.0.42.1 (docs/design.md, "Accelerators without
# one"); any name libtpu knows works.
EXAMPLE_TOPOLOGIES = ("v5e:2x4", "v5p:2x2x1", "v5p:2x2x2", "v6e:2x4", "v4:2x2x1")
# Short names of the chip kinds, as the topology names spell them.
CHIP_NAMES = {"TPU v5 lite": "v5e", "TPU v5": "v5p", "TPU v6 lite": "v6e", "TPU v4": "v4"}
INSTALL_HINT = ('install libtpu with `pip install "rlscale[tpu]"` (jax[tpu] at the installed jax '
                "version; Linux x86-64 only, a 213 MB download)")
_AVAILABLE_HBM = re.compile(r"available HBM \(([\d.]+)([KMGT])\)")
_UNITS = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}


class TopologyUnavailable(RuntimeError):
  """libtpu cannot load on this machine (not installed, or not a Linux x86-64 wheel), so no TPU
  topology can be made. Its message says why and how to install it."""


@dataclasses.dataclass(frozen=True)
class Topology:
  """A TPU slice's compile-only devices and what one chip of it offers.

  Attributes:
    name: the topology name, e.g. "v5e:2x4".
    devices: the slice's devices (`TpuDevice`, compile only), one per chip.
    kind: the chips' `device_kind`, e.g. "TPU v5 lite".
    hbm_bytes: bytes of HBM one program may use on one device, as the compiler counts them
      (its "available HBM": below the chip's nominal figure, and half of it on v4, whose
      devices are cores); for "local" the device's allocator limit (`local_memory_bytes`).
    platform: the devices' backend ("tpu"; "gpu" or "cpu" for "local"), whose "auto" kernel
      and microbatch choices the compiled steps make.
  """
  name: str
  devices: tuple
  kind: str
  hbm_bytes: int
  platform: str = "tpu"

  @property
  def chips(self) -> int:
    """Number of chips of the slice (distinct device coordinates): the devices on v5e, v5p and
    v6e (one device per chip, v5p's two cores as one), half of them on v4 (a device per core)."""
    return len({tuple(getattr(d, "coords", (i,))) for i, d in enumerate(self.devices)})

  @property
  def devices_per_chip(self) -> int:
    """Devices (JAX's, the mesh's) per chip: 1, or 2 on v4 (each core a device). Every memory
    figure of the AOT tables is per device."""
    return len(self.devices) // self.chips

  @property
  def chip(self) -> str:
    """The chip's short name ("v5e", "v5p", "v6e", "v4"), else its device_kind."""
    return CHIP_NAMES.get(self.kind, self.kind)


@contextlib.contextmanager
def captured_output() -> Iterator[list[str]]:
  """Redirects file descriptors 1 and 2 (C libraries' stdout and stderr: libtpu's start-up
  warnings) into a temporary file for the block; the list it yields gets the captured text
  (one string) when the block ends, also when it raises."""
  text: list[str] = []
  for stream in (sys.stdout, sys.stderr):
    stream.flush()
  saved = [os.dup(1), os.dup(2)]
  with tempfile.TemporaryFile() as tmp:
    os.dup2(tmp.fileno(), 1)
    os.dup2(tmp.fileno(), 2)
    try:
      yield text
    finally:
      for stream in (sys.stdout, sys.stderr):
        stream.flush()
      os.dup2(saved[0], 1)
      os.dup2(saved[1], 2)
      for fd in saved:
        os.close(fd)
      tmp.seek(0)
      text.append(tmp.read().decode("utf-8", "replace"))


def topology_devices(name: str) -> tuple:
  """The compile-only devices of the TPU topology `name` (e.g. "v5e:2x4"), libtpu's start-up
  warnings captured.

  Raises:
    TopologyUnavailable: libtpu is not installed or cannot load (the message says how to
      install it).
    ValueError: libtpu does not know the name (the message lists examples).
  """
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  if not isinstance(name, str) or ":" not in name:
    raise ValueError(f"--topology must name a TPU slice as <chip>:<shape>, e.g. "
                     f"{', '.join(EXAMPLE_TOPOLOGIES)}, or {LOCAL!r} (this process's devices); "
                     f"got {name!r}")
  # libtpu takes /tmp/libtpu_lockfile when it starts, to keep two processes off one TPU; any
  # JAX process of this venv that probes for a TPU holds it (JAX_PLATFORMS unset), and the
  # lock would refuse this compile-only use, which opens no TPU ("Internal error when
  # accessing libtpu multi-process lockfile").
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  try:
    with captured_output():
      return tuple(topologies.get_topology_desc(name, platform="tpu").devices)
  except RuntimeError as e:  # JaxRuntimeError is one
    message = " ".join(str(e).split())
    if "not installed" in message or "libtpu" in message.lower() and "load" in message.lower():
      raise TopologyUnavailable(f"no TPU compiler: {message}; {INSTALL_HINT}") from e
    raise ValueError(f"libtpu refused the topology {name!r} ({message}); examples: "
                     f"{', '.join(EXAMPLE_TOPOLOGIES)}") from e
  except (OSError, ImportError) as e:
    raise TopologyUnavailable(f"libtpu cannot load here ({e}); {INSTALL_HINT}") from e


def libtpu_unavailable_reason(name: str = "v5e:2x4") -> str | None:
  """Why no TPU topology can be made here (`TopologyUnavailable`'s message), or None when
  `topology_devices(name)` works: for tests that skip only where libtpu cannot load."""
  try:
    topology_devices(name)
  except TopologyUnavailable as e:
    return str(e)
  return None


def parse_available_hbm(message: str) -> int | None:
  """Bytes of "available HBM (15.75G)" in a TPU compiler's RESOURCE_EXHAUSTED message, else
  None. The compiler's G is 2^30 bytes."""
  found = _AVAILABLE_HBM.search(message)
  return None if found is None else int(float(found[1]) * _UNITS[found[2]])


@functools.lru_cache(maxsize=None)
def usable_hbm_bytes(devices: tuple) -> int:
  """Bytes of HBM the TPU compiler lets one program use on one of `devices`, read from its
  refusal of a probe program that needs 64 TiB per device (a few tenths of a second; cached).

  Raises: RuntimeError when the compiler accepts the probe or its message has no figure."""
  mesh = Mesh(np.array(devices[:1]), ("x",))
  probe = jax.ShapeDtypeStruct((2 ** 20, 2 ** 24), jnp.float32,
                               sharding=NamedSharding(mesh, PartitionSpec()))
  try:
    with captured_output():
      jax.jit(jnp.sin).lower(probe).compile()
  except jax.errors.JaxRuntimeError as e:
    found = parse_available_hbm(str(e))
    if found is not None:
      return found
    raise RuntimeError(f"the TPU compiler refused the HBM probe without a figure: {e}") from e
  raise RuntimeError("the TPU compiler accepted a 64 TiB program; cannot read its HBM limit")


LOCAL = "local"


def local_memory_bytes(device) -> int:
  """Bytes one program may use on `device`, a device of this process: its allocator's limit
  (`memory_stats()["bytes_limit"]` on GPU and TPU), or the machine's physical memory where the
  backend reports none (CPU).

  Raises: RuntimeError when neither is known."""
  stats = device.memory_stats() if hasattr(device, "memory_stats") else None
  if stats and stats.get("bytes_limit"):
    return int(stats["bytes_limit"])
  try:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (ValueError, OSError) as e:
    raise RuntimeError(f"no memory figure for {device}: {e}") from e


def local_topology() -> Topology:
  """This process's own devices as a `Topology` named "local" (e.g. one GPU: its compiler and
  its memory limit; on a CPU, the machine's memory)."""
  devices = tuple(jax.devices())
  return Topology(name=LOCAL, devices=devices, kind=devices[0].device_kind,
                  hbm_bytes=local_memory_bytes(devices[0]), platform=devices[0].platform)


def load_topology(name: str) -> Topology:
  """The `Topology` of the TPU slice `name` (e.g. "v5e:2x4", "v5p:2x2x1"), or of this
  process's devices for "local" (`local_topology`).

  Raises: TopologyUnavailable / ValueError as `topology_devices`."""
  if name == LOCAL:
    return local_topology()
  devices = topology_devices(name)
  return Topology(name=name, devices=devices, kind=devices[0].device_kind,
                  hbm_bytes=usable_hbm_bytes(devices))
