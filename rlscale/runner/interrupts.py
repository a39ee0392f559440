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
acknowledged at once and stops the run at the next phase boundary (130 for SIGINT, 128 + signum
for another, or 75 when the workdir already holds a checkpoint to resume from); the RL loop's own StopFlag takes over inside the loop (checkpoint at the end of the step,
75) and hands back when it ends. A second signal stops at once (128 + signum) in every phase.
SIGHUP and SIGQUIT keep their dispositions (`nohup` runs stay immune to hang-ups).

A stop request before the RL loop is sticky, not an exception raised by the handler:
KeyboardInterrupt raised there can land where Python drops it (a garbage-collection callback such
as JAX's prints "Exception ignored in ..." and goes on) or where it breaks an import or a library's
state half-way. So `rlscale.main`
calls `install_early()` before its heavy imports: from then on the first signal is recorded
process-wide (`pending()`) and acknowledged, without raising; `raise_if_requested()` turns a
pending request into KeyboardInterrupt at the phase boundaries (after the imports, every warm-start
step, before the RL loop: a StopFlag without `interrupt` entered while a request is pending raises
it, so no RL step runs). The request lasts until the outermost `interrupt=True` StopFlag exits, so
a notebook calling `train_and_evaluate` again starts clean. Once the run's exit status is known,
`exit_on_signal(status)` makes any further signal end the process at once with that status, no
traceback (the interpreter's shutdown runs atexit callbacks such as JAX's backend clean-up, which
a KeyboardInterrupt would interrupt with "Exception ignored in atexit callback").
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Exit status of a run stopped by a signal at a checkpoint (sysexits.h EX_TEMPFAIL): rerun it.
EXIT_INTERRUPTED = 75

# Process-wide state (main thread's handlers and the watcher threads): the signal of a stop request
# not yet acted on, whether a `rlscale.main` run (install_early / an interrupt=True StopFlag) is
# recording requests, and the status to exit with on a signal once the run has ended.
_pending: int | None = None
_recording = 0
_exit_status: int | None = None
_installed = False
_exit_lock = threading.Lock()


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


def pending() -> int | None:
  """The signal number of a stop request not yet acted on (see the module docstring), or None."""
  return _pending


def raise_if_requested() -> None:
  """Raises KeyboardInterrupt when a stop request is pending: call it at phase boundaries."""
  if _pending is not None:
    raise KeyboardInterrupt


def _request(signum: int) -> bool:
  """Records a stop request (when a run records them); True when one was already pending."""
  global _pending
  if not _recording:
    return False
  if _pending is not None:
    return True
  _pending = signum
  return False


def _exit_now(status: int, line: str | None = None) -> None:
  """Prints `line` (once, whichever thread gets here first) and ends the process with `status`."""
  with _exit_lock:
    if line:
      _say(line)
    os._exit(status)  # pylint: disable=protected-access


_SECOND = ("second interrupt: stopping now without a checkpoint (the last checkpoint is kept; run "
           "the same command to resume from it)")


def _early_handler(signum, frame):  # pylint: disable=unused-argument
  if _exit_status is not None:
    _exit_now(_exit_status)
  if _request(signum):
    _exit_now(128 + signum, _SECOND)
  _say(early_acknowledgement())


def install_early() -> None:
  """For `rlscale.main`, before its heavy imports: the first SIGINT/SIGTERM is recorded and
  acknowledged (not raised: an import interrupted half-way can fail in odd ways), a second one
  ends the process with 128 + signum. Main thread only; a no-op elsewhere and when called again."""
  global _recording, _installed
  if _installed or threading.current_thread() is not threading.main_thread():
    return
  _installed = True
  _recording += 1
  for sig in SIGNALS:
    signal.signal(sig, _early_handler)


def exit_on_signal(status: int) -> None:
  """From now on a SIGINT/SIGTERM ends the process at once with `status` (the run's exit status,
  already decided), quietly: for the end of the run and the interpreter's shutdown."""
  global _exit_status
  _exit_status = int(status)
  if threading.current_thread() is threading.main_thread():
    for sig in SIGNALS:
      signal.signal(sig, _early_handler)


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
    `interrupt=True`: the first signal is also a stop request for the whole run, recorded
    process-wide (`pending()`, `.signum` says which signal) and turned into KeyboardInterrupt at
    the next phase boundary (`raise_if_requested()`, and any StopFlag entered without
    `interrupt`), for phases with no step boundary to stop at. It is not raised from the handler:
    there it could land where Python drops it (a garbage-collection callback) or in the middle
    of a library's state change."""
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
    global _recording
    if threading.current_thread() is not threading.main_thread():
      return self
    if _pending is not None:
      if not self._interrupt:  # a stop requested before this phase: it does not start
        raise KeyboardInterrupt
      self.stop, self.signum, self._received = True, _pending, 1
    if self._interrupt:
      _recording += 1
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
    if _exit_status is not None:
      _exit_now(_exit_status)
    self.stop = True
    self.signum = self.signum or signum

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
        if _exit_status is not None:
          _exit_now(_exit_status)
        self._received += 1
        if _request(signum) and self._received == 1:  # a signal seen by an earlier phase
          self._received = 2
        self.stop = True
        self.signum = self.signum or signum
        if self._on_signal is not None:
          self._on_signal(signum)
        if self._received == 1:
          _say(self._message())
        else:
          _exit_now(128 + signum, _SECOND)

  def __exit__(self, *exc):
    global _recording, _pending
    if self._pipe is None:
      return
    signal.set_wakeup_fd(self._previous_wakeup)
    for sig, handler in self._previous.items():
      # Once the exit status is decided (exit_on_signal), a signal exits with it, quietly.
      signal.signal(sig, handler if _exit_status is None else _early_handler)
    os.close(self._pipe[1])  # the watcher reads EOF and closes the read end
    self._pipe = None
    if self._interrupt:
      _recording -= 1
      if not _recording:
        _pending = None


def _say(line: str) -> None:
  # os.write, not print: the main thread may hold sys.stderr's lock (tqdm's progress bar).
  os.write(2, ("\n" + line + "\n").encode())
