"""Command-line entry point of the throughput profile:

  python -m rlscale.throughput --config=<run or sweep file>[:smoke] --prompts_per_step=8,16,32,64
      --out=DIR [--warmup=2] [--repeats=5] [--config.X=...]

Times RL steps at each batch alone on the machine (generation / reward / training, compile apart)
and writes DIR/throughput.json and DIR/throughput.png (rlscale.scaling.throughput). Point
`--config.sft.cache_dir` at a sweep's DIR/sft to reuse its warm start.

With --topology (a TPU slice, e.g. v5p:2x2x2; needs libtpu, `pip install "rlscale[tpu]"`) nothing
runs: the same files hold a cost-model estimate instead (`rlscale.aot.profile`: the run's
loop-free programs compiled for the slice on this CPU, a roofline per program; no host or
scheduling overheads, not a measurement); --model, --microbatch_rows and --hosts shape it:

  python -m rlscale.throughput --config=experiments/configs/default.py --topology=v5p:2x2x2 \
      --model=qwen3-0.6b --prompts_per_step=8,128 --config.mesh.data=1 --config.mesh.fsdp=-1 \
      --config.model.dtype=bfloat16 --config.rollout.max_new_tokens=1024 --out=DIR
"""

import os
import sys

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
_TOPOLOGY = flags.DEFINE_string(
    "topology", None, "A TPU slice (<chip>:<shape>, chip v4, v5e, v5p or v6e, e.g. v5p:2x2x2): "
    "estimate the profile from the TPU compiler's cost model instead of timing (no --warmup, "
    "--repeats).")
_MODEL = flags.DEFINE_string("model", None, "With --topology: a release shape replacing the "
                             "config's model (qwen3-0.6b, ..., qwen3-8b; rlscale.aot.models).")
_MICROBATCH_ROWS = flags.DEFINE_integer(
    "microbatch_rows", None, "With --topology: rows of one update microbatch at every batch "
    "(sets rl.microbatches per batch); default the config's rl.microbatches.")
_HOSTS = flags.DEFINE_integer("hosts", None, "With --topology: the run's processes on the slice "
                              "(default libtpu's hosts), for the prompts' layout.")
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
  if _TOPOLOGY.value is not None:
    result = _estimate(prompts, spec)
  else:
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


def _estimate(prompts, spec):
  """The cost-model profile for --topology, written to --out; prints its label and the batches
  that do not fit."""
  import jax  # pylint: disable=g-import-not-at-top
  # This process only compiles for the slice: JAX's own platform is the CPU, and its persistent
  # cache cannot reload compile-only TPU executables.
  jax.config.update("jax_platforms", "cpu")
  jax.config.update("jax_enable_compilation_cache", False)
  from rlscale.aot import profile  # pylint: disable=g-import-not-at-top
  from rlscale.aot.topology import TopologyUnavailable  # pylint: disable=g-import-not-at-top
  profile.check_topology_name(_TOPOLOGY.value)
  try:
    result = profile.estimate_profile(
        _CONFIG.value, _TOPOLOGY.value, prompts, shape=_MODEL.value,
        microbatch_rows=_MICROBATCH_ROWS.value, processes=_HOSTS.value, name=spec,
        log=lambda line: print(line, file=sys.stderr, flush=True))
  except TopologyUnavailable as e:
    raise cli.UsageError(str(e)) from e
  os.makedirs(_OUT.value, exist_ok=True)
  result = profile.write_profile(result, _OUT.value)
  print(f"throughput: {result['topology']} ({result['chips']} chips of TPU {result['chip']}), "
        f"{result['model']}: {result['label']}")
  for row in result["batches"]:
    print(f"throughput: B={row['batch_size']}: {row['seconds']['step']['median']:.3g} s/step, "
          f"generation {row['generation_share']:.0%} of it, {row['responses_per_s']:.3g} "
          "responses/s (estimate)")
  for row in result["not_fitting"]:
    print(f"throughput: B={row['batch_size']} does not fit: {', '.join(row['programs'])}")
  return result


def run():
  cli.run_cli(lambda: app.run(_main, flags_parser=cli.parse_config_flags))


if __name__ == "__main__":
  run()
