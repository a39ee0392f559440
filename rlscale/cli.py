"""One-line errors for rlscale's command-line tools (`python -m rlscale.main`, sweeps, reports).

A config or input mistake (a ValueError, TypeError, KeyError, OSError such as FileNotFoundError,
an absl flags error or `UsageError`) is printed as one line, `error: <message>`, on stderr and the
process exits with status 2 (the usual status for bad usage, as argparse uses). Any other exception
is a bug and keeps its traceback. `--verbose` on the command line, or the environment variable
RLSCALE_VERBOSE=1, prints the traceback of user errors too (still exit status 2).

Use it around the whole entry point, flag parsing included:

  def run():
    cli.run_cli(lambda: app.run(_main, flags_parser=...))
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any, Callable, Sequence

from absl import flags

VERBOSE_ENV = "RLSCALE_VERBOSE"
VERBOSE_FLAG = "--verbose"
EXIT_USER_ERROR = 2


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
  `report_error` and ends the process with SystemExit(2). Other exceptions propagate unchanged.

  Args:
    main: the whole command, flag parsing included (e.g. `lambda: app.run(...)`).
    argv: the command line, for `--verbose` (default sys.argv).
  """
  try:
    return main()
  except USER_ERRORS as exc:
    report_error(exc, argv)
    raise SystemExit(EXIT_USER_ERROR) from None
