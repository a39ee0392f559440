"""Runs `python -m MODULE ARGS...` pinned to a set of CPU cores, the pinning done by the child,
and ending with its parent (Linux: PR_SET_PDEATHSIG, see die_with_parent).

  python -m rlscale.scaling.pinned --cores=0,2 rlscale.main --config=... --workdir=...

A sweep's `--parallel` run processes each get their share of the cores (rlscale.scaling.sweep).
The child pins itself here, first thing, before it imports JAX: XLA:CPU sizes its thread pools
from the process's affinity when it starts, and threads started later inherit it. Pinning from the
parent instead (subprocess's `preexec_fn`) makes subprocess fork the parent, and a sweep's parent
has JAX's threads running by then (it trained the shared warm start), so JAX warns "os.fork() was
called ... JAX is multithreaded, so this will likely lead to a deadlock". Without `preexec_fn`,
subprocess starts the child by vfork/posix_spawn + exec: no fork of a multithreaded parent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import runpy
import signal
import sys
from typing import Sequence

CORES_FLAG = "--cores="
LAUNCHER = "rlscale.scaling.pinned"


def parse_cores(text: str) -> list[int]:
  """"0,2" -> [0, 2]; raises ValueError naming --cores for an empty list or a non-integer."""
  try:
    cores = [int(c) for c in text.split(",")]
  except ValueError:
    raise ValueError(f"--cores={text!r} must be comma-separated CPU ids, e.g. 0,2") from None
  if not cores or min(cores) < 0:
    raise ValueError(f"--cores={text!r} must be comma-separated CPU ids >= 0, e.g. 0,2")
  return cores


def command(argv: Sequence[str], cores: Sequence[int]) -> list[str]:
  """argv of a `[python, "-m", MODULE, *args]` command run pinned to `cores`: the same command
  through this module. Raises ValueError for an argv that does not run a module with -m."""
  if len(argv) < 3 or argv[1] != "-m":
    raise ValueError(f"expected [python, '-m', module, ...], got {list(argv[:3])}")
  return [argv[0], "-m", LAUNCHER, CORES_FLAG + ",".join(str(c) for c in cores), *argv[2:]]


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(signum: int = signal.SIGTERM) -> bool:
  """Asks Linux to send this process `signum` when its parent dies (prctl PR_SET_PDEATHSIG), so
  a run process never outlives its sweep (killed by a test's timeout, an OOM kill, SIGKILL): the
  run gets SIGTERM, checkpoints and exits. Returns False where unavailable (not Linux). Called
  first thing in the child, so the window in which the parent can die unnoticed is its start-up."""
  if not sys.platform.startswith("linux"):
    return False
  libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
  return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0


def main(argv: Sequence[str] | None = None) -> None:
  """Pins this process to --cores, then runs MODULE as __main__ with sys.argv = [MODULE, *args]
  (its exit status is this process's)."""
  argv = list(sys.argv[1:] if argv is None else argv)
  if len(argv) < 2 or not argv[0].startswith(CORES_FLAG):
    raise SystemExit(f"usage: python -m {LAUNCHER} --cores=0,2 MODULE [ARGS...]")
  die_with_parent()
  os.sched_setaffinity(0, parse_cores(argv[0][len(CORES_FLAG):]))
  sys.argv = [argv[1], *argv[2:]]
  runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
  main()
