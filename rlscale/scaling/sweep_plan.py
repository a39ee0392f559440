"""A sweep's plan: from a sweep file to the runs to execute, each one workdir and one command.

A sweep file (experiments/sweeps/*.py) defines `get_config(arg)` (the base run config),
`get_sweep(arg)` (a list of flat override dicts, see `rlscale.scaling.hyper`) and optionally
`get_target(arg)` (the pre-registered target, see rlscale.scaling.target). `plan` turns them into
runs: names from the overrides (two runs may not share one), unknown fields rejected, runs with
the same effective settings merged (`effective_signature`: e.g. at the reference batch lr_scaling
"none" and "sqrt" give the same learning rate), and every run pointed at one warm-start cache
`<workdir>/sft`, shared by the runs of one warm-start signature (`warm_start_signature`).
`plan_sweep` does it for a sweep file (with command-line overrides, a selection, a shard);
`run_command` is one run's `python -m rlscale.main` command line; `validation_runs` picks the runs
a report's decisions compare, for the validation.

Executing the plan is `rlscale.scaling.sweep`'s.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
import types
from typing import Any, Callable, Sequence

from rlscale.runner.config_files import flatten_config, import_python_file, load_config_file
from rlscale.scaling import hyper

RUNS_DIR = "runs"
SFT_DIR = "sft"
# Config sections the warm start depends on; with the effective sft seed (`warm_start_signature`).
WARM_START_FIELDS = ("model", "task", "sft", "rollout")


@dataclasses.dataclass
class Run:
  """One run of a sweep.

  Attributes:
    name: its directory under <workdir>/runs (from the overrides).
    overrides: the flat override dict from get_sweep, plus sft.cache_dir.
    config: the base config with the overrides applied.
    aliases: names of runs dropped as duplicates of this one (same effective settings).
  """
  name: str
  overrides: dict[str, Any]
  config: Any
  aliases: list[str] = dataclasses.field(default_factory=list)


def split_config_arg(spec: str) -> tuple[str, str | None]:
  """"path.py:arg" -> ("path.py", "arg"); "path.py" -> ("path.py", None)."""
  path, sep, arg = spec.partition(":")
  return path, (arg if sep else None)


def load_sweep_module(path: str):
  """Imports a sweep file; raises FileNotFoundError, or ValueError when it lacks get_config or
  get_sweep."""
  module = import_python_file(path, "sweep")
  for fn in ("get_config", "get_sweep"):
    if not hasattr(module, fn):
      raise ValueError(f"sweep file {path!r} defines no {fn}(arg=None)")
  return module


def get_target(path: str, arg: str | None) -> dict[str, Any] | None:
  """The target the sweep file states, {"metric": str, "value": float}, from its optional
  `get_target(arg)`; None when it defines none or returns None (not stated yet, e.g. a pilot).
  Raises ValueError for a malformed one."""
  module = load_sweep_module(path)
  if not hasattr(module, "get_target"):
    return None
  target = module.get_target(arg) if arg is not None else module.get_target()
  if target is None:
    return None
  if (not isinstance(target, dict) or not isinstance(target.get("metric"), str)
      or not isinstance(target.get("value"), (int, float))):
    raise ValueError(f"get_target({arg!r}) in {path!r} must return {{'metric': str, 'value': "
                     f"float}}, got {target!r}")
  return {"metric": target["metric"], "value": float(target["value"])}


def get_sweep(path: str, arg: str | None) -> list[dict[str, Any]]:
  """The sweep file's list of override dicts; raises ValueError when it is empty or not dicts."""
  module = load_sweep_module(path)
  runs = module.get_sweep(arg) if arg is not None else module.get_sweep()
  if not runs or not all(isinstance(r, dict) for r in runs):
    raise ValueError(f"get_sweep({arg!r}) in {path!r} must return a non-empty list of dicts")
  return list(runs)


