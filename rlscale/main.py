"""Command-line entry point: `python -m rlscale.main --config=<file.py>[:arg] --workdir=<dir>`.

Any config field can be overridden, e.g. `--config.rl.prompts_per_step=16`. This module only parses
flags; the work is done by `rlscale.runner.loop.train_and_evaluate`, which Colab imports too.

A config or input error (unknown field, invalid value, missing file) prints one line
`error: <message>` on stderr and exits with status 2; `--verbose` (or RLSCALE_VERBOSE=1) shows the
traceback too (see rlscale.cli).
"""

import os
import re

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from rlscale import cli
from rlscale.runner import config_files

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to an ml_collections config file (optionally `path:arg`).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory: metrics, checkpoints, plots.")
flags.DEFINE_bool("verbose", False, "Show the traceback of config and input errors too "
                  f"(also: {cli.VERBOSE_ENV}=1).")
flags.mark_flags_as_required(["config", "workdir"])


def _config_argument(argv) -> str | None:
  """The value of --config in argv (`--config=x` or `--config x`), or None."""
  for i, arg in enumerate(argv):
    if re.match(r"^--?config=", arg):
      return arg.split("=", 1)[1]
    if re.match(r"^--?config$", arg) and i + 1 < len(argv):
      return argv[i + 1]
  return None


def _override_paths(argv) -> list[str]:
  """Dotted field paths of the `--config.<path>=value` overrides in argv."""
  return [arg.split("=", 1)[0].split(".", 1)[1] for arg in argv
          if re.match(r"^--?(no)?config\.", arg)]


def _parse_flags(argv):
  """absl's flag parsing, with errors raised (for cli.run_cli) instead of printed with usage.

  ml_collections reports an unknown override field as a bare AttributeError/KeyError: the config
  file is then loaded again to name the field, the closest existing ones and other libraries'
  names for it (rlscale.runner.config_files.unknown_field_message)."""
  try:
    remaining = flags.FLAGS(argv)
  except (AttributeError, KeyError) as exc:
    path = _config_argument(argv)
    if path is not None:
      config = config_files.load_config_file(*path.split(":", 1))
      config_files.check_field_paths(config, _override_paths(argv))
    raise exc
  # ml_collections defers a missing config file to the first use of the config; say it now.
  config_path = config_flags.get_config_filename(flags.FLAGS["config"]).split(":", 1)[0]
  if not os.path.isfile(config_path):
    raise FileNotFoundError(f"config file {config_path!r} not found (--config; paths are relative "
                            f"to the current directory {os.getcwd()!r})")
  return remaining


def _main(argv):
  if len(argv) > 1:
    raise cli.UsageError(f"unexpected arguments {argv[1:]}; flags are --config=<file.py>[:smoke], "
                         "--workdir=<dir> and --config.<field>=<value>")
  # orbax logs every checkpoint step at INFO; keep the terminal for progress and results.
  logging.set_verbosity(logging.WARNING)
  from rlscale.runner.loop import train_and_evaluate  # pylint: disable=g-import-not-at-top
  try:
    train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  except KeyboardInterrupt:
    # Ctrl-C before the RL loop (warm start, first evaluation); the loop itself checkpoints.
    print("interrupted before the first RL checkpoint; rerun the command to start again")
    raise SystemExit(130) from None


def run():
  """Console-script entry point (`rlscale --config=... --workdir=...`)."""
  cli.run_cli(lambda: app.run(_main, flags_parser=_parse_flags))


if __name__ == "__main__":
  run()
