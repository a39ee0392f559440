"""One place for the tests' subprocess timeouts.

They guard against hangs, not speed: a test on a busy machine (the suite beside a running sweep,
or 5 processes on 2 cores) runs many times slower than on a quiet one, and a fixed 120 s limit
failed there although nothing hung. `hang_timeout(quiet_s)` is HANG_FACTOR times the time the
step takes on a quiet machine; a quiet CI never waits for it, so it costs nothing there.
RLSCALE_TEST_HANG_FACTOR overrides the factor (e.g. 30 on a very loaded machine).
"""

import os

HANG_FACTOR = float(os.environ.get("RLSCALE_TEST_HANG_FACTOR", "10"))


def hang_timeout(quiet_s: float) -> float:
  """Seconds to wait for a subprocess whose quiet-machine duration is `quiet_s` seconds."""
  return HANG_FACTOR * quiet_s
