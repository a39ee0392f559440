"""rlscale.cli: user errors -> one line and exit status 2; bugs keep their traceback."""

import pytest

from rlscale import cli


def _raise(exc):
  def main():
    raise exc
  return main


@pytest.mark.parametrize("exc, line", [
    (ValueError("rl.group_size must be >= 1, got 0"), "error: rl.group_size must be >= 1, got 0"),
    (FileNotFoundError("data file 'x.jsonl' not found"), "error: data file 'x.jsonl' not found"),
    (KeyError("no such task"), "error: no such task"),  # not "'no such task'"
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