def effective_signature(config) -> str:
  """JSON of the settings that change what a run computes: the learning rate after scaling
  replaces (learning_rate, lr_scaling, reference_batch), the Adam betas and eps after the batch
  adjustment (adjust_adam or lr_scaling "sqrt_adam") replace (b1, b2, eps, adjust_adam), so
  "sqrt_adam" merges with "sqrt" only at the reference batch (k = 1), sft.seed is the effective
  warm-start seed, and the cache directory is dropped."""
  from rlscale.runner import sft  # pylint: disable=g-import-not-at-top
  from rlscale.train.optimizer import adam_hyperparams, scaled_learning_rate  # pylint: disable=g-import-not-at-top
  flat = flatten_config(json.loads(json.dumps(config.to_dict(), default=str)))
  # Responses per optimizer update, the batch the LR rule scales with (update.optimizer_args).
  batch = config.rl.prompts_per_step * config.rl.group_size // config.rl.minibatches
  flat["optim.learning_rate"] = scaled_learning_rate(config.optim, batch)
  if config.optim.critic_learning_rate is not None:
    flat["optim.critic_learning_rate"] = scaled_learning_rate(
        config.optim, batch, base_learning_rate=config.optim.critic_learning_rate)
  try:
    flat.update({f"optim.{k}": v for k, v in adam_hyperparams(config.optim, batch).items()})
    for field in ("lr_scaling", "adjust_adam", "reference_batch"):
      flat.pop(f"optim.{field}", None)
  except ValueError:
    pass  # outside the Adam rule's range: kept apart by its raw fields, and refused when it starts
  flat["sft.seed"] = sft.effective_sft_seed(config)  # None and `seed` train the same warm start
  flat.pop("sft.cache_dir", None)
  return json.dumps(flat, sort_keys=True, default=str)


def plan(base_config, sweep_runs: Sequence[dict[str, Any]], workdir: str) -> list[Run]:
  """The runs of a sweep in the sweep file's order, duplicates merged.

  Raises ValueError for an override naming no config field (naming the nearest one), a value of
  the wrong type, or two runs with the same name."""
  names = hyper.check_unique_names(sweep_runs)
  cache_dir = os.path.abspath(os.path.join(workdir, SFT_DIR))
  runs: list[Run] = []
  by_signature: dict[str, Run] = {}
  for index, (name, overrides) in enumerate(zip(names, sweep_runs)):
    overrides = dict(overrides)
    if "sft.cache_dir" not in overrides and not base_config.sft.cache_dir:
      overrides["sft.cache_dir"] = cache_dir
    try:
      config = hyper.apply_overrides(base_config, overrides)
    except ValueError as e:  # say which run of the sweep file the bad override belongs to
      raise ValueError(f"sweep run {index} ({name}): {e}") from None
    signature = effective_signature(config)
    if signature in by_signature:
      by_signature[signature].aliases.append(name)
      continue
    run = Run(name, overrides, config)
    by_signature[signature] = run
    runs.append(run)
  return runs


def budget_samples(config) -> int:
  """Responses a run consumes: train.total_samples when the config has it set, else
  train.total_steps x B."""
  total = config.train.get("total_samples")
  if total:
    return int(total)
  return int(config.train.total_steps * config.rl.prompts_per_step * config.rl.group_size)


def _format_value(value: Any) -> str:
  return repr(value) if isinstance(value, float) else str(value)


def run_command(run: Run, sweep_spec: str, workdir: str,
                cli_overrides: dict[str, Any] | None = None) -> list[str]:
  """argv of `python -m rlscale.main` for one run: the sweep file's base config, the command-line
  overrides, then the run's overrides (one code path for a run alone and in a sweep)."""
  argv = [sys.executable, "-m", "rlscale.main", f"--config={sweep_spec}",
          f"--workdir={os.path.join(workdir, RUNS_DIR, run.name)}"]
  merged = {**(cli_overrides or {}), **run.overrides}
  argv += [f"--config.{k}={_format_value(v)}" for k, v in merged.items()]
  return argv


def shell_command(argv: Sequence[str]) -> str:
  """argv as one copy-pasteable shell line (`python` for the interpreter)."""
  return " ".join(shlex.quote(a) for a in ["python", *argv[1:]])


