"""Every command printed in README.md and in the experiment files' docstrings works as printed.

Commands come from README's fenced shell blocks, README's inline `python ...` / `tensorboard ...`
code, and the `python ...` lines of experiments/**/*.py docstrings (backslash continuations
joined, `&&` chains split). Each command must name an existing program, module or repository file
(config files are loaded, with their `:arg`), and every flag it passes must be one the program
lists in its --help; `--config.<field>` overrides must name fields of the config file. The cheap
commands (CHEAP) run for real in smoke form; training commands are run in smoke form by
tests/experiments/test_configs.py, which runs every config file's smoke variant.
"""

import functools
import glob
import importlib.util
import os
import re
import shlex
import subprocess
import sys

import pytest

from rlscale.runner import config_files
from rlscale.scaling.sweep import SFT_DIR
from tests.timeouts import hang_timeout

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
README = os.path.join(REPO, "README.md")
# First path components that mean "a file of this repository" in a command.
REPO_DIRS = ("experiments", "benchmarks", "rlscale", "colab", "docs", "tests")
INLINE = re.compile(r"`((?:python3? |tensorboard )[^`]+)`")
FENCE = re.compile(r"```(?:bash|sh|shell|console)\n(.*?)```", re.S)


def _join_continuations(text: str) -> list[str]:
  return re.sub(r"\\\n\s*", " ", text).splitlines()


def _split_chain(line: str) -> list[list[str]]:
  """`a && b; c` -> [[a...], [b...], [c...]] as shlex tokens; comments dropped."""
  tokens = shlex.split(line, comments=True)
  commands, current = [], []
  for token in tokens:
    if token in ("&&", ";", "||"):
      commands.append(current)
      current = []
    else:
      current.append(token)
  return [c for c in commands + [current] if c]


def readme_commands() -> list[list[str]]:
  text = open(README, encoding="utf-8").read()
  commands = []
  for block in FENCE.findall(text):
    for line in _join_continuations(block):
      commands.extend(_split_chain(line))
  outside = FENCE.sub("", text)
  for inline in INLINE.findall(outside):
    commands.extend(_split_chain(inline))
  return commands


def docstring_commands() -> list[list[str]]:
  commands = []
  for path in sorted(glob.glob(os.path.join(REPO, "experiments", "**", "*.py"), recursive=True)):
    source = open(path, encoding="utf-8").read()
    match = re.match(r'\s*r?"""(.*?)"""', source, re.S)
    for line in _join_continuations(match.group(1) if match else ""):
      if line.strip().startswith(("python ", "python3 ")):
        commands.extend(_split_chain(line.strip()))
  return commands


def _ids(commands):
  return [" ".join(c)[:80] for c in commands]


README_COMMANDS = readme_commands()
DOCSTRING_COMMANDS = docstring_commands()


def test_commands_found():
  """The extraction sees the README's main commands (a broken fence would hide them all)."""
  programs = {" ".join(c[:3]) for c in README_COMMANDS}
  assert "python -m rlscale.main" in programs
  assert any(c[0] == "tensorboard" for c in README_COMMANDS)
  assert any(c[:2] == ["python", "benchmarks/verifier.py"] for c in README_COMMANDS)
  assert any("hf_qwen3.py" in " ".join(c) for c in DOCSTRING_COMMANDS)


@functools.lru_cache(maxsize=None)
def _help_flags(*program: str) -> frozenset:
  """Flag names a program lists in its --help (absl: --[no]name; argparse: --name)."""
  out = subprocess.run([*program, "--help"], cwd=REPO, capture_output=True, text=True,
                       timeout=hang_timeout(60), env=dict(os.environ, JAX_PLATFORMS="cpu"))
  return frozenset(re.findall(r"--(?:\[no\])?([A-Za-z][\w-]*)", out.stdout + out.stderr))


