"""One-line errors for rlscale's command-line tools (`python -m rlscale.main`, sweeps, reports).

A config or input mistake (a ValueError, an OSError such as FileNotFoundError,
an absl flags error or `UsageError`) is printed as one line, `error: <message>`, on stderr and the
process exits with status 2 (the usual status for bad usage, as argparse uses). A `RunFailure`
(training diverged: 3) prints its line and exits with its own `exit_code`. The storage refusing a
write (an OSError with errno ENOSPC, EFBIG, EDQUOT or EIO: a full disk, a file-size limit, a
quota, a failing disk) is printed as `error: could not write <file>: <reason>; <what to do>` and
exits with EXIT_IO_ERROR (74, sysexits.h EX_IOERR). Any other exception is a bug and keeps its
traceback. `--verbose` on the command line, or the environment variable RLSCALE_VERBOSE=1, prints
the traceback of these errors too (the exit status stays the same). Open tqdm progress bars are
closed before the line, so it starts a line of its own and no bar is redrawn after it.

Undecodable input is a user error naming its place (`rlscale.inputs`: `<path>:<line>: not valid
UTF-8 (byte 0xe9 at column 12); ...`).

Output into a pipe whose reader stopped (`--list | head`) ends the command quietly with status
141 = 128 + SIGPIPE, what the shell reports for a C tool such as `seq` killed by the signal
(Python ignores SIGPIPE, so the write raises BrokenPipeError instead; the Python docs' recipe).

Use it around the whole entry point, flag parsing included:

  def run():
    cli.run_cli(lambda: app.run(_main, flags_parser=...))
"""

from __future__ import annotations

import errno
import os
import re
import sys
import traceback
from typing import Any, Callable, Iterator, Sequence

from absl import flags
from ml_collections import config_flags

VERBOSE_ENV = "RLSCALE_VERBOSE"
VERBOSE_FLAG = "--verbose"
# Exit statuses of rlscale's commands (README, "Errors"); 75 (interrupted at a checkpoint, rerun to
# resume) lives in rlscale.runner.interrupts, 130 / 128 + signum for a stop at once.
EXIT_DONE = 0
EXIT_USER_ERROR = 2  # a config or input mistake
EXIT_DIVERGED = 3  # a non-finite loss or gradient stopped the run; the last good checkpoint kept
EXIT_IO_ERROR = 74  # EX_IOERR: the disk is full, a file-size limit or an I/O error while writing
EXIT_BROKEN_PIPE = 128 + 13  # 128 + SIGPIPE


class UsageError(Exception):
  """A command-line mistake that is not about a config field (e.g. an unexpected argument)."""


class RunFailure(Exception):
  """A run that cannot go on for a reason that is not a bug in rlscale nor bad input (training
  diverged, the disk is full). `run_cli` prints its message as one line, `error: <message>`, and
  exits with `exit_code`; subclasses set the status."""
  exit_code = 1


class TrainingDiverged(RunFailure):
  """A non-finite loss or gradient norm at some RL step: the run stops there, keeps its last good
  checkpoint and exports no policy (exit status EXIT_DIVERGED)."""
  exit_code = EXIT_DIVERGED


class WriteFailed(RunFailure):
  """The storage refused a write (see `storage_failure`): exit status EXIT_IO_ERROR. Nothing is
  lost that a rerun cannot redo: a run resumes from its last good checkpoint."""
  exit_code = EXIT_IO_ERROR


# errno values of a write the storage refused -> (what it means, what the user can do about it).
# Python ignores SIGXFSZ, so a write beyond `ulimit -f` raises EFBIG instead of killing the process.
STORAGE_ERRNOS = {
    errno.ENOSPC: ("", "free space"),
    errno.EFBIG: (" (a file-size limit; ulimit -f)", "free space or raise the limit"),
    errno.EDQUOT: (" (a disk quota)", "free space or raise the quota"),
    errno.EIO: (" (the storage reported a hardware or network error)", "check the storage"),
}


