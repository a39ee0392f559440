"""Hostile model output: reward 0 with a reason, quickly, with no side effect, never raising.

The wall-clock bound asserted here only says "does not hang": it allows for a loaded 2-core CI
machine and for a worker restart (sympy import) after a kill. The measured times are in
benchmarks/results/verifier.json (hostile inputs: milliseconds; the hard limit fires at ~1.0 s).
"""

import os
import time

import pytest

from rlscale.tasks import reasoning_gym_source
from rlscale.tasks import verifier
from rlscale.tasks import worker

SAFETY_S = 10.0


def _hostile(marker):
  return [
      f"__import__('os').system('touch {marker}')",
      rf"\boxed{{__import__('os').system('touch {marker}')}}",
      f"<answer>exec(\"open('{marker}','w')\")</answer>",
      "9**9**9**9", r"\boxed{9**9**9**9}", r"\boxed{9^{9^{9^{9}}}}",
      r"\boxed{10^{10^{10}}}", r"\boxed{(a+b+c+d+e+f+g+h)^{40}}",
      "7" * 100_000, "{" * 100_000, r"\boxed{" * 20_000,
      r"\boxed{\frac{1}{2}", r"\boxed{{{{{{}", "}}}}\\boxed{1}}}}",
      "17\x00", "\x00" * 10, "\u202e71", "1\u200b7", "\ud800", "\uff11\uff17", "\u0661\u0667",
      "\U0001F600" * 100, r"\boxed{\input{/etc/passwd}}", r"\boxed{\write18{ls}}",
      r"\boxed{" + "(" * 5000 + "}", r"\boxed{" + "-" * 5000 + "1}",
      r"\boxed{" + "x+" * 5000 + "1}", r"\boxed{\sqrt[1000000]{2}}",
      r"\boxed{" + "1" * 500 + "}",
      r"\boxed{" + r"(0,1)\cup" * 60 + "(0,1)}", r"\boxed{" + "[" * 5000 + "}",
      r"\boxed{" + r"[1,\infty)\cup" * 20 + "[1, 2]}", "1 " + "cm/" * 20_000,
      r"\boxed{5\text{ cm}^{" + "9" * 400 + "}}",
      # issue 23's kinds: relations, sets, matrices, several boxes, math spans
      r"\boxed{" + "x < " * 100 + "1}", r"\boxed{\{" + "1," * 120 + r"1\}}",
      r"\boxed{1}" * 6000, r"\boxed{" + "(1,2)," * 60 + "(1,2)}", "\\(" * 30_000,
      r"\boxed{\begin{vmatrix}" + r" \\ ".join(
          " & ".join("abcdefghijklmnopqrstuvwxy"[5 * i + j] for j in range(5)) for i in range(5))
      + r"\end{vmatrix}}",
      r"\boxed{\begin{pmatrix}" + "9^{9} & " * 60 + r"9\end{pmatrix}^{9}}",
      r"\boxed{" + "|" * 200 + "}", r"\boxed{" + "x_{1}" * 100 + "}",
  ]


@pytest.fixture(scope="module", autouse=True)
def warm_worker():
  # Start the worker outside the timed calls (its startup is not part of the limit).
  verifier.verify(r"\boxed{x+1}", "1+x")


@pytest.mark.parametrize("index", range(len(_hostile("m"))))
def test_hostile_inputs_score_zero_fast_without_side_effects(tmp_path, index):
  marker = tmp_path / "pwned"
  text = _hostile(str(marker))[index]
  for config in (verifier.VerifierConfig(), verifier.VerifierConfig(extract_order="full")):
    start = time.monotonic()
    score = verifier.verify(text, "17", config)
    elapsed = time.monotonic() - start
    assert score.reward == 0.0 and score.reason, score
    assert elapsed < SAFETY_S, (text[:40], elapsed)
  assert not marker.exists() and os.listdir(tmp_path) == []


def test_non_string_inputs():
  assert verifier.verify(None, "1").reason == "response is not a string (NoneType)"
  assert verifier.verify(b"1", "1").reward == 0.0
  assert verifier.verify("1", None).reason == "reference is not a string (NoneType)"


def test_hard_time_limit_kills_and_restarts_the_worker():
  client = worker.client()
  restarts = client.restarts
  start = time.monotonic()
  response, reason = client.call({"op": "sleep", "seconds": 30}, timeout_s=0.3)
  assert response is None and reason == "timeout after 0.3 s"
  assert time.monotonic() - start < SAFETY_S
  assert client.restarts == restarts + 1
  # The next call starts a fresh worker and works.
  assert verifier.verify(r"\boxed{(x+1)^2}", "x^2+2x+1").reward == 1.0


def test_native_scorer_refuses_code_and_bounds_parse_expr(tmp_path):
  # countdown's own score_answer runs sympy parse_expr (eval) on the answer; rlscale's countdown
  # scorer reads it with an allow-list parser instead (more in test_native.py).
  task = reasoning_gym_source.ReasoningGymSource(
      "countdown", {}, seed=0, scorer="native",
      verifier_config=verifier.VerifierConfig(extract_order="full"))
  example = task.train_example(0)
  assert task.score(example.answer, example).reward == 1.0
  marker = tmp_path / "pwned"
  for text in (f"__import__('os').system('touch {marker}')", "getattr(1, 'real')",
               "(1).real", "lambda: 1"):
    score = task.score(text, example)
    assert score.reward == 0.0 and "not allowed" in score.reason, score
  start = time.monotonic()
  score = task.score("9**9**9**9", example)  # parse_expr would run for hours; `**` is refused
  assert score.reward == 0.0 and time.monotonic() - start < SAFETY_S, score
  assert not marker.exists()
  assert task.score(example.answer, example).reward == 1.0  # the worker recovered
