"""Sweeps as data: a sweep is a list of flat override dicts, built from small combinators.

A sweep file (experiments/sweeps/*.py) defines `get_config(arg)` (the base run config) and
`get_sweep(arg)` (the runs), e.g.

  product(sweep("seed", [0, 1]), sweep("rl.prompts_per_step", [8, 64]))
  -> [{"seed": 0, "rl.prompts_per_step": 8}, {"seed": 0, "rl.prompts_per_step": 64},
      {"seed": 1, "rl.prompts_per_step": 8}, {"seed": 1, "rl.prompts_per_step": 64}]

(the style of big_vision's `get_hyper`: the first axis of a product varies slowest). Every run is
the base config with its overrides applied (`apply_overrides`), named after them (`run_name`).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, Iterable, Sequence

from rlscale.runner import config_files

Overrides = dict[str, Any]


def sweep(key: str, values: Iterable[Any]) -> list[Overrides]:
  """One axis: [{key: v} for v in values]. Raises ValueError for an empty list of values."""
  runs = [{key: v} for v in values]
  if not runs:
    raise ValueError(f"sweep axis {key!r} has no values")
  return runs


def fixed(key: str, value: Any) -> list[Overrides]:
  """An axis of one value (sets `key` in every run of a product)."""
  return [{key: value}]


def _merge(parts: Sequence[Overrides]) -> Overrides:
  out: Overrides = {}
  for part in parts:
    clash = set(out) & set(part)
    if clash:
      raise ValueError(f"sweep axes set the same field twice: {sorted(clash)}")
    out.update(part)
  return out


def product(*axes: Sequence[Overrides]) -> list[Overrides]:
  """Cartesian product of axes (each a list of override dicts); the first axis varies slowest.

  Raises ValueError when two axes set the same field."""
  return [_merge(combo) for combo in itertools.product(*axes)]


def zipped(*axes: Sequence[Overrides]) -> list[Overrides]:
  """Element-wise merge of axes of equal length (e.g. a learning rate per batch size).

  Raises ValueError for axes of different lengths or setting the same field."""
  lengths = {len(a) for a in axes}
  if len(lengths) > 1:
    raise ValueError(f"zipped axes must have equal lengths, got {[len(a) for a in axes]}")
  return [_merge(combo) for combo in zip(*axes)]


def _format_value(value: Any) -> str:
  if isinstance(value, float):
    return f"{value:g}"
  return str(value).replace("/", "_").replace(" ", "")


def run_name(overrides: Overrides) -> str:
  """Directory name of a run from its overrides: `last_key=value` joined by commas, in the order
  given (the full dotted key where two keys share their last part), e.g.
  {"rl.prompts_per_step": 8, "seed": 0} -> "prompts_per_step=8,seed=0". Empty -> "base"."""
  if not overrides:
    return "base"
  short = [k.rsplit(".", 1)[-1] for k in overrides]
  parts = []
  for key, last in zip(overrides, short):
    label = key if short.count(last) > 1 else last
    parts.append(f"{label}={_format_value(overrides[key])}")
  return ",".join(parts)


def check_fields(config, overrides: Overrides) -> None:
  """Raises ValueError when an override names a field the config does not have, naming the
  closest existing fields (rlscale.runner.config_files.unknown_field_message)."""
  for key in overrides:
    if not config_files.has_field(config, key):
      raise ValueError("sweep override: " + config_files.unknown_field_message(config, key))


def apply_overrides(config, overrides: Overrides):
  """A copy of `config` with the dotted fields set; the original is unchanged.

  Field references (e.g. rl.batch_size = prompts_per_step * group_size) follow the new values.
  Raises ValueError naming the field for an unknown field or a value of the wrong type."""
  check_fields(config, overrides)
  out = copy.deepcopy(config)  # keeps field references pointing inside the copy
  for key, value in overrides.items():
    *path, last = key.split(".")
    node = out
    for part in path:
      node = node[part]
    try:
      node[last] = value
    except TypeError as e:
      raise ValueError(f"sweep override {key}={value!r}: {e}") from None
  return out


def check_unique_names(runs: Sequence[Overrides]) -> list[str]:
  """Run names of `runs`; raises ValueError naming two runs that would share a workdir."""
  names: dict[str, int] = {}
  for index, overrides in enumerate(runs):
    name = run_name(overrides)
    if name in names:
      raise ValueError(f"sweep runs {names[name]} and {index} would share the workdir "
                       f"runs/{name} (overrides {runs[names[name]]} and {overrides}); "
                       "make their overrides differ")
    names[name] = index
  return list(names)


def parse_shard(text: str) -> tuple[int, int]:
  """"i/n" -> (i, n) with 0 <= i < n; raises ValueError naming --shard otherwise."""
  try:
    i, n = (int(x) for x in text.split("/"))
  except ValueError:
    raise ValueError(f"--shard={text!r} must be i/n with integers 0 <= i < n, e.g. 0/4") from None
  if n < 1 or not 0 <= i < n:
    raise ValueError(f"--shard={text!r}: need 0 <= i < n (got i={i}, n={n}); shards are "
                     f"numbered 0..n-1")
  return i, n


def shard(items: Sequence[Any], index: int, count: int) -> list[Any]:
  """Every count-th item from index: the runs of shard index/count (job-array style)."""
  return list(items[index::count])


def lr_grid(*, prompts_per_step: Sequence[int], learning_rate: float,
            multipliers: Sequence[float], rule: str = "sqrt") -> list[Overrides]:
  """An LR grid at every batch: for each P, the LR rule's value times each multiplier (e.g.
  (0.5, 1, 2) around sqrt), so the tuned group of the report brackets its optimum at every batch
  it names. [{"rl.prompts_per_step": P, "optim.lr_scaling": rule, "optim.learning_rate":
  learning_rate x m}] (multiplier 1 writes learning_rate itself, the rule's own run). Raises
  ValueError for an empty grid or a multiplier <= 0."""
  if not multipliers or any(m <= 0 for m in multipliers):
    raise ValueError(f"LR grid multipliers must be a non-empty list of values > 0, got {multipliers}")
  return product(sweep("rl.prompts_per_step", prompts_per_step), fixed("optim.lr_scaling", rule),
                 sweep("optim.learning_rate", [learning_rate * m for m in multipliers]))


def batch_lr_grid(*, prompts_per_step: Sequence[int], seeds: Sequence[int], learning_rate: float,
                  rules: Sequence[str] = ("none", "sqrt"), grid_prompts: Sequence[int] = (),
                  grid_multipliers: Sequence[float] = (), grid_rule: str = "sqrt") -> list[Overrides]:
  """The batch-size study's runs: every P under every LR rule, plus an LR grid (learning_rate x
  each multiplier, under `grid_rule`) at `grid_prompts`, for every seed (seed varies slowest).

  Runs that end up with the same effective learning rate (e.g. every rule at the reference batch)
  are merged when the sweep is planned (`rlscale.scaling.sweep_plan.plan`), not here."""
  runs = product(sweep("rl.prompts_per_step", prompts_per_step), sweep("optim.lr_scaling", rules))
  if grid_prompts and grid_multipliers:
    runs += lr_grid(prompts_per_step=grid_prompts, learning_rate=learning_rate,
                    multipliers=grid_multipliers, rule=grid_rule)
  return product(sweep("seed", seeds), runs)
