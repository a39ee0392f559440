"""One run per workdir (`rlscale.runner.workdir_lock`): the lock itself, its release when the
holder dies, and the runner refusing a second run through the CLI (issue 39, item 2)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from rlscale.runner import workdir_lock
from rlscale.runner.loop import train_and_evaluate
from rlscale.runner.metrics_log import read_metrics
from tests.runner.runner_configs import tiny_config
from tests.timeouts import hang_timeout

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _tree(root):
  return sorted(os.path.relpath(os.path.join(d, n), root)
                for d, dirs, files in os.walk(root) for n in dirs + files)


def test_describe_by_hand():
  info = {"pid": 1234, "host": "h", "since": "2026-12-08 10:31:02"}
  assert workdir_lock.describe(info) == "pid 1234 on host h, since 2026-12-08 10:31:02"
  assert workdir_lock.describe({"pid": 7, "host": "h"}) == "pid 7 on host h"
  # A holder that has locked but not yet written its line.
  assert workdir_lock.describe({}) == "pid not recorded yet"


def test_acquire_records_the_holder_and_a_second_acquire_is_refused(tmp_path):
  lock = workdir_lock.acquire(str(tmp_path))
  with open(tmp_path / ".lock") as f:
    info = json.load(f)
  assert info["pid"] == os.getpid() and info["host"] == socket.gethostname()
  assert info == lock.info
  expected = f"pid {os.getpid()} on host {socket.gethostname()}, since {info['since']}"
  assert workdir_lock.holder(str(tmp_path)) == expected
  # flock is per open file: a second acquire in this process conflicts as another process would.
  with pytest.raises(workdir_lock.WorkdirInUse) as refused:
    workdir_lock.acquire(str(tmp_path), attempts=2, wait_seconds=0.01)
  assert str(refused.value) == (f"workdir {tmp_path} is in use by another rlscale run "
                                f"({expected}); wait for it to finish or use another --workdir")
  assert isinstance(refused.value, ValueError)  # one `error:` line, exit status 2 (rlscale.cli)
  with open(tmp_path / ".lock") as f:
    assert json.load(f) == info  # the refused acquire changed nothing
  lock.release()
  assert os.listdir(tmp_path) == []  # released: the file is gone
  assert workdir_lock.holder(str(tmp_path)) is None
  lock.release()  # idempotent
  with workdir_lock.acquire(str(tmp_path)):  # free again
    assert workdir_lock.holder(str(tmp_path)) is not None


def test_holder_creates_nothing(tmp_path):
  assert workdir_lock.holder(str(tmp_path / "missing")) is None
  assert workdir_lock.holder(str(tmp_path)) is None
  assert os.listdir(tmp_path) == []


def test_a_probe_does_not_refuse_a_starting_run(tmp_path, monkeypatch):
  """A run that meets `holder`'s momentary shared lock retries instead of being refused."""
  os.close(os.open(tmp_path / ".lock", os.O_CREAT | os.O_WRONLY))
  probe = os.open(tmp_path / ".lock", os.O_RDONLY)
  import fcntl  # pylint: disable=import-outside-toplevel
  fcntl.flock(probe, fcntl.LOCK_SH)
  sleeps = []
  monkeypatch.setattr(workdir_lock.time, "sleep", lambda s: (sleeps.append(s), os.close(probe)))
  with workdir_lock.acquire(str(tmp_path), attempts=3, wait_seconds=0.01):
    pass
  assert sleeps == [0.01]  # refused once, taken on the second attempt


