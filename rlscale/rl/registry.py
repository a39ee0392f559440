"""A name -> function registry, so a config picks an advantage estimator, loss or KL estimator by
string and a user adds their own with a decorator or a call."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Generic, Iterator, Optional, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
  """Maps names to entries (functions, or small records describing them).

  `kind` names the config field that selects an entry (e.g. "rl.policy_loss"), so lookup errors
  say which field was wrong and which names are allowed; `register_with` names the decorator or
  call that adds one (e.g. "rlscale.rl.losses.register_policy_loss"), for the same error.
  """

  def __init__(self, kind: str, register_with: Optional[str] = None):
    self.kind = kind
    self.register_with = register_with
    self._entries: dict[str, T] = {}

  def register(self, name: str, entry: Optional[T] = None, *, overwrite: bool = False):
    """Registers `entry` under `name`; without `entry`, returns a decorator that does.

    Raises:
      ValueError: when `name` is taken and `overwrite` is False, or `name` is not a non-empty str.
    """
    if not isinstance(name, str) or not name:
      raise ValueError(f"{self.kind}: a registered name must be a non-empty str, got {name!r}")

    def add(value: T) -> T:
      if name in self._entries and not overwrite:
        raise ValueError(f"{self.kind}: {name!r} is already registered (pass overwrite=True)")
      self._entries[name] = value
      return value

    return add if entry is None else add(entry)

  def get(self, name: str) -> T:
    """The entry for `name`.

    Raises ValueError naming the field, the registered names and how to add one: registration
    happens when Python runs the code that registers, so from the command line it must be code
    that the run's process executes, the config file (or a module it imports); a function
    registered in another session or script is unknown to `python -m rlscale.main`."""
    if name not in self._entries:
      how = f"{self.register_with}({name!r})" if self.register_with else f"register({name!r})"
      raise ValueError(
          f"{self.kind}={name!r} is not registered; registered: {sorted(self._entries)}. To use "
          f"your own, register it with {how} in the config file passed to --config (or in a "
          "module that file imports), so the run's process defines it before the run starts")
    return self._entries[name]

  def names(self) -> list[str]:
    return sorted(self._entries)

  def __contains__(self, name: object) -> bool:
    return name in self._entries

  def __iter__(self) -> Iterator[str]:
    return iter(sorted(self._entries))

  def __len__(self) -> int:
    return len(self._entries)


def hyperparameters_from(fn: Callable, rl_cfg, selected: str) -> dict[str, Any]:
  """The keyword-only hyperparameters of `fn` (a registered loss or correction) read from the
  `rl` config fields of the same name; one the config lacks keeps fn's default.

  Args: fn; rl_cfg: a resolved rl section (ConfigDict or dict); selected: what picked fn, for
    the error, e.g. "rl.policy_loss='ppo_clip'".
  Raises: ValueError when fn has a required hyperparameter that `rl_cfg` lacks."""
  kwargs = {}
  for param in inspect.signature(fn).parameters.values():
    if param.kind is not inspect.Parameter.KEYWORD_ONLY:
      continue
    if param.name in rl_cfg:
      kwargs[param.name] = rl_cfg[param.name]
    elif param.default is inspect.Parameter.empty:
      raise ValueError(f"{selected} needs hyperparameter rl.{param.name}, "
                       "which the config does not set")
  return kwargs