def _repo_path(token: str) -> str | None:
  """The repository path a token (or a flag's value) names, or None."""
  value = token.split("=", 1)[1] if token.startswith("--") and "=" in token else token
  value = value.split(":", 1)[0]
  if value.split("/", 1)[0] in REPO_DIRS and "/" in value:
    return value
  return None


def _check_config_overrides(args: list[str]) -> None:
  configs = [a.split("=", 1)[1] for a in args if a.startswith("--config=")]
  overrides = [a.split("=", 1)[0][len("--config."):] for a in args if a.startswith("--config.")]
  for spec in configs:
    path, _, arg = spec.partition(":")
    config = config_files.load_config_file(os.path.join(REPO, path), arg or None)
    config_files.check_field_paths(config, overrides)


def check_command(tokens: list[str]) -> None:
  """Raises AssertionError (or the config's ValueError) naming what does not exist."""
  while tokens and re.match(r"^[A-Z_]+=", tokens[0]):  # VAR=value prefixes
    tokens = tokens[1:]
  program, args = tokens[0], tokens[1:]
  for token in tokens:
    path = _repo_path(token)
    if path is not None:
      assert os.path.exists(os.path.join(REPO, path)), f"{path} (in {' '.join(tokens)})"
  if program in (".", "source"):
    return  # activating the virtual environment
  if program in ("pip", "pip3"):
    extras = re.findall(r"\.\[([\w,]+)\]", " ".join(args))
    setup = open(os.path.join(REPO, "setup.cfg"), encoding="utf-8").read()
    for extra in ",".join(extras).split(",") if extras else []:
      assert re.search(rf"^{extra} =", setup, re.M), f"extra [{extra}] not in setup.cfg"
    return
  if program == "tensorboard":
    assert importlib.util.find_spec("tensorboard"), "tensorboard is not installed"
    setup = open(os.path.join(REPO, "setup.cfg"), encoding="utf-8").read()
    assert re.search(r"^\s+tensorboard\b", setup, re.M), "tensorboard not in install_requires"
    runner = (sys.executable, "-m", "tensorboard.main")
  else:
    assert program in ("python", "python3"), f"unknown program {program!r}: classify it here"
    if args[:1] == ["-m"]:
      module, args = args[1], args[2:]
      assert importlib.util.find_spec(module), f"no module {module}"
      if not module.startswith("rlscale"):
        return  # venv, pytest: third-party programs
      runner = (sys.executable, "-m", module)
    else:
      script, args = args[0], args[1:]
      assert os.path.isfile(os.path.join(REPO, script)), script
      runner = (sys.executable, script)
  _check_config_overrides(args)
  known = _help_flags(*runner)
  for arg in args:
    if arg.startswith("--") and not arg.startswith("--config."):
      name = arg[2:].split("=", 1)[0]
      assert name in known, f"{' '.join(tokens)}: {runner[-1]} has no flag --{name}"


@pytest.mark.parametrize("tokens", README_COMMANDS, ids=_ids(README_COMMANDS))
def test_readme_command_names_existing_files_and_flags(tokens):
  check_command(tokens)


@pytest.mark.parametrize("tokens", DOCSTRING_COMMANDS, ids=_ids(DOCSTRING_COMMANDS))
def test_docstring_command_names_existing_files_and_flags(tokens):
  check_command(tokens)


def test_every_config_argument_in_docs_loads():
  """`--config=<file>[:arg]` fragments anywhere in README and experiment docstrings load."""
  texts = [open(README, encoding="utf-8").read()] + [
      open(p, encoding="utf-8").read()
      for p in glob.glob(os.path.join(REPO, "experiments", "**", "*.py"), recursive=True)]
  specs = {m for t in texts for m in re.findall(r"--config=([\w/.]+\.py(?::\w+)?)", t)}
  assert specs
  for spec in sorted(specs):
    path, _, arg = spec.partition(":")
    config_files.load_config_file(os.path.join(REPO, path), arg or None)