# Libraries that report an operating-system error in a message instead of an OSError:
# tensorstore (orbax's writes) "... [os_error_code='27']", Rust's std::io::Error (safetensors,
# tokenizers) "... (os error 28)"; tensorstore names the file as `Failed writing: "<file>"`.
_ERRNO_IN_MESSAGE = re.compile(r"os_error_code='?(\d+)|\(os error (\d+)\)")
_FILE_IN_MESSAGE = re.compile(r'Failed writing: "([^"]+)"')
# Names of the locals that hold the file a failing write was writing (epath's `self`, safetensors'
# `filename`), for an error that does not name it.
_PATH_LOCALS = ("self", "path", "file", "filename")


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
  """exc, then the exceptions it was raised from or during (`__cause__`, else `__context__`),
  outermost first; each once."""
  seen = set()
  while exc is not None and id(exc) not in seen:
    seen.add(id(exc))
    yield exc
    exc = exc.__cause__ or exc.__context__


def _path_in_traceback(exc: BaseException, under: str) -> str | None:
  """The innermost traceback frame's path-like local (`_PATH_LOCALS`) that lies inside the
  folder `under`."""
  tb, found = exc.__traceback__, None
  while tb is not None:
    for name in _PATH_LOCALS:
      value = tb.tb_frame.f_locals.get(name)
      if isinstance(value, (str, os.PathLike)) and os.path.abspath(os.fspath(value)).startswith(
          os.path.join(os.path.abspath(under), "")):
        found = os.fspath(value)
        break
    tb = tb.tb_next
  return found


def os_error_in(exc: BaseException, *, under: str | None = None) -> OSError | None:
  """The operating-system error behind `exc` as OSError(errno, strerror, file), or None.

  Looked for along exc's chain (outermost first): an OSError with an errno, or a library's
  message holding an errno (`_ERRNO_IN_MESSAGE`). The file is the error's own, else the one the
  message names, else (with `under`, a folder) the innermost path-like local of the traceback
  inside `under`, else None."""
  for error in exception_chain(exc):
    if isinstance(error, OSError) and error.errno is not None:
      number, filename = error.errno, error.filename
    else:
      code = _ERRNO_IN_MESSAGE.search(str(error))
      if code is None:
        continue
      number = int(code[1] or code[2])
      named = _FILE_IN_MESSAGE.search(str(error))
      filename = named[1] if named else None
    if filename is None and under is not None:
      filename = _path_in_traceback(error, under)
    strerror = error.strerror if isinstance(error, OSError) and error.strerror else None
    return OSError(number, strerror or os.strerror(number), filename)
  return None


def is_storage_error(exc: BaseException) -> bool:
  """Whether `exc` is an OSError whose errno is one of STORAGE_ERRNOS."""
  return isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS


def storage_failure(exc: OSError, *, where: str | None = None,
                    checkpoint: tuple[int | None, str] | None = None) -> WriteFailed:
  """The WriteFailed to report for a storage error `exc` (`is_storage_error`), one line:
  `could not write <file>: <strerror> (<meaning>); [<checkpoint note>; ]<action> and rerun...`.

  Args:
    exc: the OSError; its filename names the file, else `where` (e.g. the run's workdir) names
      the folder written into.
    where: the folder to name when `exc` carries no filename.
    checkpoint: during a run, (the last good checkpoint's step or None, the checkpoint folder):
      the rerun resumes from that step, or, with None, starts the run over.
  """
  meaning, action = STORAGE_ERRNOS.get(exc.errno, ("", "fix the storage"))
  reason = (exc.strerror or os.strerror(exc.errno)) + meaning
  target = (f"could not write {os.fspath(exc.filename)}" if exc.filename is not None
            else f"could not write into {where}" if where else "could not write")
  if checkpoint is None:
    return WriteFailed(f"{target}: {reason}; {action} and rerun")
  step, directory = checkpoint
  if step is None:
    return WriteFailed(f"{target}: {reason}; no checkpoint had been written yet; {action} and "
                       "rerun to start the run again")
  return WriteFailed(f"{target}: {reason}; the last good checkpoint is step {step} in "
                     f"{directory}; {action} and rerun to resume")


