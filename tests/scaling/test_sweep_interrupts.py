"""A sweep's run processes: Ctrl-C/SIGTERM on the sweep is acknowledged at once and forwarded to
the running runs, which are recorded as interrupted; run processes die with the sweep."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

from rlscale.scaling import pinned
from rlscale.scaling import sweep
from tests.scaling.test_sweep import _plan
from tests.timeouts import hang_timeout

# A stand-in run process: writes "<dir>/<name>.started", exits 75 on SIGTERM/SIGINT (as a run
# does after its checkpoint, rlscale.runner.interrupts.EXIT_INTERRUPTED) after writing
# "<dir>/<name>.signal", else sleeps.
STAND_IN = textwrap.dedent("""
    import os, signal, sys, time
    out, name = sys.argv[1], sys.argv[2]
    def stop(signum, frame):
      open(os.path.join(out, name + ".signal"), "w").write(str(signum))
      sys.exit(75)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    open(os.path.join(out, name + ".started"), "w").write(str(os.getpid()))
    time.sleep(600)
""")


def _wait_for(predicate, timeout_s):
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    if predicate():
      return True
    time.sleep(0.05)
  return False


def test_sigterm_is_forwarded_and_runs_are_recorded_interrupted(tmp_path, monkeypatch, capfd):
  (tmp_path / "stand_in_run.py").write_text(STAND_IN)
  monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
  monkeypatch.setattr(sweep, "run_command", lambda run, *_: [
      sys.executable, "-m", "stand_in_run", str(tmp_path), run.name])
  monkeypatch.setattr(sweep, "prepare_warm_starts", lambda *_: 0.0)  # no SFT: not what is tested
  runs = _plan("smoke", tmp_path)[:3]
  started = lambda: sum(f.endswith(".started") for f in os.listdir(tmp_path))  # noqa: E731
  # SIGTERM to this process once both run processes run (the handler is installed by then).
  killer = threading.Thread(target=lambda: _wait_for(lambda: started() == 2, hang_timeout(10))
                            and os.kill(os.getpid(), signal.SIGTERM))
  killer.start()
  record = sweep.execute(runs, str(tmp_path / "w"), parallel=2, log=lambda line: None)
  killer.join()
  assert record.interrupted_by == signal.SIGTERM
  statuses = [record.entries[r.name]["status"] for r in runs]
  assert statuses == ["interrupted", "interrupted", "pending"]  # the third never started
  for run in runs[:2]:  # each run got the signal exactly once, forwarded by the sweep
    assert (tmp_path / f"{run.name}.signal").read_text() == str(int(signal.SIGTERM))
  assert "sweep: interrupt received: 2 running run(s) finish their step" in capfd.readouterr().err


def test_run_process_dies_with_its_parent(tmp_path):
  # A parent starts a pinned run process, then is SIGKILLed (a test timeout, the OOM killer):
  # the run process gets SIGTERM from the kernel and stops instead of running on as an orphan.
  (tmp_path / "stand_in_run.py").write_text(STAND_IN)
  argv = pinned.command([sys.executable, "-m", "stand_in_run", str(tmp_path), "orphan"],
                        sorted(os.sched_getaffinity(0))[:1])
  parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
      import subprocess, time
      subprocess.Popen({argv!r})
      time.sleep(600)
  """)], env=dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"))
  try:
    assert _wait_for((tmp_path / "orphan.started").exists, hang_timeout(10))
    parent.kill()
    parent.wait()
    signal_file = tmp_path / "orphan.signal"
    # Wait for the content, not the file: the stand-in creates it, then writes (a loaded machine
    # can read it in between).
    assert _wait_for(lambda: signal_file.exists() and signal_file.read_text() != "",
                     hang_timeout(2))
    assert signal_file.read_text() == str(int(signal.SIGTERM))
  finally:
    parent.kill()
    if (tmp_path / "orphan.started").exists():
      try:
        os.kill(int((tmp_path / "orphan.started").read_text()), signal.SIGKILL)
      except ProcessLookupError:
        pass
