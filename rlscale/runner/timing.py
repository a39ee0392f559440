"""Wall-clock accounting of a run, with JAX compilation measured apart from execution.

JAX compiles a function the first time it sees an input shape (the first step, the first
evaluation, a prompt bucket met mid-run), synchronously, inside the call. Timing a phase around its
calls therefore mixes compilation into the phase. JAX reports every trace, lowering and backend
compilation as a time span through `jax.monitoring` (events `/jax/core/compile/*`); `CompileLog`
records them, and `RunClock.measure(part)` splits the seconds of a timed block into the part's
execution and the compilation that happened inside it (the measure of the union of the compile
spans in the block's window, so nested spans, e.g. an inner jit traced within an outer one, count
once).

Parts (keys of `RunClock.totals`, cumulative seconds of the run, saved in checkpoints):
generation, reward, training, evaluation, checkpointing (execution only) and compile. What no part
holds (logging, host bookkeeping between phases) is `other`, so that
  wall/total = generation + reward + training + evaluation + checkpointing + compile + other.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator

# JAX's compile events (jax._src.dispatch: JAXPR_TRACE_EVENT, JAXPR_TO_MLIR_MODULE_EVENT,
# BACKEND_COMPILE_EVENT); the persistent compilation cache's reads happen inside the last.
COMPILE_EVENT_PREFIX = "/jax/core/compile/"
PARTS = ("generation", "reward", "training", "evaluation", "checkpointing", "compile")
# The phases of one RL step, the step's own work (a PARTS prefix): what a throughput profile times
# per step and what the analysis sums as a run's RL seconds (rlscale.scaling).
PHASES = ("generation", "reward", "training")


class CompileLog:
  """The time spans [start, end] (seconds, `time.time()` clock) of every JAX compile event of the
  process. Thread-safe; use the module's `compile_log()` singleton (listeners cannot be removed)."""

  def __init__(self):
    self._spans: list[tuple[float, float]] = []
    self._lock = threading.Lock()

  def record(self, event: str, start_time: float, end_time: float, **unused) -> None:
    """A `jax.monitoring` time-span listener: keeps the spans of compile events."""
    del unused
    if event.startswith(COMPILE_EVENT_PREFIX):
      with self._lock:
        self._spans.append((start_time, end_time))

  def seconds_between(self, start: float, end: float) -> float:
    """Seconds of [start, end] (`time.time()` clock) covered by at least one compile span."""
    with self._lock:
      spans = sorted((max(s, start), min(e, end)) for s, e in self._spans if e > start and s < end)
    total, reach = 0.0, start
    for s, e in spans:
      if e > reach:
        total += e - max(s, reach)
        reach = e
    return total


_COMPILE_LOG: CompileLog | None = None
_LOCK = threading.Lock()


def compile_log() -> CompileLog:
  """The process-wide CompileLog, registered with `jax.monitoring` on first use."""
  global _COMPILE_LOG  # pylint: disable=global-statement
  with _LOCK:
    if _COMPILE_LOG is None:
      import jax  # pylint: disable=g-import-not-at-top
      _COMPILE_LOG = CompileLog()
      jax.monitoring.register_event_time_span_listener(_COMPILE_LOG.record)
  return _COMPILE_LOG


class RunClock:
  """Cumulative seconds per part of a run (see module docstring), resumable.

  Wall time and compilation count from construction; `resume` adds what earlier processes of the
  run spent.
  """

  def __init__(self):
    self._log = compile_log()
    self._executed = dict.fromkeys(PARTS[:-1], 0.0)
    self._compile_offset, self.wall_offset = 0.0, 0.0
    self._start, self._start_wall = time.perf_counter(), time.time()
    self._last = self._snapshot()

  def resume(self, totals: dict[str, float], wall_offset: float) -> None:
    """Continues the cumulative seconds saved in a checkpoint (`totals` as from `totals`, wall
    seconds); parts a checkpoint of an older version lacks start at 0."""
    self._executed = {part: float(totals.get(part, 0.0)) for part in PARTS[:-1]}
    self._compile_offset = float(totals.get("compile", 0.0)) - self._compile_since_start()
    self.wall_offset = float(wall_offset)
    self._last = self._snapshot()

  def _compile_since_start(self) -> float:
    return self._log.seconds_between(self._start_wall, time.time())

  @property
  def totals(self) -> dict[str, float]:
    """Cumulative seconds per part. compile counts every compilation since the clock started
    (inside a timed block or not) plus earlier processes'."""
    return {**self._executed, "compile": self._compile_offset + self._compile_since_start()}

  @contextlib.contextmanager
  def measure(self, part: str) -> Iterator[None]:
    """Adds the block's seconds to `part`, less the compilation inside it (counted in compile).

    Raises ValueError for a part not in PARTS (or "compile", which is never timed directly)."""
    if part not in PARTS or part == "compile":
      raise ValueError(f"timed part must be one of {PARTS[:-1]}, got {part!r}")
    wall0, t0 = time.time(), time.perf_counter()
    try:
      yield
    finally:
      seconds = time.perf_counter() - t0
      compiling = min(self._log.seconds_between(wall0, time.time()), seconds)
      self._executed[part] += seconds - compiling

  def wall_seconds(self) -> float:
    """Wall seconds of the run so far (earlier processes included)."""
    return self.wall_offset + time.perf_counter() - self._start

  def _snapshot(self) -> dict[str, float]:
    return {**self.totals, "total": self.wall_seconds()}

  def record(self, interval: bool = True) -> dict[str, float]:
    """Metrics of the run's time, in seconds, as of now.

    Cumulative: `wall/<part>` for every part, `wall/other` (what no part holds) and `wall/total`.
    With `interval`, also the same since the previous `record` call (or the clock's start or
    resume): `time/<part>`, `time/other`, `time/total`; they sum like the wall/ fields, and summed
    over records give the wall/ fields."""
    now = self._snapshot()
    record = {f"wall/{part}": now[part] for part in PARTS}
    record["wall/other"] = now["total"] - sum(now[part] for part in PARTS)
    record["wall/total"] = now["total"]
    if interval:
      last = self._last
      record.update({f"time/{part}": now[part] - last[part] for part in PARTS})
      record["time/total"] = now["total"] - last["total"]
      record["time/other"] = record["time/total"] - sum(record[f"time/{p}"] for p in PARTS)
    self._last = now
    return record
