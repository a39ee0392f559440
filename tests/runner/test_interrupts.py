"""The first Ctrl-C is acknowledged at once, even while the main thread is busy (as in a
minutes-long XLA compile); a second one stops the process immediately with 128 + SIGINT.
Through `python -m rlscale.main`: a signal before the RL loop stops the run with 128 + signum, one
mid-RL at a checkpoint with 75, whatever disposition the process inherited."""

import os
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from rlscale.runner.interrupts import EXIT_INTERRUPTED, acknowledgement, early_acknowledgement
from tests.timeouts import hang_timeout

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# A "step" that never ends on its own: the loop would only see the flag after it.
CHILD = """
import sys, time
from rlscale.runner.interrupts import StopFlag
with StopFlag(lambda: 7) as flag:
  print("ready", flush=True)
  while True:
    time.sleep(0.05)
"""


def _read_until(fd, text, timeout_s):
  """Reads the pipe `fd` until its output contains `text`; fails after timeout_s seconds."""
  deadline = time.monotonic() + timeout_s
  seen = b""
  while time.monotonic() < deadline:
    if select.select([fd], [], [], 0.2)[0]:
      seen += os.read(fd, 4096)
      if text.encode() in seen:
        return
  raise AssertionError(f"{text!r} not printed within {timeout_s} s; got {seen!r}")


def test_first_interrupt_is_acknowledged_and_second_stops_at_once():
  proc = subprocess.Popen([sys.executable, "-c", CHILD], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
  fd = proc.stdout.fileno()
  try:
    _read_until(fd, "ready", hang_timeout(5))
    proc.send_signal(signal.SIGINT)
    _read_until(fd, acknowledgement(7), hang_timeout(2))
    assert proc.poll() is None  # still finishing the step
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=hang_timeout(2)) == 128 + signal.SIGINT
  finally:
    if proc.poll() is None:
      proc.kill()


# --- Through the command line: the same outcome in the warm start and in RL, whatever the
# signal disposition the process inherited (rlscale.main installs its handlers for the run).

SMOKE = "experiments/configs/default.py:smoke"


def _start_run(workdir, *overrides, ignore_sigint):
  """`python -m rlscale.main` on the smoke config, stdout and stderr merged, unbuffered; with
  `ignore_sigint` it starts with SIGINT ignored, as a background job of a script (`cmd &`): the
  shell's `trap '' INT` sets SIG_IGN, which exec keeps (a preexec_fn would fork this process,
  multithreaded once JAX is loaded)."""
  command = [sys.executable, "-m", "rlscale.main", f"--config={SMOKE}", f"--workdir={workdir}",
             *overrides]
  if ignore_sigint:
    command = ["bash", "-c", "trap '' INT && exec \"$@\"", "bash", *command]
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
  return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)


def _interrupt_when(proc, text, signum, timeout_s):
  """Sends `signum` once `text` is printed; returns (exit status, everything printed)."""
  fd = proc.stdout.fileno()
  try:
    _read_until(fd, text, timeout_s)
    proc.send_signal(signum)
    output = proc.communicate(timeout=timeout_s)[0]
  finally:
    if proc.poll() is None:
      proc.kill()
  return proc.returncode, output.decode(errors="replace")


@pytest.mark.parametrize("signum, ignore_sigint", [
    (signal.SIGINT, True),  # inherited as ignored: honoured all the same
    (signal.SIGTERM, False),  # default action would kill at once: stops cleanly instead
])
def test_a_signal_during_the_warm_start_stops_with_128_plus_signum(tmp_path, signum,
                                                                      ignore_sigint):
  workdir = tmp_path / "run"
  proc = _start_run(workdir, ignore_sigint=ignore_sigint)
  status, output = _interrupt_when(proc, "warm start: SFT step 1/", signum, hang_timeout(30))
  assert status == 128 + signum, output
  assert early_acknowledgement() in output
  assert "interrupted before the first RL checkpoint; rerun the command to start again" in output
  assert "Traceback" not in output
  assert not workdir.exists()  # nothing worth keeping: the run's workdir is removed


def test_sigint_inherited_as_ignored_mid_rl_checkpoints_and_exits_75(tmp_path):
  workdir = tmp_path / "run"
  # Enough steps that the signal lands mid-RL (a smoke step takes well under a second).
  proc = _start_run(workdir, "--config.train.total_steps=400", ignore_sigint=True)
  status, output = _interrupt_when(proc, " 1/400 ", signal.SIGINT, hang_timeout(60))
  assert status == EXIT_INTERRUPTED, output
  match = re.search(r"interrupted: checkpoint written at step (\d+); run the same command to "
                    r"resume", output)
  assert match, output
  assert int(match[1]) < 400
  assert os.listdir(workdir / "checkpoints") == [match[1]]


@pytest.mark.parametrize("text, delay_s", [
    ("model: built-in", 0.0),  # the first line: model build, JAX just started
    ("model: built-in", 0.3),  # inside the model build / first compilations
])
def test_an_early_sigint_is_never_lost(tmp_path, text, delay_s):
  """Issue 39 (a tester's finding): a SIGINT in the first seconds used to be raised inside JAX's
  garbage-collection callback, which drops it, and the run went on to finish with status 0. The
  request is sticky now: whenever it lands before the first checkpoint, the run stops (130),
  without a traceback, and leaves no workdir."""
  workdir = tmp_path / "run"
  proc = _start_run(workdir, ignore_sigint=False)
  fd = proc.stdout.fileno()
  try:
    _read_until(fd, text, hang_timeout(30))
    time.sleep(delay_s)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=hang_timeout(30))[0].decode(errors="replace")
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 130, output
  assert "Traceback" not in output and "Exception ignored" not in output, output
  assert "done: held-out greedy accuracy" not in output
  assert not workdir.exists()
