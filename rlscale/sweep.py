"""Command-line entry point of a sweep:

  python -m rlscale.sweep --config=experiments/sweeps/batch_lr.py[:smoke] --workdir=DIR
      [--parallel=N] [--list] [--shard=i/n] [--validate] [--config.X=...]

`--config` is a sweep file (`get_config(arg)` base config, `get_sweep(arg)` runs); `--config.X=...`
overrides the base for every run. Runs go to DIR/runs/<name>, their shared warm start to DIR/sft,
statuses and errors to DIR/sweep.json (a run that fails before writing results leaves no
DIR/runs/<name>). `--list` prints one shell command per run (for a job-array
scheduler) and runs nothing; `--shard=i/n` runs every n-th run from i; `--validate` (after the
sweep) runs the runs its report's decisions compare one at a time, alone, into DIR/validation. The exit status is the
number of failed runs (2 with one `error:` line for bad input); a run whose workdir another
process holds (another sweep, the run started by hand) is not started and counts as "running
elsewhere", not failed. The work is done by
`rlscale.scaling.sweep.run_sweep`, which the notebooks call too.
"""

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from rlscale import cli
from rlscale.runner.config_files import FIELDS_HINT

# Parsed for its checks (the file exists and defines get_config, every --config.X names a field of
# the right type); rlscale.scaling.sweep.run_sweep loads the config again with the overrides.
config_flags.DEFINE_config_file(
    "config", None, "Sweep file (get_config + get_sweep), optionally `path:arg`; "
    f"--config.<field>=<value> overrides the base config of every run ({FIELDS_HINT}).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Sweep directory: runs/, sft/, sweep.json.")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Runs at a time (separate processes when > 1, "
                                 "each pinned to its share of the cores).")
_LIST = flags.DEFINE_bool("list", False, "Print one shell command per run and exit.")
_SHARD = flags.DEFINE_string("shard", None, "i/n: run every n-th run starting at i (0-based).")
_VALIDATE = flags.DEFINE_bool("validate", False, "After the sweep: run the report's decisions' "
                              "runs one at a time, alone, into DIR/validation (their own clocks "
                              "check the predicted time ratios); resumable.")
flags.DEFINE_bool("verbose", False, "Show the traceback of config and input errors too.")
flags.mark_flags_as_required(["config", "workdir"])


def _main(argv):
  from rlscale.scaling import hyper  # pylint: disable=g-import-not-at-top
  from rlscale.scaling import sweep  # pylint: disable=g-import-not-at-top
  from rlscale.scaling import sweep_plan  # pylint: disable=g-import-not-at-top
  if len(argv) > 1:
    raise cli.UsageError(f"unexpected arguments {argv[1:]}")
  logging.set_verbosity(logging.WARNING)
  shard = hyper.parse_shard(_SHARD.value) if _SHARD.value is not None else None
  spec = config_flags.get_config_filename(flags.FLAGS["config"])
  overrides = config_flags.get_override_values(flags.FLAGS["config"])
  if _LIST.value:
    _, runs, spec = sweep_plan.plan_sweep(spec, _WORKDIR.value, overrides=overrides, shard=shard)
    for run in runs:
      print(sweep_plan.shell_command(sweep_plan.run_command(run, spec, _WORKDIR.value, overrides)))
    return 0
  if _VALIDATE.value:
    if shard is not None or _PARALLEL.value != 1:
      raise cli.UsageError("--validate runs one run at a time on the whole sweep: drop --shard "
                           "and --parallel")
    summary = sweep.run_validation(spec, _WORKDIR.value, overrides=overrides)
  else:
    summary = sweep.run_sweep(spec, _WORKDIR.value, overrides=overrides, parallel=_PARALLEL.value,
                              shard=shard)
  failed = summary["failed"]
  if summary["interrupted_by"] is not None:
    stopped = sum(s == "interrupted" for s in summary["statuses"].values())
    print(f"sweep: interrupted ({stopped} run(s) stopped at a checkpoint, {failed} failed); "
          f"statuses in {summary['record']}; rerun the same command to resume")
    raise SystemExit(128 + int(summary["interrupted_by"]))
  elsewhere = summary.get("running_elsewhere", 0)
  # Not failed, not done: another process (another sweep, a run started by hand) holds them.
  held = f", {elsewhere} running elsewhere (not started here)" if elsewhere else ""
  # An outcome of the run's settings (a learning rate too large), not a failure of the sweep.
  diverged = sum(s == sweep.DIVERGED for s in summary["statuses"].values())
  held += f", {diverged} diverged (stopped at a non-finite loss)" if diverged else ""
  print(f"sweep: {len(summary['runs'])} runs, {failed} failed{held}; statuses in "
        f"{summary['record']}")
  raise SystemExit(min(failed, sweep.MAX_EXIT_STATUS))


def run():
  cli.run_cli(lambda: app.run(_main, flags_parser=cli.parse_config_flags))


if __name__ == "__main__":
  run()
