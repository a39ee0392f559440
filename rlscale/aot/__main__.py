"""Command line: compile a run's steps for TPU slices and print the per-device table.

  python -m rlscale.aot --config=experiments/configs/default.py --topology=v5e:2x4
  python -m rlscale.aot --config=experiments/configs/default.py --topology=v5p:2x2x1,v5e:2x4 \
      --model=qwen3-8b --config.model.dtype=bfloat16 --config.mesh.data=1 --config.mesh.fsdp=-1 \
      --config.rollout.max_prompt_tokens=512 --config.rollout.max_new_tokens=4096 --json=out.json

Flags: --config (a config file, `path[:arg]`, with `--config.<field>=<value>` overrides as
`python -m rlscale.main`), --topology (one or more TPU slices, comma-separated: v5e:2x4,
v5p:2x2x1, v5p:2x2x2, v6e:2x4, v4:2x2x1, ...; or `local`: this process's own devices, e.g.
`JAX_PLATFORMS=cuda python -m rlscale.aot ... --topology=local` on a GPU), --model (a release shape replacing the config's
model: qwen3-0.6b ... qwen3-32b, qwen3-30b-a3b), --layers (compile fewer layers; rows say so),
--steps (only these steps, comma-separated), --hosts (the run's processes on the slice),
--no_eval (skip the held-out evaluation's sampler), --json (write the rows), --verbose
(tracebacks of errors).

Needs libtpu (`pip install "rlscale[tpu]"`, Linux x86-64). Nothing runs on a TPU and no weights
are read. JAX's own platform is the CPU (JAX_PLATFORMS=cpu unless set): the process only
compiles for the slice.

Exit status: 0 when every step fits, 1 when one does not (the table's last lines say which and
what to change), 2 for a config or input error (one line `error: ...` on stderr; libtpu missing
included).
"""

import os
import sys

# Before JAX starts: this process computes nothing, it compiles for compile-only TPU devices;
# a CPU backend keeps libtpu from trying to open a TPU (and printing its warnings).
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# JAX's persistent cache cannot reload an executable of compile-only TPU devices ("PjRtCompiler
# must be constructed with a Client"): it would warn and store megabytes per step for nothing.
os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from rlscale import cli
from rlscale import outputs
from rlscale.runner.config_files import FIELDS_HINT
# pylint: enable=g-import-not-at-top,g-bad-import-order

EXIT_DOES_NOT_FIT = 1

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to an ml_collections config file (optionally `path:arg`); override a "
    f"field with --config.<field>=<value> ({FIELDS_HINT}).", lock_config=True)
_TOPOLOGY = flags.DEFINE_list(
    "topology", None, "TPU slices to compile for, comma-separated, e.g. v5e:2x4,v5p:2x2x1, or "
    "local (this process's devices: JAX_PLATFORMS=cuda on a GPU).")
_MODEL = flags.DEFINE_string(
    "model", None, "A release shape replacing the config's model (qwen3-0.6b, qwen3-1.7b, "
    "qwen3-4b, qwen3-8b, qwen3-14b, qwen3-32b, qwen3-30b-a3b); default: the config's.")
_LAYERS = flags.DEFINE_integer("layers", None, "Compile this many decoder layers (default: all).")
_STEPS = flags.DEFINE_list("steps", None, "Compile only these steps (update, sample, "
                           "eval_sample, eval_greedy, ref_logp, old_logp, values).")
_HOSTS = flags.DEFINE_integer(
    "hosts", None, "Processes of the run on the slice (default: as libtpu describes it, e.g. "
    "v5e:2x4 as 2 hosts of 4 chips; a v5e-8 VM is 1): how the sampler's prompts are laid out.")
_NO_EVAL = flags.DEFINE_bool("no_eval", False, "Skip the held-out evaluation's sampler calls.")
_JSON = flags.DEFINE_string("json", None, "Write the rows (one per step x topology) to this "
                            "JSON file.")
flags.DEFINE_bool("verbose", False, "Show the traceback of config and input errors too "
                  f"(also: {cli.VERBOSE_ENV}=1).")
flags.mark_flags_as_required(["config", "topology"])


def _progress(line: str) -> None:
  """A progress line on stderr (the table goes to stdout)."""
  print(line, file=sys.stderr, flush=True)


def _main(argv):
  """Compiles for each --topology, prints its table, writes --json; exits 1 if a step does
  not fit."""
  if len(argv) > 1:
    raise cli.UsageError(f"unexpected arguments {argv[1:]}; flags are --config=<file.py>, "
                         "--topology=<slice>[,<slice>...], --config.<field>=<value>, --model, "
                         "--layers, --steps, --no_eval, --json")
  logging.set_verbosity(logging.WARNING)
  # pylint: disable=g-import-not-at-top
  from rlscale.aot.run import compile_run
  from rlscale.aot.topology import TopologyUnavailable
  # pylint: enable=g-import-not-at-top
  rows, fits = [], True
  for name in _TOPOLOGY.value:
    try:
      compiled = compile_run(_CONFIG.value, name, shape=_MODEL.value, layers=_LAYERS.value,
                             eval_steps=not _NO_EVAL.value, only=_STEPS.value,
                             processes=_HOSTS.value,
                             progress=_progress)
    except TopologyUnavailable as e:
      raise cli.UsageError(str(e)) from e
    print(compiled.table(), flush=True)
    print(flush=True)
    rows.extend(compiled.rows())
    fits = fits and compiled.fits
  if _JSON.value:
    outputs.write_json(_JSON.value, {"command": " ".join(["python -m rlscale.aot"] + sys.argv[1:]),
                                     "rows": rows})
    print(f"wrote {len(rows)} rows to {_JSON.value}")
  if not fits:
    raise SystemExit(EXIT_DOES_NOT_FIT)


def run():
  """Entry point: `python -m rlscale.aot` (errors as one line, `rlscale.cli.run_cli`)."""
  cli.run_cli(lambda: app.run(_main, flags_parser=cli.parse_config_flags))


if __name__ == "__main__":
  run()
