"""Command-line entry point of the study's report:

  python -m rlscale.report DIR [--throughput=FILE_OR_DIR] [--target_metric=eval/greedy_accuracy]
      [--target=0.6] [--allow_weak_target] [--smooth=3] [--out=DIR]

Reads every run directory under DIR/runs (finished or not) and a throughput profile
(DIR/throughput/throughput.json or DIR/throughput.json when present, or --throughput), and writes
report.md, report.json, CSV tables and PNG figures into --out (default DIR). The work is done by
`rlscale.scaling.report` and `rlscale.scaling.report_writer`.
"""

import json
import os

from absl import app
from absl import flags
from absl import logging

from rlscale import cli

_THROUGHPUT = flags.DEFINE_string("throughput", None, "throughput.json (or its directory) from "
                                  "`python -m rlscale.throughput`; default: one inside DIR.")
_METRIC = flags.DEFINE_string("target_metric", None, "Held-out metric of the target (default the "
                              "sweep file's, else eval/greedy_accuracy).")
_TARGET = flags.DEFINE_float("target", None, "Target value; default the one the sweep file states "
                             "(get_target, recorded in sweep.json), else one proposed from the runs.")
_ALLOW_WEAK = flags.DEFINE_bool("allow_weak_target", False, "Report a target less than 3 standard "
                                "errors above the warm start (printed in bold as weak).")
_SMOOTH = flags.DEFINE_integer("smooth", 3, "Running-mean window in evaluations.")
_OUT = flags.DEFINE_string("out", None, "Output directory (default: DIR).")
flags.DEFINE_bool("verbose", False, "Show the traceback of input errors too.")


def find_profile(sweep_dir: str, given: str | None) -> dict | None:
  """The throughput profile: `given` (a file or a directory holding throughput.json), else
  DIR/throughput/throughput.json or DIR/throughput.json, else None. Raises FileNotFoundError for a
  given path without one."""
  candidates = ([given, os.path.join(given, "throughput.json")] if given else
                [os.path.join(sweep_dir, "throughput", "throughput.json"),
                 os.path.join(sweep_dir, "throughput.json")])
  for path in candidates:
    if os.path.isfile(path):
      with open(path, encoding="utf-8") as f:
        return json.load(f)
  if given:
    raise FileNotFoundError(f"--throughput={given!r}: no throughput.json there")
  return None


def _main(argv):
  from rlscale.scaling import report as report_lib  # pylint: disable=g-import-not-at-top
  from rlscale.scaling import report_writer  # pylint: disable=g-import-not-at-top
  if len(argv) != 2:
    raise cli.UsageError("usage: python -m rlscale.report DIR [--throughput=...] "
                         "[--target_metric=...] [--target=...]")
  sweep_dir = argv[1]
  logging.set_verbosity(logging.WARNING)
  if not os.path.exists(sweep_dir):
    raise FileNotFoundError(f"sweep directory {sweep_dir!r} not found")
  if not os.path.isdir(sweep_dir):
    raise NotADirectoryError(f"sweep directory {sweep_dir!r} is a file; pass the sweep's --workdir")
  report = report_lib.build_report(sweep_dir, profile=find_profile(sweep_dir, _THROUGHPUT.value),
                                   metric=_METRIC.value, target=_TARGET.value, window=_SMOOTH.value,
                                   allow_weak_target=_ALLOW_WEAK.value)
  paths = report_writer.write_report(report, sweep_dir, _OUT.value)
  t = report["target"]
  device = f" (decisions for {report['throughput_device']})" if report.get("throughput_device") else ""
  print(f"report: {len(report['runs'])} runs, target {t['metric']} >= {t['value']:g}{device}; "
        f"{paths['md']}, {paths['json']}, {len(paths['figures'])} figures")


def _parse_flags(argv):
  return flags.FLAGS(argv)


def run():
  cli.run_cli(lambda: app.run(_main, flags_parser=_parse_flags))


if __name__ == "__main__":
  run()
