"""Command-line entry point of a sweep:

  python -m rlscale.sweep --config=experiments/sweeps/batch_lr.py[:smoke] --workdir=DIR
      [--parallel=N] [--list] [--shard=i/n] [--config.X=...]

`--config` is a sweep file (`get_config(arg)` base config, `get_sweep(arg)` runs); `--config.X=...`
overrides the base for every run. Runs go to DIR/runs/<name>, their shared warm start to DIR/sft,
statuses and errors to DIR/sweep.json (a run that fails before writing results leaves no
DIR/runs/<name>). `--list` prints one shell command per run (for a job-array
scheduler) and runs nothing; `--shard=i/n` runs every n-th run from i. The exit status is the
number of failed runs (2 with one `error:` line for bad input). The work is done by
`rlscale.scaling.sweep`, which a notebook can import too.
"""

import os

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from rlscale import cli
from rlscale.runner.config_files import FIELDS_HINT

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Sweep file (get_config + get_sweep), optionally `path:arg`; "
    f"--config.<field>=<value> overrides the base config of every run ({FIELDS_HINT}).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Sweep directory: runs/, sft/, sweep.json.")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Runs at a time (separate processes when > 1, "
                                 "each pinned to its share of the cores).")
_LIST = flags.DEFINE_bool("list", False, "Print one shell command per run and exit.")
_SHARD = flags.DEFINE_string("shard", None, "i/n: run every n-th run starting at i (0-based).")
flags.DEFINE_bool("verbose", False, "Show the traceback of config and input errors too.")
flags.mark_flags_as_required(["config", "workdir"])


def _main(argv):
  from rlscale.scaling import hyper  # pylint: disable=g-import-not-at-top
  from rlscale.scaling import sweep  # pylint: disable=g-import-not-at-top
  if len(argv) > 1:
    raise cli.UsageError(f"unexpected arguments {argv[1:]}")
  if _PARALLEL.value < 1:
    raise ValueError(f"--parallel must be >= 1, got {_PARALLEL.value}")
  if os.path.exists(_WORKDIR.value) and not os.path.isdir(_WORKDIR.value):
    raise NotADirectoryError(f"--workdir={_WORKDIR.value!r} is a file; it must be a directory "
                             "(created when missing)")
  logging.set_verbosity(logging.WARNING)
  # Runs of a sweep compile the same programs: share compilations through a persistent cache
  # (before JAX is imported; the run processes inherit it).
  os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                        os.path.abspath(os.path.join(_WORKDIR.value, "jax_cache")))
  shard = hyper.parse_shard(_SHARD.value) if _SHARD.value is not None else None
  spec = config_flags.get_config_filename(flags.FLAGS["config"])
  cli_overrides = config_flags.get_override_values(flags.FLAGS["config"])
  path, arg = sweep.split_config_arg(spec)
  sweep.load_sweep_module(path)  # a missing file or function is reported before the config loads
  workdir = _WORKDIR.value
  runs = sweep.plan(_CONFIG.value, sweep.get_sweep(path, arg), workdir)
  if shard is not None:
    runs = hyper.shard(runs, *shard)
  if _LIST.value:
    for run in runs:
      print(sweep.shell_command(sweep.run_command(run, spec, workdir, cli_overrides)))
    return 0
  base = _CONFIG.value
  meta = {"sweep_file": path, "arg": arg, "workdir": workdir, "cli_overrides": cli_overrides,
          "base_learning_rate": base.optim.learning_rate,
          "reference_batch": base.optim.reference_batch, "shard": shard}
  record = sweep.execute(runs, workdir, parallel=_PARALLEL.value, sweep_spec=spec,
                         cli_overrides=cli_overrides, meta=meta, shard=shard)
  failed = record.failed()
  print(f"sweep: {len(runs)} runs, {failed} failed; statuses in {record.path}")
  raise SystemExit(min(failed, sweep.MAX_EXIT_STATUS))


def run():
  cli.run_cli(lambda: app.run(_main, flags_parser=cli.parse_config_flags))


if __name__ == "__main__":
  run()