def warm_start_signature(config) -> str:
  """JSON of the config sections the warm start depends on (WARM_START_FIELDS, cache dir aside)
  and its seed, the effective sft seed (`sft.effective_sft_seed`): runs with seed 0, 1, 2 and
  sft.seed 0 share one warm start, as the runner's cache key does (`builders.warm_start`)."""
  from rlscale.runner import sft  # pylint: disable=g-import-not-at-top
  d = json.loads(json.dumps(config.to_dict(), default=str))
  parts = {k: d[k] for k in WARM_START_FIELDS}
  parts["sft"] = sft.warm_start_sft_fields(parts["sft"])
  parts["seed"] = sft.effective_sft_seed(config)
  return json.dumps(parts, sort_keys=True)


def sweep_file_and_arg(sweep_file: str | types.ModuleType, arg: str | None = None
                       ) -> tuple[str, str | None]:
  """(path, arg) of a sweep given as a path, "path.py:arg", or an imported sweep module (its
  __file__). An arg in both places must agree; raises ValueError otherwise."""
  if isinstance(sweep_file, types.ModuleType):
    if not getattr(sweep_file, "__file__", None):
      raise ValueError(f"sweep module {sweep_file.__name__!r} has no __file__; pass its path")
    return sweep_file.__file__, arg
  path, arg_in_path = split_config_arg(sweep_file)
  if arg is not None and arg_in_path is not None and arg != arg_in_path:
    raise ValueError(f"sweep argument given twice: {sweep_file!r} and arg={arg!r}")
  return path, arg if arg is not None else arg_in_path


def plan_sweep(sweep_file: str | types.ModuleType, workdir: str, *, arg: str | None = None,
               overrides: dict[str, Any] | None = None, shard: tuple[int, int] | None = None,
               select: Callable[[dict[str, Any]], bool] | None = None):
  """(base config, runs, spec) of a sweep file: `get_config(arg)` with `overrides` (flat dotted
  fields, as `--config.X=...`) applied, the runs of `get_sweep(arg)` for which `select(override
  dict)` is true (all when None), planned (`plan`), then those of shard (i, n). `spec` is
  "path[:arg]", the --config of the runs' commands.

  Raises FileNotFoundError for a missing file, ValueError for a file without get_config/get_sweep,
  an override naming no field, a selection that keeps no run, or runs sharing a name."""
  path, arg = sweep_file_and_arg(sweep_file, arg)
  load_sweep_module(path)  # a missing file or function is reported before the config loads
  base = load_config_file(path, arg)
  if overrides:
    base = hyper.apply_overrides(base, overrides)
  sweep_runs = get_sweep(path, arg)
  if select is not None:
    sweep_runs = [o for o in sweep_runs if select(o)]
    if not sweep_runs:
      raise ValueError(f"select keeps none of the runs of {path!r} (arg {arg!r})")
  runs = plan(base, sweep_runs, workdir)
  if shard is not None:
    runs = hyper.shard(runs, *shard)
  return base, runs, path if arg is None else f"{path}:{arg}"


def seed_key(config) -> tuple[int, int]:
  """(warm start's seed, RL seed) of a run's config: runs with one key share the warm start and
  the prompt stream, the unit the report pairs decisions over."""
  from rlscale.runner import sft  # pylint: disable=g-import-not-at-top
  return (sft.effective_sft_seed(config), int(config.seed))


def validation_runs(runs: Sequence[Run], report: dict) -> list[Run]:
  """The runs the report's decisions compare (every group of every decision, base and candidate),
  seed key by seed key (sweep order within one): a validation stopped part way then holds whole
  seeds, each pairing every decision, instead of every seed of the first groups only."""
  wanted = set()
  groups = {(g["rule"], g["batch_size"]): g for g in report["groups"]}
  for d in report["decisions"]:
    for batch in (d["base"], d["candidate"]):
      wanted.update(groups[(d["lr_rule"], batch)]["runs"])
  order = {run.name: i for i, run in enumerate(runs)}
  chosen = [run for run in runs if run.name in wanted]
  return sorted(chosen, key=lambda run: (seed_key(run.config), order[run.name]))
