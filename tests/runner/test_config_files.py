"""Config files by path, and the hint for an unknown config field."""

import os

import ml_collections
import pytest

from rlscale.runner import config_files

DEFAULT = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "configs", "default.py")


def _config():
  return ml_collections.ConfigDict({"seed": 0, "rl": {"group_size": 8, "prompts_per_step": 32,
                                                       "kl_coef": 0.0},
                                    "optim": {"learning_rate": 1e-4}, "sft": {"learning_rate": 1e-3}})


def test_field_paths_and_has_field():
  config = _config()
  # ConfigDict built from a dict keeps its keys sorted.
  assert config_files.field_paths(config) == [
      "optim.learning_rate", "rl.group_size", "rl.kl_coef", "rl.prompts_per_step", "seed",
      "sft.learning_rate"]
  assert config_files.has_field(config, "rl.group_size") and config_files.has_field(config, "rl")
  assert not config_files.has_field(config, "rl.samples_per_prompt")
  assert not config_files.has_field(config, "seed.x")


@pytest.mark.parametrize("path, message", [
    ("rl.prompts_per_stp", "unknown config field 'rl.prompts_per_stp'; closest fields: "
     "rl.prompts_per_step"),
    ("learning_rate", "unknown config field 'learning_rate'; closest fields: optim.learning_rate, "
     "sft.learning_rate"),
    ("rl.samples_per_prompt", "unknown config field 'rl.samples_per_prompt'; the Sampler's "
     "samples_per_prompt is rl.group_size in rlscale"),
    ("actor_rollout_ref.rollout.n", "unknown config field 'actor_rollout_ref.rollout.n'; verl's "
     "rollout.n is rl.group_size in rlscale"),
    ("rl.beta", "unknown config field 'rl.beta'; TRL's beta is rl.kl_coef in rlscale (the KL "
     "coefficient)"),
    ("foo.bar", "unknown config field 'foo.bar'; the config's top-level fields: optim, rl, seed, "
     "sft"),
])
def test_unknown_field_message(path, message):
  assert config_files.unknown_field_message(_config(), path) == (
      f"{message}; every field is described in experiments/configs/default.py")


def test_aliases_name_existing_fields():
  """Every alias points at a field of the default config (or says it is a flag)."""
  config = config_files.load_config_file(DEFAULT)
  for alias, (field, origin, _) in config_files.FIELD_ALIASES.items():
    assert field.startswith("the --") or config_files.has_field(config, field), (alias, field)
    assert not config_files.has_field(config, alias), alias  # an alias is never a real field
    assert origin


def test_check_field_paths_raises_for_the_first_unknown():
  config = _config()
  config_files.check_field_paths(config, ["rl.group_size", "seed"])
  with pytest.raises(ValueError, match="'num_generations'; TRL's num_generations is rl.group_size"):
    config_files.check_field_paths(config, ["rl.group_size", "num_generations", "zzz"])


def test_load_config_file_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="not found"):
    config_files.load_config_file(str(tmp_path / "missing.py"))
  (tmp_path / "empty.py").write_text("x = 1\n")
  with pytest.raises(ValueError, match="defines no get_config"):
    config_files.load_config_file(str(tmp_path / "empty.py"))


# A config file's own errors, at the innermost line of the file they passed through.
RAISING = """import ml_collections


def get_config(arg=None):
  config = ml_collections.ConfigDict()
  if arg != "ok":
    raise ValueError(f"no such variant {arg!r}")
  return config
"""


@pytest.mark.parametrize("source, message", [
    (RAISING, "{path}:7: ValueError: no such variant None"),
    ("def get_config(arg=None)\n  return 1\n", "{path}:1: SyntaxError: expected ':'"),
    ("import math\n\ndef get_config(arg=None):\n  return math.sqrt(-1)\n",
     "{path}:4: ValueError: math domain error"),  # raised in a library: the config's line
    ("x = {}['missing']\n", "{path}:1: KeyError: missing"),  # at import time, no quotes
    ("def get_config(arg=None):\n  return open('/nonexistent/rows.txt').read()\n",
     "{path}:2: FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/rows.txt'"),
])
def test_errors_of_a_config_file_name_its_file_and_line(tmp_path, source, message):
  path = tmp_path / "my_config.py"
  path.write_text(source)
  with pytest.raises(config_files.ConfigFileError) as e:
    config_files.load_config_file(str(path))
  assert str(e.value) == message.format(path=path)
  assert isinstance(e.value, ValueError)  # a user error: one line, exit status 2


def test_an_error_in_a_config_file_another_one_loads_names_the_inner_file(tmp_path):
  inner = tmp_path / "inner.py"
  inner.write_text(RAISING)
  outer = tmp_path / "outer.py"
  outer.write_text("from rlscale.runner.config_files import load_config_file\n\n"
                   f"def get_config(arg=None):\n  return load_config_file({str(inner)!r}, 'bad')\n")
  with pytest.raises(config_files.ConfigFileError) as e:
    config_files.load_config_file(str(outer))
  assert str(e.value) == f"{inner}:7: ValueError: no such variant 'bad'"


def test_errors_outside_the_config_file_are_not_located(tmp_path):
  path = tmp_path / "ok.py"
  path.write_text(RAISING)
  assert config_files.load_config_file(str(path), "ok") == ml_collections.ConfigDict()
  try:
    raise ValueError("an override's value")
  except ValueError as exc:
    assert config_files.config_file_error(exc, str(path)) is None
  (tmp_path / "empty.py").write_text("x = 1\n")
  with pytest.raises(ValueError, match="defines no get_config") as e:
    config_files.load_config_file(str(tmp_path / "empty.py"))
  assert not isinstance(e.value, config_files.ConfigFileError)
