"""rlscale.cli: user errors -> one line and exit status 2; bugs keep their traceback; a run's
failures and storage errors -> one line and their own statuses; undecodable bytes by line."""

import errno
import gzip
import re
import sys

import pytest
import tqdm

from rlscale import cli
from rlscale.runner import metrics_log


def _raise(exc):
  def main():
    raise exc
  return main


@pytest.mark.parametrize("exc, line", [
    (ValueError("rl.group_size must be >= 1, got 0"), "error: rl.group_size must be >= 1, got 0"),
    (FileNotFoundError("data file 'x.jsonl' not found"), "error: data file 'x.jsonl' not found"),
    (ValueError("two\n  lines"), "error: two lines"),
    (cli.UsageError("unexpected arguments ['x']"), "error: unexpected arguments ['x']"),
])
def test_user_errors_print_one_line_and_exit_2(capsys, monkeypatch, exc, line):
  monkeypatch.delenv(cli.VERBOSE_ENV, raising=False)
  with pytest.raises(SystemExit) as stop:
    cli.run_cli(_raise(exc), argv=["prog"])
  assert stop.value.code == 2
  err = capsys.readouterr().err
  assert err == line + "\n"


@pytest.mark.parametrize("exc", [TypeError("unsupported operand"), KeyError("missing")])
def test_type_and_key_errors_are_bugs_with_their_traceback(exc):
  """Issue 40: validation raises ValueError naming the field; a TypeError or KeyError reaching
  the top is a bug (or a missing check) and keeps its traceback."""
  with pytest.raises(type(exc)):
    cli.run_cli(_raise(exc), argv=["prog"])


def test_wrapped_traceback_messages_give_the_innermost_error():
  """ml_collections re-raises a config file's error with a formatted traceback in the message."""
  try:
    try:
      raise ValueError("config argument 'x' is not one of [None, 'smoke']")
    except ValueError:
      raise ValueError("Error whilst parsing config file:\n\nTraceback (most recent call last):\n"
                       '  File "c.py", line 1\nValueError: ...')  # pylint: disable=raise-missing-from
  except ValueError as exc:
    assert cli.error_line(exc) == "config argument 'x' is not one of [None, 'smoke']"


def test_bugs_propagate_with_their_traceback(monkeypatch):
  monkeypatch.delenv(cli.VERBOSE_ENV, raising=False)
  with pytest.raises(ZeroDivisionError):
    cli.run_cli(_raise(ZeroDivisionError("division by zero")), argv=["prog"])


def test_result_is_returned():
  assert cli.run_cli(lambda: 7, argv=["prog"]) == 7


@pytest.mark.parametrize("argv, env, verbose", [
    (["prog"], "", False), (["prog", "--verbose"], "", True), (["prog", "--verbose=false"], "", False),
    (["prog", "--verbose=1"], "", True), (["prog"], "1", True), (["prog"], "0", False),
])
def test_verbose_requested(monkeypatch, argv, env, verbose):
  monkeypatch.setenv(cli.VERBOSE_ENV, env)
  assert cli.verbose_requested(argv) is verbose


def test_verbose_prints_traceback_then_the_line(capsys, monkeypatch):
  monkeypatch.delenv(cli.VERBOSE_ENV, raising=False)
  with pytest.raises(SystemExit):
    cli.run_cli(_raise(ValueError("bad field")), argv=["prog", "--verbose"])
  err = capsys.readouterr().err
  assert "Traceback (most recent call last)" in err
  assert err.splitlines()[-1] == "error: bad field"


# --- Run failures and storage errors: their own exit statuses, one line.

