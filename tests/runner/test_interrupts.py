"""The first Ctrl-C is acknowledged at once, even while the main thread is busy (as in a
minutes-long XLA compile); a second one stops the process immediately with 128 + SIGINT."""

import os
import select
import signal
import subprocess
import sys
import time

from rlscale.runner.interrupts import acknowledgement
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
