"""A name -> function registry, so a config picks an advantage estimator, loss or KL estimator by
string and a user adds their own with a decorator or a call."""

from __future__ import annotations

from typing import Callable, Generic, Iterator, Optional, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
  """Maps names to entries (functions, or small records describing them).

  `kind` names the config field that selects an entry (e.g. "rl.policy_loss"), so lookup errors
  say which field was wrong and which names are allowed.
  """

  def __init__(self, kind: str):
    self.kind = kind
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
    """The entry for `name`. Raises ValueError naming the field and listing the registered names."""
    if name not in self._entries:
      raise ValueError(f"{self.kind}={name!r} is not registered; registered: {sorted(self._entries)}")
    return self._entries[name]

  def names(self) -> list[str]:
    return sorted(self._entries)

  def __contains__(self, name: object) -> bool:
    return name in self._entries

  def __iter__(self) -> Iterator[str]:
    return iter(sorted(self._entries))

  def __len__(self) -> int:
    return len(self._entries)
