"""One-line errors for rlscale's command-line tools (`python -m rlscale.main`, sweeps, reports).

A config or input mistake (a ValueError, TypeError, KeyError, OSError such as FileNotFoundError,
an absl flags error or `UsageError`) is printed as one line, `error: <message>`, on stderr and the
process exits with status 2 (the usual status for bad usage, as argparse uses). Any other exception
is a bug and keeps its traceback. `--verbose` on the command line, or the environment variable
RLSCALE_VERBOSE=1, prints the traceback of user errors too (still exit status 2).

Output into a pipe whose reader stopped (`--list | head`) ends the command quietly with status
141 = 128 + SIGPIPE, what the shell reports for a C tool such as `seq` killed by the signal
(Python ignores SIGPIPE, so the write raises BrokenPipeError instead; the Python docs' recipe).

Use it around the whole entry point, flag parsing included:

  def run():
    cli.run_cli(lambda: app.run(_main, flags_parser=...))
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from typing import Any, Callable, Sequence

from absl import flags
from ml_collections import config_flags

VERBOSE_ENV = "RLSCALE_VERBOSE"
VERBOSE_FLAG = "--verbose"
EXIT_USER_ERROR = 2
EXIT_BROKEN_PIPE = 128 + 13  # 128 + SIGPIPE


class UsageError(Exception):
  """A command-line mistake that is not about a config field (e.g. an unexpected argument)."""


# Exceptions that mean "the input is wrong", not "the code is wrong"; validation in rlscale raises
# ValueError/TypeError naming the field, and missing files raise FileNotFoundError.
USER_ERRORS = (ValueError, TypeError, KeyError, OSError, UsageError, flags.Error)


def verbose_requested(argv: Sequence[str] | None = None) -> bool:
  """True when `--verbose` (or `--verbose=true/1/yes`) is in argv (default sys.argv) or the
  environment variable RLSCALE_VERBOSE is 1/true/yes. Read from the raw argv, so it also applies to
  errors raised while the flags themselves are parsed."""
  if os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes"):
    return True
  for arg in sys.argv if argv is None else argv:
    if arg == VERBOSE_FLAG:
      return True
    if arg.startswith(VERBOSE_FLAG + "="):
      return arg.split("=", 1)[1].strip().lower() in ("1", "true", "yes")
  return False


def _message(exc: BaseException) -> str:
  if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
    return exc.args[0]  # str(KeyError) is the repr of the key, quotes included
  return str(exc)


def error_line(exc: BaseException) -> str:
  """The message of `exc` on one line (newlines and runs of spaces collapsed).

  Libraries that re-raise with a formatted traceback inside the message (ml_collections does so
  for an error in a config file's get_config) are unwrapped: the innermost exception of the
  chain gives the message then."""
  message = _message(exc)
  if "Traceback (most recent call last)" in message:
    inner = exc
    while inner.__cause__ is not None or inner.__context__ is not None:
      inner = inner.__cause__ or inner.__context__
    message = _message(inner)
  return " ".join(message.split()) or type(exc).__name__


def report_error(exc: BaseException, argv: Sequence[str] | None = None) -> None:
  """Writes `error: <message>` (one line) to stderr, preceded by the traceback when verbose."""
  if verbose_requested(argv):
    traceback.print_exception(exc)
  sys.stderr.write(f"error: {error_line(exc)}\n")
  sys.stderr.flush()


def run_cli(main: Callable[[], Any], argv: Sequence[str] | None = None) -> Any:
  """Calls `main()` and returns its result; a user error (USER_ERRORS) is reported by
  `report_error` and ends the process with SystemExit(2); a closed stdout pipe ends it with
  SystemExit(EXIT_BROKEN_PIPE) and no message. Other exceptions propagate unchanged.

  Args:
    main: the whole command, flag parsing included (e.g. `lambda: app.run(...)`).
    argv: the command line, for `--verbose` (default sys.argv).
  """
  try:
    try:
      return main()
    finally:  # also after app.run's SystemExit: a closed pipe shows on the last flush
      sys.stdout.flush()
  except BrokenPipeError:
    _discard_stdout()
    raise SystemExit(EXIT_BROKEN_PIPE) from None
  except USER_ERRORS as exc:
    report_error(exc, argv)
    raise SystemExit(EXIT_USER_ERROR) from None


def _discard_stdout() -> None:
  """Points stdout's file descriptor at /dev/null: later writes, and the interpreter's flush at
  exit, would meet the closed pipe again (and print "Exception ignored ... BrokenPipeError")."""
  try:
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
  except (AttributeError, OSError, ValueError):  # a replaced sys.stdout without a descriptor
    pass


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


def parse_config_flags(argv):
  """absl's flag parsing for a command with a `--config` config-file flag (rlscale.main, the
  sweep), with errors raised (for run_cli) instead of printed with usage.

  ml_collections reports an unknown override field as a bare AttributeError/KeyError: the config
  file is then loaded again to name the field, the closest existing ones and other libraries'
  names for it (rlscale.runner.config_files.unknown_field_message)."""
  try:
    remaining = flags.FLAGS(argv)
  except (AttributeError, KeyError) as exc:
    path = _config_argument(argv)
    if path is not None:
      from rlscale.runner import config_files  # pylint: disable=g-import-not-at-top
      config = config_files.load_config_file(*path.split(":", 1))
      config_files.check_field_paths(config, _override_paths(argv))
    raise exc
  # ml_collections defers a missing config file to the first use of the config; say it now.
  config_path = config_flags.get_config_filename(flags.FLAGS["config"]).split(":", 1)[0]
  if not os.path.isfile(config_path):
    raise FileNotFoundError(f"config file {config_path!r} not found (--config; paths are relative "
                            f"to the current directory {os.getcwd()!r})")
  return remaining
