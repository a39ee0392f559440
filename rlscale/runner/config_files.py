"""Loading ml_collections config files by path, so one config file can start from another."""

from __future__ import annotations

import importlib.util
import os


def load_config_file(path: str, arg: str | None = None):
  """Calls `get_config(arg)` of the Python config file at `path` (relative paths are taken from the
  current directory). Raises FileNotFoundError when the file is missing, AttributeError when it has
  no `get_config`."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"config file {path!r} not found")
  name = "rlscale_config_" + os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if not hasattr(module, "get_config"):
    raise AttributeError(f"config file {path!r} defines no get_config(arg=None)")
  return module.get_config(arg) if arg is not None else module.get_config()


def sibling(config_file: str, name: str) -> str:
  """Path of the config file `name` in the same directory as `config_file` (pass `__file__`)."""
  return os.path.join(os.path.dirname(os.path.abspath(config_file)), name)