def test_deleting_the_lock_file_by_hand_does_not_let_a_second_run_in(tmp_path):
  """Run A holds; its .lock is deleted by hand: the directory lock still refuses run B, which
  creates nothing and names the holder as well as it can."""
  lock = workdir_lock.acquire(str(tmp_path))
  assert lock.directory_locked
  os.unlink(tmp_path / ".lock")
  assert workdir_lock.holder(str(tmp_path)) == workdir_lock.UNKNOWN_HOLDER
  with pytest.raises(workdir_lock.WorkdirInUse) as refused:
    workdir_lock.acquire(str(tmp_path), attempts=2, wait_seconds=0.01)
  assert str(refused.value) == (
      f"workdir {tmp_path} is in use by another rlscale run (pid unknown: its .lock file was "
      "removed); wait for it to finish or use another --workdir")
  assert os.listdir(tmp_path) == []  # the refused run made no new .lock
  lock.release()
  assert workdir_lock.holder(str(tmp_path)) is None
  with workdir_lock.acquire(str(tmp_path), attempts=1) as again:
    assert again.info["pid"] == os.getpid()


def test_the_file_lock_alone_decides_where_a_directory_cannot_be_locked(tmp_path, monkeypatch):
  """A file system that refuses flock on a directory (EINVAL, as some network file systems do):
  the lock falls back to the file, which still refuses a second run."""
  import errno  # pylint: disable=import-outside-toplevel
  import fcntl  # pylint: disable=import-outside-toplevel
  import stat  # pylint: disable=import-outside-toplevel
  real_flock = fcntl.flock

  def flock(fd, op):
    if stat.S_ISDIR(os.fstat(fd).st_mode):
      raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
    return real_flock(fd, op)

  monkeypatch.setattr(workdir_lock.fcntl, "flock", flock)
  with workdir_lock.acquire(str(tmp_path)) as lock:
    assert not lock.directory_locked
    assert workdir_lock.holder(str(tmp_path)).startswith(f"pid {os.getpid()} on host ")
    with pytest.raises(workdir_lock.WorkdirInUse, match=f"pid {os.getpid()} on host"):
      workdir_lock.acquire(str(tmp_path), attempts=1)
  assert os.listdir(tmp_path) == [] and workdir_lock.holder(str(tmp_path)) is None


def _read_only_lock_file(monkeypatch, number=30):
  """os.open of a `.lock` fails as on a read-only file system (errno 30, EROFS)."""
  real_open = os.open

  def fake_open(path, flags, *args):
    if os.path.basename(path) == ".lock" and flags & os.O_CREAT:
      raise OSError(number, os.strerror(number), path)
    return real_open(path, flags, *args)

  monkeypatch.setattr(workdir_lock.os, "open", fake_open)


def test_a_read_only_workdir_is_refused_in_one_clear_line(tmp_path, monkeypatch):
  from rlscale import cli  # pylint: disable=import-outside-toplevel
  _read_only_lock_file(monkeypatch)
  with pytest.raises(workdir_lock.WorkdirReadOnly) as refused:
    workdir_lock.acquire(str(tmp_path))
  assert str(refused.value) == (f"workdir {tmp_path} is read-only: cannot take its lock or write "
                                "results (Read-only file system)")
  with pytest.raises(SystemExit) as exited:
    cli.run_cli(lambda: workdir_lock.acquire(str(tmp_path)), argv=["x"])
  assert exited.value.code == cli.EXIT_USER_ERROR == 2
  monkeypatch.undo()
  with workdir_lock.acquire(str(tmp_path), attempts=1):  # the directory lock was let go
    pass


def test_an_unfinished_read_only_workdir_is_refused_before_building_anything(tmp_path,
                                                                              monkeypatch):
  from rlscale.runner import builders  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(builders, "build_run", lambda *a, **k: pytest.fail("built a model"))
  _read_only_lock_file(monkeypatch)
  (tmp_path / "run").mkdir()
  with pytest.raises(workdir_lock.WorkdirReadOnly, match="is read-only: cannot take its lock"):
    train_and_evaluate(tiny_config(), str(tmp_path / "run"))
  assert _tree(tmp_path) == ["run"]


