"""The verifier's worker process: sympy comparisons under a hard per-call time limit.

A runaway computation (a deep `evalf`, a reasoning-gym scorer that calls `parse_expr` on a
power tower) must not hang the training loop, and Python cannot interrupt C-level work in a
thread. So every check that needs sympy or a native reasoning-gym scorer runs in one long-lived
child process (`python -m rlscale.tasks.worker`) that speaks JSON lines over pipes. The parent
waits at most `timeout_s` for each answer; on timeout it kills the child (SIGKILL) and starts a
fresh one for the next call. The child caps its address space (RLIMIT_AS) and may not create
files (RLIMIT_FSIZE = 0), so a hostile answer cannot exhaust memory or write to disk.

The child is a fresh interpreter (not a fork), so it is safe to start from a process that has
initialised JAX, and its startup (importing sympy, ~0.5 s) does not count against the limit.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any, Optional

MEMORY_LIMIT_BYTES = 2 << 30
STARTUP_TIMEOUT_S = 60.0
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class WorkerClient:
  """Parent side: one child process, restarted after a timeout or crash. Thread-safe."""

  def __init__(self):
    self._proc: Optional[subprocess.Popen] = None
    self._buffer = b""
    self._lock = threading.Lock()
    self._preloads: list[dict[str, Any]] = []
    self.restarts = 0

  def _start(self) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    self._proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "rlscale.tasks.worker"], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, close_fds=True,
        cwd=_PACKAGE_ROOT)  # `-m` puts the cwd first on sys.path: import this very package
    self._buffer = b""
    ready = self._read_line(time.monotonic() + STARTUP_TIMEOUT_S)
    if ready is None or json.loads(ready).get("ready") is not True:
      self._kill()
      raise RuntimeError("verifier worker did not start")
    for request in self._preloads:
      self._send(request)
      if self._read_line(time.monotonic() + STARTUP_TIMEOUT_S) is None:
        self._kill()
        raise RuntimeError("verifier worker preload failed")

  def _send(self, request: dict[str, Any]) -> None:
    self._proc.stdin.write(json.dumps(request).encode() + b"\n")
    self._proc.stdin.flush()

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
          self._send(request)
          line = self._read_line(time.monotonic() + STARTUP_TIMEOUT_S)
          if line is None or "error" in json.loads(line):
            self._preloads.remove(request)
            raise RuntimeError(f"verifier worker preload failed: {line!r}")

  def _kill(self) -> None:
    if self._proc is not None:
      self._proc.kill()
      self._proc.wait()
      for pipe in (self._proc.stdin, self._proc.stdout):
        pipe.close()
      self._proc = None

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
        self._send(request)
        line = self._read_line(time.monotonic() + timeout_s)
        if line is None:
          crashed = self._proc.poll() is not None
          self._kill()
          self.restarts += 1
          return None, "verifier worker crashed" if crashed else f"timeout after {timeout_s:g} s"
        return json.loads(line), ""
      except (OSError, RuntimeError, ValueError) as e:  # incl. a garbled reply
        self._kill()
        return None, f"verifier worker failed ({type(e).__name__})"

  def close(self) -> None:
    """Stops the child process (it is also killed when the parent exits)."""
    with self._lock:
      self._kill()


_CLIENT: Optional[WorkerClient] = None
_CLIENT_LOCK = threading.Lock()


def client() -> WorkerClient:
  """The process-wide worker client (created on first use)."""
  global _CLIENT
  with _CLIENT_LOCK:
    if _CLIENT is None:
      _CLIENT = WorkerClient()
    return _CLIENT


# ----------------------------------------------------------------------------- child side


def _limit_resources() -> None:
  import resource  # pylint: disable=g-import-not-at-top (POSIX only; child side only)
  for limit, value in ((resource.RLIMIT_AS, MEMORY_LIMIT_BYTES), (resource.RLIMIT_FSIZE, 0)):
    try:
      resource.setrlimit(limit, (value, value))
    except (ValueError, OSError):
      pass  # a lower hard limit is already in place


_NATIVE_DATASETS: dict[str, Any] = {}


def _native_dataset(request: dict[str, Any]) -> Any:
  import reasoning_gym  # pylint: disable=g-import-not-at-top (only when a native scorer is used)
  key = json.dumps([request["name"], request["kwargs"]], sort_keys=True)
  if key not in _NATIVE_DATASETS:
    _NATIVE_DATASETS[key] = reasoning_gym.create_dataset(
        request["name"], size=1, seed=0, **request["kwargs"])
  return _NATIVE_DATASETS[key]


def _native_score(request: dict[str, Any]) -> dict[str, Any]:
  """A reasoning-gym generator's own score_answer on an already-vetted answer string: {"reward":
  float, NaN and infinities included (JSON NaN / Infinity), or None when the scorer gave None}."""
  reward = _native_dataset(request).score_answer(request["answer"], request["entry"])
  return {"reward": None if reward is None else float(reward)}


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
    _native_dataset(request)
    return {"ready": True}
  return {"error": f"unknown op {request.get('op')!r}"}


def main() -> None:
  """Child loop: read one JSON request per line from stdin, write one JSON response per line."""
  _limit_resources()
  sys.setrecursionlimit(10000)
  from rlscale.tasks import equivalence  # pylint: disable=g-import-not-at-top,unused-import
  out = sys.stdout
  out.write(json.dumps({"ready": True}) + "\n")
  out.flush()
  for line in sys.stdin:
    try:
      response = _handle(json.loads(line))
    except Exception as e:  # pylint: disable=broad-except (incl. MemoryError; reward 0 upstream)
      response = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    out.write(json.dumps(response) + "\n")
    out.flush()


if __name__ == "__main__":
  main()
