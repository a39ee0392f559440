"""Command-line entry point of the throughput profile:

  python -m rlscale.throughput --config=<run or sweep file>[:smoke] --prompts_per_step=8,16,32,64
      --out=DIR [--warmup=2] [--repeats=5] [--config.X=...]

Times RL steps at each batch alone on the machine (generation / reward / training, compile apart)
and writes DIR/throughput.json and DIR/throughput.png (rlscale.scaling.throughput). Point
`--config.sft.cache_dir` at a sweep's DIR/sft to reuse its warm start.
"""

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from rlscale import cli
from rlscale.runner.config_files import FIELDS_HINT

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Run config or sweep file (its get_config), optionally `path:arg`; "
    f"override a field with --config.<field>=<value> ({FIELDS_HINT}).", lock_config=True)
_PROMPTS = flags.DEFINE_list("prompts_per_step", "8,16,32,64,128", "Prompts per step to measure.")
_OUT = flags.DEFINE_string("out", None, "Output directory (throughput.json, throughput.png).")
_WARMUP = flags.DEFINE_integer("warmup", 2, "Steps per batch holding the compilations (not timed).")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed steady-state steps per batch.")
flags.DEFINE_bool("verbose", False, "Show the traceback of config and input errors too.")
flags.mark_flags_as_required(["config", "out"])


def _main(argv):
  from rlscale.scaling import throughput  # pylint: disable=g-import-not-at-top
  if len(argv) > 1:
    raise cli.UsageError(f"unexpected arguments {argv[1:]}")
  logging.set_verbosity(logging.WARNING)
  try:
    prompts = [int(p) for p in _PROMPTS.value]
  except ValueError:
    raise ValueError(f"--prompts_per_step must list integers >= 1, got {_PROMPTS.value}") from None
  spec = config_flags.get_config_filename(flags.FLAGS["config"])
  result = throughput.profile(_CONFIG.value, prompts, _OUT.value, warmup=_WARMUP.value,
                              repeats=_REPEATS.value, name=spec)
  fit = result["fits"]
  if fit:
    until = fit["generation"]["bandwidth_bound_until_batch"]
    inside = fit["generation"]["bandwidth_bound_within_measured"]
    print(f"throughput: generation throughput ratio {fit['generation_throughput_ratio']:.2f}x "
          "(largest / smallest batch); " + (
              f"generation bandwidth-bound up to B ~ {round(until)}" if inside else
              "no end of a bandwidth-bound regime inside the batches measured"))
  print(f"throughput: {_OUT.value}/throughput.json, {result['plot']}")


def run():
  cli.run_cli(lambda: app.run(_main, flags_parser=cli.parse_config_flags))


if __name__ == "__main__":
  run()