@pytest.mark.parametrize("exc, status, line", [
    (cli.TrainingDiverged("step 4: loss is nan"), cli.EXIT_DIVERGED, "error: step 4: loss is nan"),
    (OSError(errno.EFBIG, "File too large", "/w/metrics.jsonl"), cli.EXIT_IO_ERROR,
     "error: could not write /w/metrics.jsonl: File too large (a file-size limit; ulimit -f); "
     "free space or raise the limit and rerun"),
    (OSError(errno.ENOSPC, "No space left on device"), cli.EXIT_IO_ERROR,
     "error: could not write: No space left on device; free space and rerun"),
    # tensorstore's (orbax's) report of a failed write, a ValueError
    (ValueError('OUT_OF_RANGE: Error writing "x" in OCDBT database at local file "/c/": Failed '
                'writing: "/c/d/ab12": Failed to write 9 bytes to file 20: Disk quota exceeded '
                "[os_error_code='122']"), cli.EXIT_IO_ERROR,
     "error: could not write /c/d/ab12: Disk quota exceeded (a disk quota); free space or raise "
     "the quota and rerun"),
    # Rust's std::io::Error (safetensors)
    (RuntimeError("Error while serializing: I/O error: Input/output error (os error 5)"),
     cli.EXIT_IO_ERROR, "error: could not write: Input/output error (the storage reported a "
     "hardware or network error); check the storage and rerun"),
    # other OS errors stay user errors
    (OSError(errno.EACCES, "Permission denied", "/w"), cli.EXIT_USER_ERROR,
     "error: [Errno 13] Permission denied: '/w'"),
])
def test_run_failures_and_storage_errors_exit_with_their_status(capsys, monkeypatch, exc, status,
                                                                 line):
  monkeypatch.delenv(cli.VERBOSE_ENV, raising=False)
  with pytest.raises(SystemExit) as stop:
    cli.run_cli(_raise(exc), argv=["prog"])
  assert stop.value.code == status
  assert capsys.readouterr().err == line + "\n"


def test_a_message_with_an_unrelated_os_error_is_a_bug_still(monkeypatch):
  monkeypatch.delenv(cli.VERBOSE_ENV, raising=False)
  with pytest.raises(RuntimeError):  # ENOENT is no storage failure: the traceback stays
    cli.run_cli(_raise(RuntimeError("lookup failed (os error 2)")), argv=["prog"])


@pytest.mark.parametrize("step, note", [
    (3, "the last good checkpoint is step 3 in /w/checkpoints; free space or raise the limit and "
        "rerun to resume"),
    (None, "no checkpoint had been written yet; free space or raise the limit and rerun to start "
           "the run again"),
])
def test_storage_failure_during_a_run_names_the_checkpoint_to_resume_from(step, note):
  failure = cli.storage_failure(OSError(errno.EFBIG, "File too large", "/w/checkpoints/6.tmp/d/x"),
                                checkpoint=(step, "/w/checkpoints"))
  assert failure.exit_code == cli.EXIT_IO_ERROR == 74
  assert str(failure) == ("could not write /w/checkpoints/6.tmp/d/x: File too large (a file-size "
                          f"limit; ulimit -f); {note}")
  # No file name: the folder written into.
  assert str(cli.storage_failure(OSError(errno.ENOSPC, "No space left on device"), where="/w")) == (
      "could not write into /w: No space left on device; free space and rerun")


def test_os_error_in_finds_the_file_in_the_traceback(tmp_path):
  def write_text(self):  # as epath's Path.write_text, which raises a bare [Errno 28]
    raise OSError(errno.ENOSPC, "No space left on device")
  target = tmp_path / "run" / "_METADATA"
  try:
    write_text(target)
  except OSError as exc:
    found = cli.os_error_in(exc, under=str(tmp_path / "run"))
    assert (found.errno, found.filename) == (errno.ENOSPC, str(target))
    assert cli.os_error_in(exc, under=str(tmp_path / "elsewhere")).filename is None


def test_an_open_progress_bar_is_closed_before_the_error_line(capsys, monkeypatch):
  monkeypatch.delenv(cli.VERBOSE_ENV, raising=False)
  def main():
    bar = tqdm.tqdm(total=6, desc="RL", file=sys.stderr, mininterval=0)
    bar.update(3)
    raise cli.TrainingDiverged("diverged")
  with pytest.raises(SystemExit):
    cli.run_cli(main, argv=["prog"])
  bar_line, error, end = capsys.readouterr().err.split("\n")
  # The bar's line ends (closed: its last draw, then a newline) before the error line, and
  # nothing is drawn after it.
  assert bar_line.startswith("\rRL:") and bar_line.split("\r")[-1].startswith("RL:  50%")
  assert (error, end) == ("error: diverged", "")
  assert not tqdm.tqdm._instances


@pytest.mark.parametrize("name, opener", [("metrics.jsonl", open),
                                          ("metrics.jsonl.gz", gzip.open)])
def test_metrics_with_bytes_that_are_not_utf8_are_named(tmp_path, name, opener):
  path = str(tmp_path / name)
  with opener(path, "wb") as f:
    f.write(b'{"step": 1}\n{"step": 2, "note": "\xe9"}\n')
  with pytest.raises(ValueError, match=re.escape(
      f"{path}:2: not valid UTF-8 (byte 0xe9 at column 22)")):
    metrics_log.read_metrics(path)
