"""The verifier's worker process: sympy comparisons under a hard per-call time limit.

A runaway computation (a deep `evalf`, a slow `simplify` in a native scorer) must not hang the
training loop, and Python cannot interrupt C-level work in a thread. So every check that needs
sympy or a native reasoning-gym scorer runs in one long-lived child process that speaks JSON
lines over pipes. The parent waits at most `timeout_s` for each answer; on timeout it kills the
child (SIGKILL) and starts a fresh one for the next call.

The child is a fresh interpreter (not a fork), so it is safe to start from a process that has
initialised JAX, and its startup (importing sympy, ~0.5 s) does not count against the limit.

Sandbox (defence in depth: no answer text is evaluated as code anywhere, see
`rlscale.tasks.native`; this only limits the damage if that ever fails). The child runs as
`python -I` (no PYTHON* variables, no user site, no working directory on sys.path) with a
cleared environment (PATH=/usr/bin:/bin, HOME and TMPDIR set to its working directory, one
BLAS/OpenMP thread), in a fresh empty temporary directory that the parent removes when the child
ends, and sets for itself, before reading any request, limits that need no privileges:
  RLIMIT_AS 2 GiB (memory), RLIMIT_FSIZE 0 (no byte can be written to a file),
  RLIMIT_CORE 0 (no core dumps), RLIMIT_NOFILE 64 (few descriptors, so few sockets or files),
  RLIMIT_NPROC 0 (no fork and no new thread, for an unprivileged user).
What it cannot stop: creating and deleting files and directories the user may touch (an empty
file needs no bytes; relative paths land in the temporary directory, absolute ones do not);
reading any file the user may read; network access (socket, connect, send) - that needs network
namespaces or seccomp; `exec` of another program (RLIMIT_NPROC only stops fork); and, when the
parent runs as root, RLIMIT_NPROC at all (the kernel does not enforce it for root), so training
should run as an unprivileged user.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Optional

MEMORY_LIMIT_BYTES = 2 << 30
OPEN_FILES_LIMIT = 64
STARTUP_TIMEOUT_S = 60.0
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# `-I` leaves the working directory and PYTHONPATH off sys.path: put this very package first.
_BOOTSTRAP = ("import sys; sys.path.insert(0, {root!r}); "
              "from rlscale.tasks import worker; worker.main()")


def child_environment(workdir: str) -> dict[str, str]:
  """The child's whole environment: nothing inherited (no credentials, proxies or library
  paths reach it), one BLAS/OpenMP thread (RLIMIT_NPROC 0 forbids starting threads)."""
  threads = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
  return {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LC_ALL": "C.UTF-8",
          **threads}


class WorkerClient:
  """Parent side: one child process, restarted after a timeout or crash. Thread-safe."""

  def __init__(self):
    self._proc: Optional[subprocess.Popen] = None
    self._buffer = b""
    self._lock = threading.Lock()
    self._preloads: list[dict[str, Any]] = []
    self._workdir: Optional[str] = None
    self._last_id = 0
    self.restarts = 0

  @property
  def workdir(self) -> Optional[str]:
    """The running child's (empty at start) working directory, or None when none runs."""
    return self._workdir

  def _start(self) -> None:
    self._workdir = tempfile.mkdtemp(prefix="rlscale-worker-")
    self._proc = subprocess.Popen(
        [sys.executable, "-I", "-u", "-c", _BOOTSTRAP.format(root=_PACKAGE_ROOT)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=child_environment(self._workdir), close_fds=True, cwd=self._workdir)
    self._buffer = b""
    ready = self._read_line(time.monotonic() + STARTUP_TIMEOUT_S)
    if ready is None or json.loads(ready).get("ready") is not True:
      self._kill()
      raise RuntimeError("verifier worker did not start")
    for request in self._preloads:
      if self._exchange(request, STARTUP_TIMEOUT_S) is None:
        self._kill()
        raise RuntimeError("verifier worker preload failed")

  def _exchange(self, request: dict[str, Any], timeout_s: float) -> Optional[dict[str, Any]]:
    """Sends `request` with a fresh id and returns the child's reply, or None at the deadline or
    on EOF.

    Raises:
      ValueError: the reply is not a JSON object carrying the request's id. A library that
        printed into the reply channel, or a reply left over from an earlier request, would
        otherwise pair every later answer with another answer's verdict: the caller kills the
        child instead.
    """
    self._last_id += 1
    self._proc.stdin.write(json.dumps({**request, "id": self._last_id}).encode() + b"\n")
    self._proc.stdin.flush()
    line = self._read_line(time.monotonic() + timeout_s)
    if line is None:
      return None
    reply = json.loads(line)
    if not isinstance(reply, dict) or reply.get("id") != self._last_id:
      raise ValueError(f"worker reply out of step: {line[:80]!r}")
    return reply

  def preload(self, request: dict[str, Any]) -> None:
    """Registers a setup request (e.g. importing reasoning-gym) run after every (re)start.

    Setup is slow (seconds) and must not count against the per-call limit of `call`.

    Raises:
      RuntimeError: the worker cannot start or the setup fails.
    """
    with self._lock:
      if request not in self._preloads:
        self._preloads.append(request)
        if self._proc is not None and self._proc.poll() is None:
          try:
            reply = self._exchange(request, STARTUP_TIMEOUT_S)
          except ValueError as e:
            reply = {"error": str(e)}
          if reply is None or "error" in reply:
            self._preloads.remove(request)
            self._kill()
            raise RuntimeError(f"verifier worker preload failed: {reply!r}")

  def _kill(self) -> None:
    if self._proc is not None:
      self._proc.kill()
      self._proc.wait()
      for pipe in (self._proc.stdin, self._proc.stdout):
        pipe.close()
      self._proc = None
    if self._workdir is not None:
      shutil.rmtree(self._workdir, ignore_errors=True)
      self._workdir = None

  def _read_line(self, deadline: float) -> Optional[bytes]:
    """One newline-terminated line from the child, or None at the deadline or on EOF."""
    fd = self._proc.stdout.fileno()
    while b"\n" not in self._buffer:
      remaining = deadline - time.monotonic()
      if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
        return None
      chunk = os.read(fd, 1 << 16)
      if not chunk:
        return None
      self._buffer += chunk
    line, self._buffer = self._buffer.split(b"\n", 1)
    return line

  def call(self, request: dict[str, Any], timeout_s: float) -> tuple[Optional[dict], str]:
    """Sends one request; returns (response, "") or (None, reason) on timeout or crash.

    Args:
      request: JSON-serialisable dict with an "op" ("compare" or "native").
      timeout_s: hard limit in seconds for this call (worker startup not included).

    Never raises: a worker that cannot start or dies is reported in the reason.
    """
    with self._lock:
      try:
        if self._proc is None or self._proc.poll() is not None:
          self._kill()
          self._start()
        reply = self._exchange(request, timeout_s)
        if reply is None:
          crashed = self._proc.poll() is not None
          self._kill()
          self.restarts += 1
          return None, "verifier worker crashed" if crashed else f"timeout after {timeout_s:g} s"
        return reply, ""
      except (OSError, RuntimeError, ValueError) as e:  # incl. a garbled or out-of-step reply
        if self._proc is not None:
          self.restarts += 1
        self._kill()
        return None, f"verifier worker failed ({type(e).__name__})"

  def close(self) -> None:
    """Stops the child process (it is also killed when the parent exits)."""
    with self._lock:
      self._kill()


_CLIENT: Optional[WorkerClient] = None
_CLIENT_LOCK = threading.Lock()


def client() -> WorkerClient:
  """The process-wide worker client (created on first use; its child is stopped and its
  directory removed when this process exits normally)."""
  global _CLIENT
  with _CLIENT_LOCK:
    if _CLIENT is None:
      _CLIENT = WorkerClient()
      atexit.register(_CLIENT.close)
    return _CLIENT


# ----------------------------------------------------------------------------- child side


def limit_resources() -> None:
  """Child side: the unprivileged resource limits of the module docstring, soft and hard (so the
  child cannot raise them again). A limit already lower is kept."""
  import resource  # pylint: disable=g-import-not-at-top (POSIX only; child side only)
  for limit, value in ((resource.RLIMIT_AS, MEMORY_LIMIT_BYTES), (resource.RLIMIT_FSIZE, 0),
                       (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, OPEN_FILES_LIMIT),
                       (resource.RLIMIT_NPROC, 0)):
    _, hard = resource.getrlimit(limit)
    if hard != resource.RLIM_INFINITY and hard < value:
      value = hard
    try:
      resource.setrlimit(limit, (value, value))
    except (ValueError, OSError):
      pass  # e.g. a platform without this limit


_NATIVE_DATASETS: dict[str, Any] = {}


def _native_dataset(request: dict[str, Any]) -> Any:
  """The generator's dataset (one per name and kwargs), for its own `score_answer`."""
  import reasoning_gym  # pylint: disable=g-import-not-at-top (only when a native scorer is used)
  key = json.dumps([request["name"], request["kwargs"]], sort_keys=True)
  if key not in _NATIVE_DATASETS:
    _NATIVE_DATASETS[key] = reasoning_gym.create_dataset(
        request["name"], size=1, seed=0, **request["kwargs"])
  return _NATIVE_DATASETS[key]


def _native_score(request: dict[str, Any]) -> dict[str, Any]:
  """`native.score_native` of the request's answer: {"reward": float (NaN and infinities
  included, as JSON NaN / Infinity) or None, and "refused": reason for text outside the task's
  grammar}."""
  from rlscale.tasks import native  # pylint: disable=g-import-not-at-top
  name = request["name"]
  native.check_native_scorer(name)  # again on this side: never build a refused generator
  dataset = _native_dataset(request) if native.needs_dataset(name) else None
  return native.score_native(name, request["answer"], request["entry"], dataset)


def _native_setup(request: dict[str, Any]) -> dict[str, Any]:
  """Imports (and builds) what a native scorer needs, outside any per-call time limit."""
  from rlscale.tasks import native  # pylint: disable=g-import-not-at-top
  native.check_native_scorer(request["name"])
  if native.needs_dataset(request["name"]):
    _native_dataset(request)
  return {"ready": True}


def _sandbox_report() -> dict[str, Any]:
  """What the child runs under (for tests): working directory and its entries, environment,
  isolated mode, and soft limits by name (-1 = unlimited)."""
  import resource  # pylint: disable=g-import-not-at-top
  names = ("RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_CORE", "RLIMIT_NOFILE", "RLIMIT_NPROC")
  return {"cwd": os.getcwd(), "entries": sorted(os.listdir(".")), "env": dict(os.environ),
          "isolated": bool(sys.flags.isolated),
          "limits": {n: resource.getrlimit(getattr(resource, n))[0] for n in names}}


def _handle(request: dict[str, Any]) -> dict[str, Any]:
  from rlscale.tasks import equivalence  # pylint: disable=g-import-not-at-top
  if request.get("op") == "compare":
    equal, reason = equivalence.compare_answers(
        request["answer"], request["reference"], rel_tol=request["rel_tol"],
        percent=request["percent"])
    return {"equal": equal, "reason": reason}
  if request.get("op") == "native":
    return _native_score(request)
  if request.get("op") == "sleep":  # only for tests of the parent's time limit
    time.sleep(float(request["seconds"]))
    return {"slept": True}
  if request.get("op") == "native_setup":
    return _native_setup(request)
  if request.get("op") == "sandbox":
    return _sandbox_report()
  return {"error": f"unknown op {request.get('op')!r}"}


def main() -> None:
  """Child loop: read one JSON request per line from stdin, write one JSON response per line."""
  limit_resources()
  sys.setrecursionlimit(10000)
  from rlscale.tasks import equivalence  # pylint: disable=g-import-not-at-top,unused-import
  # Replies get a descriptor of their own; what libraries print (a scorer's `print` of the answer)
  # goes where stderr goes, never into the reply channel.
  out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
  os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
  out.write(json.dumps({"ready": True}) + "\n")
  out.flush()
  for line in sys.stdin:
    request_id = None
    try:
      request = json.loads(line)
      request_id = request.get("id")
      response = _handle(request)
    except Exception as e:  # pylint: disable=broad-except (incl. MemoryError; reward 0 upstream)
      response = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    out.write(json.dumps({**response, "id": request_id}) + "\n")
    out.flush()


if __name__ == "__main__":
  main()
