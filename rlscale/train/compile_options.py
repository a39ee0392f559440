"""XLA compiler options for one executable (the update step) instead of the whole process.

XLA:CPU's YNNPACK dot fusions make the training step faster on this CPU but the same option set
process-wide (`XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=dot`) makes the sampler's decode
loop 2.5-4x slower. XLA reads debug options per executable too (`Lowered.compile(
compiler_options=...)`; the enum takes its proto name, "LIBRARY_FUSION_TYPE_DOT", not "dot"), so
the update step is compiled ahead of time with them, once per input signature, and everything
else keeps XLA's defaults. On GPU/TPU, or when this XLA does not know an option, the function is
returned (or compiled) unchanged.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
import numpy as np

# Per-executable XLA:CPU options of the update step (see the module docstring). Measured on the
# 2-core AVX-512 CPU: about 20-25% faster W1 training steps; the sampler is not affected.
CPU_UPDATE_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}


def _signature(args) -> tuple:
  """Hashable abstract signature of a pytree of arrays: structure, shapes and dtypes."""
  leaves, treedef = jax.tree.flatten(args)
  return treedef, tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in leaves)


def compile_lowered(lowered, options: Mapping[str, Any]):
  """`lowered.compile(compiler_options=options)`; when XLA rejects an option (an older or newer
  XLA without it), logs a warning and compiles with the defaults."""
  if not options:
    return lowered.compile()
  try:
    return lowered.compile(compiler_options=dict(options))
  except jax.errors.JaxRuntimeError as e:
    if "option" not in str(e):
      raise
    logging.warning("XLA rejected compiler options %s (%s); compiling with its defaults",
                    dict(options), str(e).splitlines()[0])
    return lowered.compile()


def effective_options(options: Optional[Mapping[str, Any]],
                      devices: Optional[Sequence[Any]] = None) -> dict[str, Any]:
  """The XLA options `with_cpu_compiler_options` applies for `devices`: dict(options) when they
  are CPUs in a single-process run, else {} (GPU/TPU; several processes keep XLA's defaults, as
  before the mesh: the ahead-of-time path is not tested across processes).

  Args: options: XLA debug options or None. devices: the devices (default: jax.devices())."""
  platform = (devices[0] if devices else jax.devices()[0]).platform
  if not options or platform != "cpu" or jax.process_count() > 1:
    return {}
  return dict(options)


def with_cpu_compiler_options(fn: Callable, options: Optional[Mapping[str, Any]],
                              devices: Optional[Sequence[Any]] = None) -> Callable:
  """`fn` (a jitted function, e.g. with in / out shardings over a mesh) compiled with XLA
  `options` when its devices are CPUs (`effective_options`).

  Args:
    fn: a `jax.jit` result (anything with `.lower(*args)`); donation and shardings are kept,
      since the lowering carries them.
    options: XLA debug options, e.g. CPU_UPDATE_OPTIONS; None or {} returns fn unchanged.
    devices: the devices fn runs on (a mesh's `list(mesh.devices.flat)`; default:
      jax.devices()); options apply only when they are CPUs and the run has one process, else fn
      is returned as it is.

  Returns: a callable with fn's signature (positional arguments only) that compiles once per
  input signature (structure, shapes, dtypes), counted by JAX's compile events like any compile.
  Its `compiled` attribute holds the executables made so far.
  """
  options = effective_options(options, devices)
  if not options:
    return fn
  compiled = {}

  def call(*args):
    key = _signature(args)
    if key not in compiled:
      compiled[key] = compile_lowered(fn.lower(*args), options)
    return compiled[key](*args)

  call.compiled = compiled  # for tests and benchmarks: the executables made so far
  return call
