"""Command-line entry point: `python -m rlscale.main --config=<file.py>[:arg] --workdir=<dir>`.

Any config field can be overridden, e.g. `--config.rl.prompts_per_step=16`. This module only parses
flags; the work is done by `rlscale.runner.loop.train_and_evaluate`, which Colab imports too.
"""

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to an ml_collections config file (optionally `path:arg`).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory: metrics, checkpoints, plots.")
flags.mark_flags_as_required(["config", "workdir"])


def _main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
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
  app.run(_main)


if __name__ == "__main__":
  run()
