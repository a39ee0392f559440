"""Tests of the benchmark scripts, each loaded as a module by `load_script`."""

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_script(name: str):
  """benchmarks/<name>.py as a module (the scripts are not a package)."""
  spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks", f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module  # dataclasses look their module up while a class is built
  spec.loader.exec_module(module)
  return module
