"""Ctrl-C / SIGTERM handling for a run: the first signal is acknowledged at once and stops the run
cleanly after the current step (checkpoint written); a second one stops the process immediately.

Python runs signal handlers only in the main thread between bytecodes, so a handler alone says
nothing while the main thread sits in a long C call (XLA compiling the first step took ~3 minutes
on a loaded machine). The C-level handler still writes each signal's number to the wakeup fd
(`signal.set_wakeup_fd`); a daemon thread reading that fd prints the acknowledgement and, on the
second signal, exits with 128 + signum without running the rest of the step. Checkpoints are
written atomically (rlscale.runner.checkpoints), so the last complete one is kept.

A run stopped cleanly at a checkpoint exits with EXIT_INTERRUPTED (75, EX_TEMPFAIL in BSD's
sysexits.h: "try again later"), so a scheduler sees a preempted run as unfinished, not done, and
can requeue the same command, which resumes it.

Signals are honoured whatever disposition the process inherited. A process started with SIGINT
ignored (a script's background job: `cmd &` in a non-interactive shell sets SIGINT and SIGQUIT to
SIG_IGN) would keep ignoring Ctrl-C in plain Python, and SIGTERM's default kills at once without
cleanup; but a scheduler or a user stops a run with `kill -INT` / `kill -TERM` and must get the
same outcome in every phase. So `rlscale.main` installs a StopFlag with `interrupt=True` for the
whole run: before the RL loop (model load, warm start, first evaluation) the first signal is
acknowledged at once and raises KeyboardInterrupt in the main thread (the run stops: 130 for
SIGINT, 128 + signum for another, or 75 when the workdir already holds a checkpoint to resume
from); the RL loop's own StopFlag takes over inside the loop (checkpoint at the end of the step,
75) and hands back when it ends. A second signal stops at once (128 + signum) in every phase.
SIGHUP and SIGQUIT keep their dispositions (`nohup` runs stay immune to hang-ups).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Exit status of a run stopped by a signal at a checkpoint (sysexits.h EX_TEMPFAIL): rerun it.
EXIT_INTERRUPTED = 75


def early_acknowledgement() -> str:
  """The line printed on the first signal before the RL loop started (nothing to checkpoint)."""
  return ("interrupt received: stopping before the first RL step; press Ctrl-C again to stop "
          "now")


def acknowledgement(step: int | None) -> str:
  """The line printed on the first signal while step `step` (1-based) runs, or, with step None,
  after the last step (the final evaluation, export and summary are being written)."""
  if step is None:
    return ("interrupt received: every RL step is done and checkpointed; finishing the final "
            "policy export and summary; press Ctrl-C again to stop now (rerunning the command "
            "finishes them)")
  return (f"interrupt received: finishing step {step}, then writing a checkpoint; press Ctrl-C "
          "again to stop without one")


class StopFlag:
  """Context manager: `.stop` becomes True on SIGINT/SIGTERM; the loop checkpoints and exits at the
  end of the step. `current_step()` -> the 1-based step now running (None once the last one is
  done), for the acknowledgement.

  A second signal prints one line and ends the process with os._exit(128 + signum) (130 for
  Ctrl-C, 143 for SIGTERM). Outside the main thread (some notebook kernels) nothing is installed.
  Installed whatever the signals' previous dispositions (SIG_IGN included); restored on exit.
  """

  def __init__(self, current_step: Callable[[], int | None] = lambda: 0, *,
               message: Callable[[], str] | None = None,
               on_signal: Callable[[int], None] | None = None, interrupt: bool = False):
    """`message()` replaces the acknowledgement line; `on_signal(signum)` runs (in the watcher
    thread) on every signal before it is acted on, e.g. a sweep forwarding it to its runs.
    `interrupt=True`: the first signal also raises KeyboardInterrupt in the main thread (as
    Python's default Ctrl-C does, for SIGTERM too; `.signum` says which), for phases with no
    step boundary to stop at."""
    self.stop = False
    self.signum = None  # the first signal received
    self._current_step = current_step
    self._message = message or (lambda: acknowledgement(self._current_step()))
    self._on_signal = on_signal
    self._interrupt = interrupt
    self._previous = {}
    self._previous_wakeup = None
    self._pipe = None
    self._received = 0

  def __enter__(self):
    if threading.current_thread() is not threading.main_thread():
      return self
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # set_wakeup_fd requires a non-blocking fd
    self._pipe = (read_fd, write_fd)
    for sig in SIGNALS:
      self._previous[sig] = signal.signal(sig, self._handle)
    self._previous_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    threading.Thread(target=self._watch, args=(read_fd,), daemon=True,
                     name="rlscale-interrupts").start()
    return self

  def _handle(self, signum, frame):  # pylint: disable=unused-argument
    # Runs late (between bytecodes); the watcher thread has already acted on the signal.
    self.stop = True
    self.signum = self.signum or signum
    if self._interrupt:
      raise KeyboardInterrupt

  def _watch(self, read_fd: int) -> None:
    while True:
      try:
        data = os.read(read_fd, 64)
      except OSError:
        return
      if not data:  # write end closed by __exit__
        os.close(read_fd)
        return
      for signum in data:
        if signum not in SIGNALS:
          continue
        self._received += 1
        self.stop = True
        self.signum = self.signum or signum
        if self._on_signal is not None:
          self._on_signal(signum)
        if self._received == 1:
          _say(self._message())
        else:
          _say("second interrupt: stopping now without a checkpoint (the last checkpoint is "
               "kept; run the same command to resume from it)")
          os._exit(128 + signum)  # pylint: disable=protected-access

  def __exit__(self, *exc):
    if self._pipe is None:
      return
    signal.set_wakeup_fd(self._previous_wakeup)
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    os.close(self._pipe[1])  # the watcher reads EOF and closes the read end
    self._pipe = None


def _say(line: str) -> None:
  # os.write, not print: the main thread may hold sys.stderr's lock (tqdm's progress bar).
  os.write(2, ("\n" + line + "\n").encode())
