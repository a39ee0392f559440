"""Command-line entry point: `python -m rlscale.main --config=<file.py>[:arg] --workdir=<dir>`.

Any config field can be overridden, e.g. `--config.rl.prompts_per_step=16`; every field is
described (meaning, units, allowed values) by the comments in experiments/configs/default.py,
which every other config starts from. This module only parses flags; the work is done by
`rlscale.runner.loop.train_and_evaluate`, which Colab imports too.

A config or input error (unknown field, invalid value, missing file) prints one line
`error: <message>` on stderr and exits with status 2; `--verbose` (or RLSCALE_VERBOSE=1) shows the
traceback too (see rlscale.cli).

Exit status: 0 when the run is complete (or was already), 2 for a config or input error, 75
(EX_TEMPFAIL) when Ctrl-C or SIGTERM stopped it at a checkpoint (rerun the command to resume;
a scheduler can requeue it), 130 when Ctrl-C came before the first RL step (nothing to resume),
128 + signum when a second signal stopped it at once.
"""

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from rlscale import cli
from rlscale.runner.config_files import FIELDS_HINT

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
  from rlscale.runner.interrupts import EXIT_INTERRUPTED  # pylint: disable=g-import-not-at-top
  from rlscale.runner.loop import train_and_evaluate  # pylint: disable=g-import-not-at-top
  try:
    summary = train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  except KeyboardInterrupt:
    # Ctrl-C before the RL loop (warm start, first evaluation); the loop itself checkpoints.
    print("interrupted before the first RL checkpoint; rerun the command to start again")
    raise SystemExit(130) from None
  if summary.get("interrupted"):
    # Stopped at a checkpoint: not done, so not status 0 (a scheduler would take it as finished).
    raise SystemExit(EXIT_INTERRUPTED)


def run():
  """Console-script entry point (`rlscale --config=... --workdir=...`)."""
  cli.run_cli(lambda: app.run(_main, flags_parser=cli.parse_config_flags))


if __name__ == "__main__":
  run()