def test_cheap_commands_run_in_smoke_form(tmp_path):
  """The verifier benchmark as printed, with --quick and the output in a temporary folder."""
  for tokens in README_COMMANDS:
    if tokens[:2] == ["python", "benchmarks/verifier.py"]:
      args = list(tokens[2:])
      if "--out" in args:  # "--out DIR": the output goes to the temporary folder instead
        del args[args.index("--out"):args.index("--out") + 2]
      args = [a for a in args if not a.startswith("--out=")]
      out = subprocess.run([sys.executable, "benchmarks/verifier.py", *args, "--quick",
                            f"--out={tmp_path}"], cwd=REPO, capture_output=True, text=True,
                           timeout=hang_timeout(150))
      assert out.returncode == 0, out.stderr
      assert (tmp_path / "verifier.json").is_file()
      return
  pytest.fail("README lost its verifier benchmark command")


def test_design_notes_are_in_the_repository():
  text = open(README, encoding="utf-8").read()
  assert "../shared" not in text
  for link in re.findall(r"\]\(([^)#:]+)\)", text):  # relative markdown links
    assert os.path.exists(os.path.join(REPO, link)), link


def test_throughput_commands_reuse_their_sweeps_warm_start():
  """Every printed `rlscale.throughput` for a sweep file points sft.cache_dir at the warm start of
  the sweep printed with it (DIR/sft for `--workdir=DIR`), or at the committed warm start of that
  sweep's results (experiments/results/NAME/sft, holding a cached warm start), so the profile
  measures the same warm-started model and trains no second one."""
  commands = README_COMMANDS + DOCSTRING_COMMANDS
  workdirs = {}
  for c in commands:
    args = dict(a.split("=", 1) for a in c if a.startswith("--") and "=" in a)
    if c[:3] == ["python", "-m", "rlscale.sweep"] and "--workdir" in args:
      workdirs[args["--config"].split(":")[0]] = args["--workdir"]
  profiles = [c for c in commands if c[:3] == ["python", "-m", "rlscale.throughput"]]
  assert profiles
  for c in profiles:
    args = dict(a.split("=", 1) for a in c if a.startswith("--") and "=" in a)
    config = args["--config"].split(":")[0]
    if config.startswith("experiments/sweeps/"):
      workdir = workdirs[config]
      name = os.path.splitext(os.path.basename(config))[0]
      committed = os.path.join("experiments", "results", name, SFT_DIR)
      cache_dir = args.get("--config.sft.cache_dir")
      assert cache_dir in (f"{workdir}/{SFT_DIR}", committed), " ".join(c)
      if cache_dir == committed:
        assert glob.glob(os.path.join(REPO, committed, "warm_start_*.msgpack")), committed
      assert args.get("--out") == f"{workdir}/throughput", " ".join(c)


def _collected(paths: list[str]) -> int:
  """How many tests `pytest --collect-only` finds under `paths` (run from the repository)."""
  out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                        "-p", "no:cacheprovider", *paths], capture_output=True, text=True,
                       cwd=REPO, timeout=hang_timeout(120)).stdout
  return int(re.search(r"(\d+) tests? collected", out)[1])


def test_test_counts_are_those_pytest_collects():
  """The README's "whole suite (N tests)" and "fast subset, M unit tests" equal what pytest
  collects for the commands printed with them."""
  text = open(README, encoding="utf-8").read()
  total = int(re.search(r"whole suite \(([\d,]+) tests\)", text)[1].replace(",", ""))
  fast = int(re.search(r"fast subset, ([\d,]+)\s+unit tests", text)[1].replace(",", ""))
  subset = next(c for c in README_COMMANDS if c[:3] == ["python", "-m", "pytest"] and "-n" not in c)
  assert (total, fast) == (_collected(["tests"]),
                           _collected([a for a in subset[3:] if not a.startswith("-")]))
