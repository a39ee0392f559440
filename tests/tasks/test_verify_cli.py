"""`python -m rlscale.verify`: one JSON object, exit status 0, no JAX import."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
  env = dict(os.environ, PYTHONPATH=ROOT)
  proc = subprocess.run([sys.executable, "-m", "rlscale.verify", *args], capture_output=True,
                        text=True, timeout=60, cwd=ROOT, env=env)
  return proc.returncode, proc.stdout


@pytest.mark.parametrize("args, reward, extracted, reason", [
    ((r"The answer is \boxed{\dfrac12}.", "0.5"), 1.0, r"\dfrac12", "correct: equal numbers"),
    (("--extract-order", "full", "(x+1)^2", "x^2+2x+1"), 1.0, "(x+1)^2",
     "correct: polynomial expansion"),
    (("17", "18"), 0.0, "17", "wrong: 17 != 18"),
    (("__import__('os').system('ls')", "0"), 0.0, None,
     "no answer found (tried boxed, answer_tag, gsm8k, last_number)"),
    (("--percent", r"\boxed{50\%}", "0.5"), 1.0, r"50\%", "correct: equal numbers"),
    (("--rel-tol", "2", "1", "1"), 0.0, None,
     "error: task.rel_tol must be a float in [0, 1), got 2.0"),
    (("only-one-argument",), 0.0, None, "bad command-line arguments"),
])
def test_cli_prints_one_json_object_and_exits_zero(args, reward, extracted, reason):
  code, out = _run(*args)
  assert code == 0
  assert json.loads(out) == {"reward": reward, "extracted": extracted, "reason": reason}


def test_cli_does_not_import_jax():
  code = ("import sys, rlscale.verify, rlscale.tasks;"
          "print(sorted(m for m in ('jax', 'sympy', 'tensorflow_datasets', 'reasoning_gym')"
          " if m in sys.modules))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=60, env=dict(os.environ, PYTHONPATH=ROOT)).stdout
  assert out.strip() == "[]"