def test_a_finished_run_shows_its_results_without_taking_the_lock(tmp_path, monkeypatch, capsys):
  """Asking again for a finished run in a read-only workdir: `run already complete` and its
  summary, as in a writable one; the lock (which needs a write) is not taken."""
  from rlscale.runner import loop  # pylint: disable=import-outside-toplevel
  summary = {"steps": 4, "final_accuracy": 0.5}
  monkeypatch.setattr(loop, "completed_summary", lambda config, workdir: summary)
  monkeypatch.setattr(workdir_lock, "held", lambda *a: pytest.fail("took the lock"))
  workdir = str(tmp_path / "run")
  assert train_and_evaluate(tiny_config(), workdir) == summary
  assert capsys.readouterr().out == (
      f"run already complete (4 steps); results: {os.path.join(workdir, 'summary.json')}\n")


_HOLD = ("import sys, time\n"
         "from rlscale.runner import workdir_lock\n"
         "lock = workdir_lock.acquire(sys.argv[1])\n"
         "print('locked', flush=True)\n"
         "time.sleep(600)\n")


def test_the_lock_dies_with_its_process(tmp_path):
  """kill -9 leaves the lock file but not the lock: the next acquire takes it at once."""
  child = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path)], cwd=REPO,
                           stdout=subprocess.PIPE, text=True)
  try:
    assert child.stdout.readline().strip() == "locked"
    assert workdir_lock.holder(str(tmp_path)).startswith(f"pid {child.pid} on host ")
    with pytest.raises(workdir_lock.WorkdirInUse, match=f"pid {child.pid} on host"):
      workdir_lock.acquire(str(tmp_path), attempts=1)
  finally:
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=hang_timeout(5))
    child.stdout.close()
  assert os.listdir(tmp_path) == [".lock"]  # the stale file stays ...
  assert workdir_lock.holder(str(tmp_path)) is None  # ... unlocked
  with workdir_lock.acquire(str(tmp_path), attempts=1) as lock:
    assert lock.info["pid"] == os.getpid()


def test_held_creates_the_workdir_and_removes_it_after_a_failure(tmp_path):
  with pytest.raises(RuntimeError, match="setup failed"):
    with workdir_lock.held(str(tmp_path / "new" / "run")):
      assert workdir_lock.holder(str(tmp_path / "new" / "run")) is not None
      raise RuntimeError("setup failed")
  assert os.listdir(tmp_path) == []  # neither run/ nor new/ it created, nor the lock file
  mine = tmp_path / "mine"
  mine.mkdir()
  (mine / "notes.txt").write_text("my notes")
  with pytest.raises(KeyboardInterrupt):
    with workdir_lock.held(str(mine)):
      raise KeyboardInterrupt()
  assert _tree(mine) == ["notes.txt"]
  with workdir_lock.held(str(tmp_path / "ok")):
    (tmp_path / "ok" / "result").write_text("r")
  assert _tree(tmp_path / "ok") == ["result"]  # a run that ends leaves no lock file


def test_a_refused_held_changes_nothing(tmp_path):
  workdir = str(tmp_path / "run")
  with workdir_lock.held(workdir):
    (tmp_path / "run" / "metrics.jsonl").write_text("")  # the holder's files, no results yet
    before = _tree(tmp_path)
    with pytest.raises(workdir_lock.WorkdirInUse):
      with workdir_lock.held(workdir):
        pass
    assert _tree(tmp_path) == before
    assert workdir_lock.holder(workdir) is not None


def test_a_second_run_in_process_is_refused_before_building_anything(tmp_path, monkeypatch):
  """train_and_evaluate in a workdir another run holds: WorkdirInUse, before any build, and the
  holder's half-made files (no results yet, which a failed run would remove) stay."""
  from rlscale.runner import builders  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(builders, "build_run", lambda *a, **k: pytest.fail("built a model"))
  workdir = tmp_path / "run"
  with workdir_lock.held(str(workdir)):
    (workdir / "config.json").write_text("{}")
    with pytest.raises(workdir_lock.WorkdirInUse, match=f"pid {os.getpid()}"):
      train_and_evaluate(tiny_config(), str(workdir))
    assert _tree(tmp_path) == ["run", "run/.lock", "run/config.json"]


