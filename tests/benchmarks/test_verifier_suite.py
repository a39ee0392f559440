"""benchmarks/verifier_suite.py on a small fixture of Math-Verify-style test files (nothing is
downloaded), and the arithmetic of the committed benchmarks/results/verifier_suite.json."""

import json
import os
import subprocess
import sys

from benchmarks import verifier_suite as suite
from tests.timeouts import hang_timeout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = '''
import math
import pytest

@pytest.mark.parametrize("gold,pred,expected", [
    ("$2$", "$\\\\boxed{2}$", 1),
    ("$2$", "The answer is 3", 0),
    ("$x$", "$x$", 1),
    ("$1 - 1/e$", "$1 + 1/e$", 1),
])
def test_a(gold, pred, expected):
  assert compare_strings(gold, pred, match_types=["latex", "expr"]) == expected

@pytest.mark.parametrize("gold, pred, strict, expected", [("$f(x)$", "$f(y)$", False, 1)])
def test_b(gold, pred, strict, expected):
  assert compare_strings(gold, pred, match_types=["latex"], strict=strict) == expected

@pytest.mark.parametrize("gold, pred, expected", [(f"{math.pi:.3f}", "3.142", 1)])
def test_not_literal(gold, pred, expected):
  pass

def test_plain():
  assert True
'''
REASONS = {("test_fx.py::test_a", "$1 - 1/e$", "$1 + 1/e$"):
           (suite.RLSCALE_RIGHT, False, "a wrong answer the suite rewards")}


def _fixture(tmp_path):
  (tmp_path / "test_fx.py").write_text(FIXTURE)
  (tmp_path / "helpers.py").write_text("not a test file")
  return str(tmp_path)


def test_read_triples_takes_literal_rows_and_the_test_options(tmp_path):
  triples, skipped = suite.read_triples(_fixture(tmp_path))
  assert skipped == 1  # the f-string row is never evaluated
  assert [(t.test, t.gold, t.pred, t.expected) for t in triples] == [
      ("test_fx.py::test_a", "$2$", "$\\boxed{2}$", 1),
      ("test_fx.py::test_a", "$2$", "The answer is 3", 0),
      ("test_fx.py::test_a", "$x$", "$x$", 1),
      ("test_fx.py::test_a", "$1 - 1/e$", "$1 + 1/e$", 1),
      ("test_fx.py::test_b", "$f(x)$", "$f(y)$", 1)]
  assert triples[0].options == {"match_types": ["latex", "expr"]}
  assert triples[4].options == {"match_types": ["latex"], "strict": False}


def test_summary_arithmetic_on_given_scores(tmp_path):
  triples, _ = suite.read_triples(_fixture(tmp_path))
  boxed = [1, 0, 1, 0, 0]
  verbatim = [1, 1, 1, 0, 0]
  report = suite.summarize(triples, boxed, verbatim, [1, 0, 1, 1, 1], REASONS)
  # expected verdicts 1 0 1 1 1: boxed agrees on rows 1-3 (3/5 = 60%), verbatim on rows 1 and 3
  # (2/5 = 40%), Math-Verify on all five.
  assert report["agreement"] == {
      "boxed": {"agree": 3, "total": 5, "percent": 60.0},
      "verbatim": {"agree": 2, "total": 5, "percent": 40.0},
      "math_verify": {"agree": 5, "total": 5, "percent": 100.0}}
  # Disagreements in either feed: row 2 (verbatim only), 4 and 5; reasons count boxed ones.
  assert [(d["gold"], d["reason"]) for d in report["disagreements"]] == [
      ("$2$", "unexplained"), ("$1 - 1/e$", suite.RLSCALE_RIGHT), ("$f(x)$", "unexplained")]
  assert report["disagreement_reasons"] == {
      suite.RLSCALE_RIGHT: 1, suite.CONVENTION: 0, suite.BROKEN: 0, suite.UNSUPPORTED: 0,
      "unexplained": 1}
  # Row 2 is wrong (expected 0) and scored 1 verbatim; row 4 is wrong by the table but scored 0.
  assert [(f["pred"], f["verbatim"]) for f in report["false_positives"]] == [
      ("The answer is 3", 1)]
  assert report["stale_reasons"] == []
  assert suite.summarize(triples, [1, 0, 1, 1, 1], [1, 0, 1, 1, 1], None, REASONS)[
      "stale_reasons"] == [list(next(iter(REASONS)))]  # no longer a disagreement
  kinds = report["agreement_by_kind"]
  assert sum(k["boxed"]["total"] for k in kinds.values()) == 5
  assert sum(k["boxed"]["agree"] for k in kinds.values()) == 3


def test_kind_and_feed():
  assert suite.kind_of("$x \\le 5$", "$x$") == "equations and relations"
  assert suite.kind_of("$\\boxed{1}\\boxed{2}$", "1") == "several boxed"
  assert suite.kind_of("$[0, 1)$", "$x$") == "intervals"
  assert suite.kind_of("$1, 2$", "$x$") == "sets / tuples / lists"
  assert suite.kind_of("1,000.5", "1") == "plain numbers"
  assert suite.boxed_feed("$\\frac13 $") == "\\boxed{\\frac13}"
  assert suite.boxed_feed("1.22") == "\\boxed{1.22}"
  assert suite.boxed_feed("Answer $9$") == "Answer $9$"  # prose stays as written
  assert suite.boxed_feed("so \\boxed{1}") == "so \\boxed{1}"


def _run(*args):
  env = dict(os.environ, PYTHONPATH=ROOT)
  return subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "verifier_suite.py"),
                         *args], capture_output=True, text=True, cwd=ROOT, env=env,
                        timeout=hang_timeout(120))


def test_script_writes_the_report_and_refuses_a_missing_folder(tmp_path):
  out = tmp_path / "out.json"
  (tmp_path / "suite").mkdir()
  done = _run("--math-verify-tests", _fixture(tmp_path / "suite"), "--out", str(out),
              "--no-math-verify")
  assert done.returncode == 0, done.stderr[-2000:]
  report = json.loads(out.read_text())
  assert report["triples"] == 5 and report["skipped_not_literal"] == 1
  assert "math_verify" not in report["agreement"]
  missing = _run("--math-verify-tests", str(tmp_path / "nope"))
  assert missing.returncode == 2
  assert missing.stderr.strip().splitlines() == [
      f"error: --math-verify-tests {str(tmp_path / 'nope')!r} is not a directory"]


def test_committed_result_is_consistent():
  with open(os.path.join(ROOT, "benchmarks", "results", "verifier_suite.json")) as f:
    report = json.load(f)
  kinds = report["agreement_by_kind"].values()
  for feed in ("boxed", "verbatim"):
    assert sum(k[feed]["total"] for k in kinds) == report["triples"]
    assert sum(k[feed]["agree"] for k in kinds) == report["agreement"][feed]["agree"]
    wrong = sum(d[feed] != d["expected"] for d in report["disagreements"])
    assert report["agreement"][feed]["agree"] == report["triples"] - wrong
  assert sum(report["disagreement_reasons"].values()) == sum(
      d["boxed"] != d["expected"] for d in report["disagreements"])
  # The bar: >= 90% fed boxed, every disagreement explained, no wrong answer rewarded.
  assert report["agreement"]["boxed"]["percent"] >= 90.0
  assert report["disagreement_reasons"]["unexplained"] == 0
  assert all(d["reason"] in suite.REASON_KINDS for d in report["disagreements"])
  assert report["false_positives"] == []
  assert report["stale_reasons"] == []  # every row of the table explains a disagreement