# Exceptions that mean "the input is wrong", not "the code is wrong": validation in rlscale raises
# ValueError naming the field, and missing files raise FileNotFoundError. A TypeError or KeyError
# is a bug (or a check missing): it keeps its traceback.
USER_ERRORS = (ValueError, OSError, UsageError, flags.Error)


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


def _close_progress_bars() -> None:
  """Closes every open tqdm bar (tqdm only if already imported): a bar left open would leave the
  cursor after its last render, and tqdm redraws it when the bar is garbage-collected."""
  tqdm = sys.modules.get("tqdm")
  for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
    try:
      bar.close()
    except Exception:  # pylint: disable=broad-exception-caught
      pass  # a bar whose stream is gone: nothing to tidy


def report_error(exc: BaseException, argv: Sequence[str] | None = None) -> None:
  """Writes `error: <message>` (one line) to stderr, preceded by the traceback when verbose;
  open progress bars are closed first."""
  _close_progress_bars()
  if verbose_requested(argv):
    traceback.print_exception(exc)
  sys.stderr.write(f"error: {error_line(exc)}\n")
  sys.stderr.flush()


def run_cli(main: Callable[[], Any], argv: Sequence[str] | None = None) -> Any:
  """Calls `main()` and returns its result; errors end the process with one line on stderr
  (`report_error`) and SystemExit:

    * a RunFailure: its own `exit_code` (TrainingDiverged 3, WriteFailed 74);
    * a storage error (`os_error_in` finds ENOSPC, EFBIG, EDQUOT or EIO in it or its chain, an
      OSError or a library's message): EXIT_IO_ERROR (74), the line from `storage_failure`;
    * a user error (USER_ERRORS): EXIT_USER_ERROR (2);
    * a closed stdout pipe: EXIT_BROKEN_PIPE, no message.

  Other exceptions propagate unchanged.

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
  except RunFailure as exc:
    report_error(exc, argv)
    raise SystemExit(exc.exit_code) from None
  except Exception as exc:  # pylint: disable=broad-exception-caught
    storage = os_error_in(exc)
    if storage is not None and is_storage_error(storage):
      failure = storage_failure(storage)
      failure.__cause__ = exc  # --verbose shows where the write failed
      report_error(failure, argv)
      raise SystemExit(EXIT_IO_ERROR) from None
    if not isinstance(exc, USER_ERRORS):
      raise  # a bug: its traceback
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
  from rlscale.runner import config_files  # pylint: disable=g-import-not-at-top
  path = _config_argument(argv)
  try:
    remaining = flags.FLAGS(argv)
  except Exception as exc:  # pylint: disable=broad-exception-caught
    # An exception of the config file itself (a syntax error, its get_config raising) as
    # `file:line: ...`, whatever ml_collections and absl wrapped it in.
    located = path and config_files.config_file_error(exc, path.split(":", 1)[0])
    if located:
      raise located from exc
    if path is not None and isinstance(exc, (AttributeError, KeyError)):
      config = config_files.load_config_file(*path.split(":", 1))
      config_files.check_field_paths(config, _override_paths(argv))
    raise
  # ml_collections defers a missing config file to the first use of the config; say it now.
  config_path = config_flags.get_config_filename(flags.FLAGS["config"]).split(":", 1)[0]
  if not os.path.isfile(config_path):
    raise FileNotFoundError(f"config file {config_path!r} not found (--config; paths are relative "
                            f"to the current directory {os.getcwd()!r})")
  # It defers an OSError raised inside get_config the same way (e.g. a file the config reads).
  deferred = _deferred_load_error(flags.FLAGS["config"].value)
  if deferred is not None:
    raise config_files.config_file_error(deferred, config_path) or deferred
  return remaining


def _deferred_load_error(value) -> BaseException | None:
  """The exception ml_collections stored in place of a config it failed to load (its
  `_ErrorConfig` raises it, wrapped, on first use), or None for a loaded config."""
  if type(value).__name__ != "_ErrorConfig":
    return None
  return vars(value).get("_error")
