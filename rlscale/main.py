"""Command-line entry point: `python -m rlscale.main --config=<file.py>[:arg] --workdir=<dir>`.

Any config field can be overridden, e.g. `--config.rl.prompts_per_step=16`; every field is
described (meaning, units, allowed values) by the comments in experiments/configs/default.py,
which every other config starts from. This module only parses flags; the work is done by
`rlscale.runner.loop.train_and_evaluate`, which Colab imports too.

A config or input error (unknown field, invalid value, missing file) prints one line
`error: <message>` on stderr and exits with status 2; `--verbose` (or RLSCALE_VERBOSE=1) shows the
traceback too (see rlscale.cli).

Exit status: 0 when the run is complete (or was already), 2 for a config or input error (a
config file's own error as `file:line: ...`), 3 when training diverged (the last good checkpoint
is kept), 74 (EX_IOERR) when the storage refused a write (a full disk, a file-size limit, a
quota, an I/O error; one line names the file and the checkpoint a rerun resumes from), 75
(EX_TEMPFAIL) when Ctrl-C or SIGTERM stopped it at a checkpoint, or before the RL loop of a run
that has one (rerun the command to resume; a scheduler can requeue it), 130 (128 + signum for
SIGTERM: 143) when a signal came before the first checkpoint (nothing to resume), 128 + signum
when a second signal stopped it at once. Signals are honoured in every phase whatever the
inherited disposition (`rlscale.runner.interrupts`).
"""

import os
import signal

# Before the heavy imports (absl, then JAX with the run): a signal from the very start is recorded
# and acted on at the next phase boundary, not raised inside an import (rlscale.runner.interrupts).
from rlscale.runner import interrupts  # pylint: disable=g-bad-import-order

if __name__ == "__main__":
  interrupts.install_early()

# pylint: disable=g-import-not-at-top,g-bad-import-order
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from rlscale import cli
from rlscale.runner.config_files import FIELDS_HINT
# pylint: enable=g-import-not-at-top,g-bad-import-order

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to an ml_collections config file (optionally `path:arg`); override a "
    f"field with --config.<field>=<value> ({FIELDS_HINT}).", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory: metrics, checkpoints, plots.")
flags.DEFINE_bool("verbose", False, "Show the traceback of config and input errors too "
                  f"(also: {cli.VERBOSE_ENV}=1).")
flags.mark_flags_as_required(["config", "workdir"])


def _main(argv):
  if len(argv) > 1:
    raise cli.UsageError(f"unexpected arguments {argv[1:]}; flags are --config=<file.py>[:smoke], "
                         "--workdir=<dir> and --config.<field>=<value>")
  # orbax logs every checkpoint step at INFO; keep the terminal for progress and results.
  logging.set_verbosity(logging.WARNING)
  from rlscale.runner.loop import train_and_evaluate  # pylint: disable=g-import-not-at-top
  workdir = _WORKDIR.value
  # Honoured from here on, whatever the inherited disposition (a background job ignores SIGINT);
  # the RL loop's own StopFlag takes over while it runs. A request recorded earlier (during the
  # imports, by install_early) is acted on now: the imports are the first phase boundary.
  with interrupts.StopFlag(message=interrupts.early_acknowledgement, interrupt=True) as stop:
    try:
      interrupts.raise_if_requested()
      summary = train_and_evaluate(_CONFIG.value, workdir)
      # The exit status is decided: a signal from here to the process's end exits with it.
      _flush()
      interrupts.exit_on_signal(
          interrupts.EXIT_INTERRUPTED if summary.get("interrupted") else 0)
    except KeyboardInterrupt:
      raise SystemExit(_stopped_early(workdir, stop.signum)) from None
    except Exception as exc:  # pylint: disable=broad-exception-caught
      # The storage refused a write (a library may say so in its own exception type): one line
      # naming the file and the checkpoint a rerun resumes from.
      error = cli.os_error_in(exc, under=workdir)
      if error is None or not cli.is_storage_error(error):
        raise
      raise cli.storage_failure(error, where=workdir,
                                checkpoint=_last_checkpoint(workdir)) from exc
  if summary.get("interrupted"):
    # Stopped at a checkpoint: not done, so not status 0 (a scheduler would take it as finished).
    raise SystemExit(interrupts.EXIT_INTERRUPTED)


def _last_checkpoint(workdir: str) -> tuple[int | None, str]:
  """(step of the workdir's last complete checkpoint or None, its checkpoint folder)."""
  # pylint: disable=g-import-not-at-top
  from rlscale.runner.checkpoints import latest_step_in
  from rlscale.runner.run_dir import CHECKPOINTS_DIR
  # pylint: enable=g-import-not-at-top
  directory = os.path.join(os.path.abspath(workdir), CHECKPOINTS_DIR)
  return latest_step_in(directory), directory


def _stopped_early(workdir: str, signum: int | None) -> int:
  """Prints what a signal before the RL loop left and returns the exit status: 75 when the
  workdir holds a checkpoint (a resumed run stopped during its setup: rerunning resumes), else
  128 + signum (130 for Ctrl-C: nothing to resume)."""
  step, directory = _last_checkpoint(workdir)
  if step is not None:
    print(f"interrupted before the RL loop; the last checkpoint is step {step} in {directory}; "
          "rerun the command to resume")
    return interrupts.EXIT_INTERRUPTED
  print("interrupted before the first RL checkpoint; rerun the command to start again")
  return 128 + int(signum or signal.SIGINT)


def _flush() -> None:
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):
      pass


def run():
  """Console-script entry point (`rlscale --config=... --workdir=...`)."""
  interrupts.install_early()  # a no-op the second time (`python -m` installed it at import)
  try:
    cli.run_cli(lambda: app.run(_main, flags_parser=cli.parse_config_flags))
  except KeyboardInterrupt:
    # Raised outside a phase that reports it (e.g. a signal while flags were parsed): one line.
    print("interrupted before the first RL checkpoint; rerun the command to start again")
    status = 128 + int(interrupts.pending() or signal.SIGINT)
    _flush()
    interrupts.exit_on_signal(status)
    raise SystemExit(status) from None
  except SystemExit as exc:
    # The status is decided; a signal during the interpreter's shutdown (atexit callbacks such as
    # JAX's backend clean-up) exits with it, without "Exception ignored in atexit callback".
    _flush()
    interrupts.exit_on_signal(_status_of(exc))
    raise
  _flush()
  interrupts.exit_on_signal(0)


def _status_of(exc: SystemExit) -> int:
  if exc.code is None:
    return 0
  return exc.code if isinstance(exc.code, int) else 1


if __name__ == "__main__":
  run()
