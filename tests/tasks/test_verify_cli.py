"""`python -m rlscale.verify`: one JSON object and exit status 0 for any texts, one `error:` line
and status 2 for bad arguments, no JAX import."""

import json
import os
import subprocess
import sys

import pytest

from rlscale import verify
from rlscale.tasks import verifier
from tests.tasks.test_verifier_table import INTERVAL_ROWS
from tests.tasks.test_verifier_table import LAST_NUMBER_ROWS
from tests.tasks.test_verifier_table import MATRIX_ROWS
from tests.tasks.test_verifier_table import MULTI_BOX_ROWS
from tests.tasks.test_verifier_table import NEW_KIND_ROWS
from tests.tasks.test_verifier_table import PERCENT_WORD_ROWS
from tests.tasks.test_verifier_table import RELATION_ROWS
from tests.tasks.test_verifier_table import SCIENTIFIC_ROWS
from tests.tasks.test_verifier_table import UNIT_ROWS
from tests.timeouts import hang_timeout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _process(*args):
  env = dict(os.environ, PYTHONPATH=ROOT)
  return subprocess.run([sys.executable, "-m", "rlscale.verify", *args], capture_output=True,
                        text=True, timeout=hang_timeout(30), cwd=ROOT, env=env)


def _run(*args):
  proc = _process(*args)
  return proc.returncode, proc.stdout


@pytest.mark.parametrize("args, reward, extracted, reason", [
    ((r"The answer is \boxed{\dfrac12}.", "0.5"), 1.0, r"\dfrac12", "correct: equal numbers"),
    (("--extract-order", "full", "(x+1)^2", "x^2+2x+1"), 1.0, "(x+1)^2",
     "correct: polynomial expansion"),
    (("17", "18"), 0.0, "17", "wrong: 17 != 18"),
    (("__import__('os').system('ls')", "0"), 0.0, None,
     "no answer found (tried boxed, answer_tag, gsm8k, last_number)"),
    (("--percent", r"\boxed{50\%}", "0.5"), 1.0, r"50\%", "correct: equal numbers"),
    # Equal values written differently: was "correct: identical".
    (("1e3", "1000"), 1.0, "1e3", "correct: same expression after parsing"),
])
def test_cli_prints_one_json_object_and_exits_zero(args, reward, extracted, reason):
  code, out = _run(*args)
  assert code == 0
  assert json.loads(out) == {"reward": reward, "extracted": extracted, "reason": reason}


@pytest.mark.parametrize("args, line", [
    # Each printed a JSON reward and exited 0, like an answer.
    (("--rel-tol=abc", "1", "1"), "error: argument --rel-tol: invalid float value: 'abc'"),
    (("--rel-tol", "2", "1", "1"), "error: task.rel_tol must be a float in [0, 1), got 2.0"),
    (("only-one-argument",), "error: the following arguments are required: reference"),
])
def test_bad_arguments_print_one_error_line_and_exit_2(args, line):
  proc = _process(*args)
  assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", line + "\n")


def test_cli_does_not_import_jax():
  code = ("import sys, rlscale.verify, rlscale.tasks;"
          "print(sorted(m for m in ('jax', 'sympy', 'tensorflow_datasets', 'reasoning_gym')"
          " if m in sys.modules))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=hang_timeout(30), env=dict(os.environ, PYTHONPATH=ROOT)).stdout
  assert out.strip() == "[]"


def _cli_args(row):
  """Command-line arguments that ask the CLI what `verifier.verify` is asked for a table row."""
  response, reference, _, overrides = row
  flags = {"percent": ["--percent"], "extract_order": ["--extract-order", "{}"],
           "rel_tol": ["--rel-tol", "{}"]}
  args = []
  for name, value in overrides.items():
    args += [a.format(value) for a in flags[name]] if value is not True else flags[name]
  return (*args, "--", response, reference)


def _api(row):
  response, reference, _, overrides = row
  score = verifier.verify(response, reference, verifier.VerifierConfig(**overrides))
  return {"reward": score.reward, "extracted": score.extracted, "reason": score.reason}


@pytest.mark.parametrize("row", NEW_KIND_ROWS, ids=[f"row{i}" for i in range(len(NEW_KIND_ROWS))])
def test_cli_main_answers_as_the_api_for_every_new_row(row, capsys):
  # In process (the same `main` that `python -m rlscale.verify` runs): one worker start for all.
  assert verify.main(_cli_args(row)) == 0
  printed = json.loads(capsys.readouterr().out)
  assert printed == _api(row) and printed["reward"] == row[2]


@pytest.mark.parametrize("row", [INTERVAL_ROWS[1], UNIT_ROWS[0], SCIENTIFIC_ROWS[0],
                                 PERCENT_WORD_ROWS[2], LAST_NUMBER_ROWS[0], MULTI_BOX_ROWS[1],
                                 RELATION_ROWS[1], MATRIX_ROWS[0]])
def test_cli_process_answers_as_the_api_for_each_new_kind(row):
  code, out = _run(*_cli_args(row))
  assert code == 0 and json.loads(out) == _api(row)
