"""Compile one run's steps for a TPU topology: the library call behind `python -m rlscale.aot`.

    from rlscale.aot.run import compile_run
    result = compile_run(config, "v5e:2x4")          # config: experiments/configs/default.py's
    print(result.table())
    all(r.fits for r in result.results)

Colab and tests call it directly; the command line only parses flags (`rlscale.aot.__main__`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional, Sequence

from rlscale.aot import measure, models, report, steps as steps_lib
from rlscale.aot.topology import Topology, load_topology


@dataclasses.dataclass(frozen=True)
class CompiledRun:
  """A run's steps compiled for one topology.

  Attributes:
    model_name: the model's label in tables and rows (`model_name`).
    topology: the `Topology` compiled for.
    run: the `steps.RunSteps` (model config, mesh, microbatches, state bytes).
    results: one `measure.StepResult` per step, in `run.steps`' order.
    full_layers: the model's own layer count (the compiled one may be smaller: `--layers`).
  """
  model_name: str
  topology: Topology
  run: steps_lib.RunSteps
  results: tuple
  full_layers: int

  @property
  def fits(self) -> bool:
    """Whether every step fits (`StepResult.fits`)."""
    return all(r.fits for r in self.results)

  def table(self) -> str:
    """The per-device table with its notes and not-fitting lines (`report.format_table`)."""
    return report.format_table(self.results, self.run, self.topology, self.model_name)

  def rows(self) -> list[dict]:
    """The JSON rows (`report.json_rows`)."""
    return report.json_rows(self.results, self.run, self.topology, self.model_name,
                            full_layers=self.full_layers)


def model_name(config, shape: Optional[str] = None) -> str:
  """The model's label: the shape name, "builtin" for the built-in model, else the HF
  checkpoint directory's name."""
  if shape is not None:
    return shape.lower()
  if config.model.source == "hf":
    return os.path.basename(os.path.normpath(config.model.checkpoint_path))
  return "builtin"


def compile_run(config, topology: str | Topology, *, shape: Optional[str] = None,
                layers: Optional[int] = None, eval_steps: bool = True,
                only: Optional[Sequence[str]] = None, processes: Optional[int] = None,
                progress: Optional[Callable[[str], None]] = None) -> CompiledRun:
  """Builds `config`'s steps for the TPU slice `topology` and compiles each.

  Args:
    config: a run config (experiments/configs/*.py) with its overrides; config.mesh is laid
      over the topology's devices (`parallel.mesh.make_mesh`).
    topology: a name ("v5e:2x4", "v5p:2x2x1", ..., or "local": this process's devices) or a
      loaded `Topology`.
    shape: a release shape replacing the model's architecture (`models.QWEN3_SHAPES`), or None.
    layers: compile with this many decoder layers (None: all; rows record both counts).
    eval_steps: compile the held-out evaluation's sampler calls too.
    only: compile only these step names (None: all).
    processes: the run's process count on the slice (`steps.build_steps`; None: libtpu's).
    progress: called with a line before each compile (e.g. print to stderr), or None.
  Returns: CompiledRun.
  Raises:
    topology.TopologyUnavailable: libtpu cannot load here.
    ValueError: an unknown topology, shape or step name, or a config the run would refuse on
      this mesh (naming the field); FileNotFoundError: a missing model.checkpoint_path.
    jax.errors.JaxRuntimeError: a step the TPU compiler cannot compile for a reason other than
      memory (e.g. an op it cannot lower).
  """
  if isinstance(topology, str):
    topology = load_topology(topology)
  model_config = models.aot_model_config(config, platform=topology.platform, shape=shape)
  full_layers = model_config.num_layers
  model_config = models.with_layers(model_config, layers)
  run = steps_lib.build_steps(config, topology.devices, model_config, platform=topology.platform,
                              eval_steps=eval_steps, processes=processes)
  chosen = run.steps
  if only:
    names = [s.name for s in run.steps]
    unknown = sorted(set(only) - set(names))
    if unknown:
      raise ValueError(f"--steps names {unknown}, not steps of this run: {names}")
    chosen = tuple(s for s in run.steps if s.name in only)
  results = []
  for step in chosen:
    if progress is not None:
      progress(f"compiling {step.name} for {topology.name}: {step.detail}")
    results.append(measure.compile_step(step, topology))
  return CompiledRun(model_name=model_name(config, shape), topology=topology, run=run,
                     results=tuple(results), full_layers=full_layers)