def _config_file(tmp_path, sft_cache, **fields):
  """A config file for `python -m rlscale.main`: the tests' tiny config with `fields`."""
  path = tmp_path / "tiny_config.py"
  path.write_text("from tests.runner.runner_configs import tiny_config\n"
                  "def get_config(arg=None):\n"
                  f"  return tiny_config(sft__cache_dir={str(sft_cache)!r}, **{fields!r})\n")
  return str(path)


def _main(config, workdir, **kwargs):
  env = {k: v for k, v in os.environ.items() if k != "RLSCALE_VERBOSE"}
  return subprocess.Popen([sys.executable, "-m", "rlscale.main", f"--config={config}",
                           f"--workdir={workdir}"], cwd=REPO, env=dict(env, JAX_PLATFORMS="cpu"),
                          text=True, **kwargs)


def _wait_for(condition, seconds):
  deadline = time.monotonic() + seconds
  while not condition():
    assert time.monotonic() < deadline, "timed out"
    time.sleep(0.05)


def _error_lines(stderr):
  return [line for line in stderr.splitlines()
          if line.strip() and not line.startswith(("W1", "I1", "WARNING"))]


@pytest.mark.slow
def test_a_second_run_is_refused_in_one_line_and_the_first_finishes_intact(tmp_path):
  """Two runs in one workdir: the first, paused (SIGSTOP) right after it took the lock, keeps
  it; the second exits with status 2 and one line naming the first's pid, and the first then
  finishes with its own metrics and summary."""
  workdir = tmp_path / "run"
  config = _config_file(tmp_path, tmp_path / "sft")
  first = _main(config, workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  try:
    _wait_for(lambda: workdir_lock.holder(str(workdir)) is not None, hang_timeout(30))
    first.send_signal(signal.SIGSTOP)  # holds the lock, writes nothing
    second = _main(config, workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = second.communicate(timeout=hang_timeout(30))
    assert second.returncode == 2, err
    holder = workdir_lock.holder(str(workdir))
    assert holder.startswith(f"pid {first.pid} on host {socket.gethostname()}, since ")
    assert _error_lines(err) == [
        f"error: workdir {workdir} is in use by another rlscale run ({holder}); wait for it to "
        "finish or use another --workdir"]
    assert "warm start" not in out  # refused before any slow step
  finally:
    first.send_signal(signal.SIGCONT)
  out, err = first.communicate(timeout=hang_timeout(60))
  assert first.returncode == 0, err
  summary = json.load(open(workdir / "summary.json"))
  records = read_metrics(str(workdir / "metrics.jsonl"))
  assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
  assert summary["steps"] == 4 and summary["final_accuracy"] == records[-1]["eval/greedy_accuracy"]
  assert f"-> {summary['final_accuracy']:.3f} (after 4 RL steps" in out
  assert not os.path.exists(workdir / ".lock")  # released at the end


@pytest.mark.slow
def test_no_stale_lock_after_kill_9(tmp_path):
  """A run killed with SIGKILL after its first checkpoint: the rerun takes the workdir at once
  and resumes to the end."""
  workdir = tmp_path / "run"
  # 12 steps: the kill comes long before the end, whatever the machine's load.
  first = _main(_config_file(tmp_path, tmp_path / "sft", train__total_steps=12), workdir,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    _wait_for(lambda: os.path.isdir(workdir / "checkpoints" / "2"), hang_timeout(60))
  finally:
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=hang_timeout(5))
  assert os.path.exists(workdir / ".lock") and workdir_lock.holder(str(workdir)) is None
  config = tiny_config(sft__cache_dir=str(tmp_path / "sft"), train__total_steps=12)
  summary = train_and_evaluate(config, str(workdir))
  assert summary["steps"] == 12
  assert [r["step"] for r in read_metrics(str(workdir / "metrics.jsonl"))] == list(range(13))
  assert not os.path.exists(workdir / ".lock")
