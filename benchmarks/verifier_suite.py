r"""rlscale's verifier against Math-Verify's own test suite (a peer's expected verdicts).

  python benchmarks/verifier_suite.py --math-verify-tests DIR [--out FILE] [--source TEXT]

DIR is the `tests/` folder of a local checkout of huggingface/Math-Verify (nothing is
downloaded). Every `@pytest.mark.parametrize` row of a test whose arguments name a gold, a
prediction and an expected verdict is read with `ast.literal_eval` (the files are never
imported or run); rows whose values are not literals (an f-string) are counted as skipped.
Each (prediction, gold, expected) triple is scored by `rlscale.tasks.verifier.verify` twice:

  * boxed: a bare prediction (one math span such as `$x$`, or text without prose) is wrapped
    in `\boxed{}`, the way a policy is asked to answer; a prediction with prose stays as it is;
  * verbatim: the prediction exactly as the test writes it.

and, when the `math_verify` package is installed, by Math-Verify itself (the test's own
extraction targets, precision and flags; timeouts off, as it must run off the main thread).
The gold is rlscale's reference as written. The JSON (default
benchmarks/results/verifier_suite.json) holds agreement with the expected verdicts overall and
per kind (`kind_of`), every disagreement of the boxed feed with its reason from `REASONS` (or
"unexplained"), and the false positives: rows rlscale scores 1 whose answer is wrong (expected 0,
or a row the table marks as a wrong answer the suite rewards), in either feed.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import re
import sys
import time
from typing import Any, Callable, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position (after the sys.path line)
from rlscale import outputs

RLSCALE_RIGHT = "rlscale right"
CONVENTION = "convention"
BROKEN = "broken test string"
UNSUPPORTED = "not supported"
REASON_KINDS = (RLSCALE_RIGHT, CONVENTION, BROKEN, UNSUPPORTED)


@dataclasses.dataclass(frozen=True)
class Triple:
  """One row of the peer suite.

  Attributes:
    test: "file.py::function" the row comes from.
    gold: the reference as the test writes it.
    pred: the prediction as the test writes it.
    expected: the test's expected verdict, 0 or 1.
    options: the row's other parameters (`strict`, `precision`, `allow_set_relation_comp`) and
      the test call's `match_types`, for running Math-Verify as the test does.
  """
  test: str
  gold: str
  pred: str
  expected: int
  options: dict


_GOLD, _PRED = ("gold",), ("pred",)
_VERDICT = ("expected", "result")


def _names(node: ast.expr) -> Optional[list[str]]:
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    return [s.strip() for s in node.value.split(",")]
  return None


def _call_keywords(function: ast.FunctionDef) -> dict:
  """Literal keyword arguments (match_types, precision, ...) of the test's compare call."""
  found = {}
  for node in ast.walk(function):
    if isinstance(node, ast.Call):
      for kw in node.keywords:
        if kw.arg in ("match_types", "precision"):
          try:
            found[kw.arg] = ast.literal_eval(kw.value)
          except ValueError:
            pass
  return found


def read_triples(tests_dir: str) -> tuple[list[Triple], int]:
  """All (gold, pred, expected) rows of the parametrized tests under `tests_dir`.

  Returns:
    (triples in file and row order, number of rows skipped because not literal).

  Raises:
    FileNotFoundError: `tests_dir` holds no test_*.py file.
  """
  files = sorted(f for f in os.listdir(tests_dir) if f.startswith("test_") and f.endswith(".py"))
  if not files:
    raise FileNotFoundError(f"--math-verify-tests {tests_dir!r}: no test_*.py files there")
  triples, skipped = [], 0
  for name in files:
    with open(os.path.join(tests_dir, name), encoding="utf-8") as f:
      tree = ast.parse(f.read(), filename=name)
    for function in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
      for deco in function.decorator_list:
        if not (isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") == "parametrize"
                and len(deco.args) >= 2):
          continue
        names = _names(deco.args[0])
        if not names or "gold" not in names or "pred" not in names or not any(
            v in names for v in _VERDICT):
          continue
        verdict = next(v for v in _VERDICT if v in names)
        call = _call_keywords(function)
        for row in getattr(deco.args[1], "elts", []):
          try:
            values = dict(zip(names, ast.literal_eval(row)))
          except ValueError:
            skipped += 1
            continue
          extra = {k: v for k, v in values.items() if k not in ("gold", "pred", verdict)}
          triples.append(Triple(f"{name}::{function.name}", values["gold"], values["pred"],
                                int(values[verdict]), {**call, **extra}))
  return triples, skipped


_MATRIX_RE = re.compile(r"matrix")
_RELATION_RE = re.compile(r"\\(?:le|ge|leq|geq|ne|neq|leqslant|geqslant)(?![A-Za-z])|[<>=:]"
                          r"|\\approx")
_INTERVAL_RE = re.compile(r"\\infty|\\cup|[\[(][^()\[\]]*,[^()\[\]]*[\])]")
_SET_RE = re.compile(r"\\\{|[,;]|\\text\{ ?(?:and|or) ?\}| and | or ")
_NUMBER_RE = re.compile(r"^[\s$]*[-+]?(?:\d[\d,]*)?(?:\.\d+)?%?[\s$]*$")


def kind_of(gold: str, pred: str) -> str:
  """The answer kind of a row, from the gold (and the prediction for boxes and prose).

  First match wins: "several boxed" (two or more `\\boxed` on either side), "long response"
  (a prediction over 120 characters), "matrices", "equations and relations" (`=`, `<`, `>`,
  `:`, `\\le`, ...), "intervals", "plain numbers" (digits, commas and a point: "1,000.5",
  "0,111"), "sets / tuples / lists", "expressions".
  """
  both = gold + " " + pred
  if gold.count("\\boxed") >= 2 or pred.count("\\boxed") >= 2:
    return "several boxed"
  if len(pred) > 120:
    return "long response"
  if _MATRIX_RE.search(both):
    return "matrices"
  if _RELATION_RE.search(gold):
    return "equations and relations"
  if _INTERVAL_RE.search(gold):
    return "intervals"
  if _NUMBER_RE.match(gold):
    return "plain numbers"
  if _SET_RE.search(gold):
    return "sets / tuples / lists"
  return "expressions"


_DELIMITED_RE = re.compile(r"\s*(\$\$|\$|\\\[|\\\()(.*?)(\$\$|\$|\\\]|\\\))\s*", re.DOTALL)
_PROSE_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{4,}")
_PAIRS = {"$$": "$$", "$": "$", "\\[": "\\]", "\\(": "\\)"}


def boxed_feed(pred: str) -> str:
  """The prediction as a policy asked for `\\boxed{}` would write it.

  A prediction that already has `\\boxed`, or has prose (a word of four or more letters that is
  not a LaTeX command) outside one math span, is left as it is; a bare answer (`$x$`,
  `\\[x\\]`, `x`) becomes `\\boxed{x}`.
  """
  if "\\boxed" in pred:
    return pred
  m = _DELIMITED_RE.fullmatch(pred)
  if m and _PAIRS[m.group(1)] == m.group(3) and "$" not in m.group(2):
    return "\\boxed{" + m.group(2).strip() + "}"
  if "$" in pred or _PROSE_RE.search(pred):
    return pred
  return "\\boxed{" + pred.strip() + "}"


# Why rlscale's verdict differs from the suite's expected one (in the boxed feed, or in the
# verbatim feed only), keyed by (test, gold, pred): (reason kind, whether the prediction's answer
# is right, explanation). A row of the table decides `wrong_answer`; other rows are wrong
# exactly when expected 0. The table grows with the suite; a row is never edited to fit.
_MV = "test_all.py::"
REASONS: dict[tuple[str, str, str], tuple[str, bool, str]] = {
    (_MV + "test_number_extraction", "2.74", "Soucis : 2,74 $ a.."): (
        CONVENTION, True, "a decimal comma is read only in an answer that is just the number, "
        "against a reference with a decimal point; in prose 2,74 is the list 2, 74"),
    (_MV + "test_number_extraction", "1000.99", "so the number is 10 which is 1,000.99m\u00b2"): (
        CONVENTION, True, "a letter glued to a number (1,000.99m) makes it a product, so the "
        "last-number fallback takes nothing; only units written apart or in \\text are dropped"),
    (_MV + "test_number_extraction", "1000.99", "not it's not 10 it's 1,000.99m\u00b2"): (
        CONVENTION, True, "as above: 1,000.99m is read as a product with m"),
    (_MV + "test_number_extraction", "1000.99", "1000,99"): (
        CONVENTION, True, "verbatim feed only: in prose the comma separates 1000 and 99; boxed, "
        "1000,99 is read with a decimal comma against 1000.99"),
    (_MV + "test_latex_notation", "$9$", "Answer $ \n 9 \n $"): (
        CONVENTION, True, "Math-Verify refuses inline maths that spans lines; the answer 9 is "
        "right, and rlscale reads it"),
    (_MV + "test_latex_notation", "$9$", "Answer \\( \n 9 \n \\)"): (
        CONVENTION, True, "as above, for \\( ... \\)"),
    (_MV + "test_latex_notation", "$10/9$", "Answer $ \\frac{1}{2} \\$ = \\frac{10}{9} $"): (
        RLSCALE_RIGHT, False, "the final expression is the chain 1/2 $ = 10/9, whose link is "
        "false; a chain scores only when every link holds"),
    (_MV + "test_latex_notation_math",
     "In order for $N$ to be divisible by 12, $N$ must be divisible by $4$ and $3$. That means "
     "the last two digits $AB$ must form a multiple of $4.$ Since $A$ and $B$ are nonzero digits,"
     " the smallest possible $14{,}9AB$ that is divisible by 4 is $14{,}912.$ Unfortunately, this"
     " number is not a multiple of $3$, since $1 + 4 + 9 + 1 + 2 = 17.$ However, our next "
     "possibility, $14{,}916,$ is a multiple of $3,$ since $1 + 4 + 9 + 1 + 6 = 21.$ Therefore, "
     "$\\boxed{14{,}916}$ is our answer.", None): (
        CONVENTION, True, "the response has no box and ends in prose with numbers (\"by 3 and "
        "4\"): the last-number fallback takes 4; Math-Verify reads the \"final answer is\" line"),
    (_MV + "test_relations_math", "$x = 11$", "$x = 5+5+1 = 7 =11$"): (
        RLSCALE_RIGHT, False, "the chain has the false link 11 = 7 (and 7 = 11): a response "
        "that states a falsehood is not rewarded for its last value"),
    (_MV + "test_relations_math", "$x = 1/3$", "$x = 5+5+1 = 1/3 \\approx 11$"): (
        RLSCALE_RIGHT, False, "false links 11 = 1/3 and 1/3 ~ 11"),
    (_MV + "test_relations_math", "$1/3$", "$x=1/3\\approx1.3$"): (
        RLSCALE_RIGHT, False, "1.3 is not an approximation of 1/3 (1% tolerance on \\approx)"),
    (_MV + "test_relations_math", "$1 = \\zzz = x = 0$", "$0$"): (
        RLSCALE_RIGHT, False, "the reference is a false chain (1 = 0) with an unknown command; "
        "an unreadable reference scores only identical text"),
    (_MV + "test_relations_math", "$z = 1 + 1 = 2$", "$z = 3+3 = 2$"): (
        RLSCALE_RIGHT, False, "the response's link 3+3 = 2 is false"),
    (_MV + "test_complex_math_expressions",
     "$\\begin{pmatrix}-\\\frac{7}{4}&-2\\\\4&\\frac{1}{4}\\\\\\end{pmatrix}$",
     "$\\begin{pmatrix}-\\\frac{7}{4}&-2\\\\4&\\frac{1}{4}\\\\\\end{pmatrix}$"): (
        BROKEN, True, "\"\\f\" in a non-raw string is a form feed (U+000C), which the verifier "
        "refuses in a response"),
    (_MV + "test_complex_math_expressions",
     "$(\\begin{pmatrix}\\frac{1}{3}\\\\ \\frac{1}{5} \\end{pmatrix})$",
     "$\\begin{pmatrix}0.33\\\\0.2 \\end{pmatrix}$"): (
        CONVENTION, False, "0.33 against 1/3 is outside task.rel_tol (1e-6); Math-Verify rounds "
        "to 2 decimals here"),
    (_MV + "test_complex_math_expressions", "$(\\frac{3}{5},\\frac{8}{3}]$",
     "$(0.6,2.6667]$"): (
        CONVENTION, False, "2.6667 against 8/3 is outside task.rel_tol (1e-6)"),
    (_MV + "test_math_extraction_additional_cases", "$(1,3)$", "${1,3}$"): (
        CONVENTION, False, "{1, 3} is a set; (1, 3) a pair or an open interval, never a set"),
    (_MV + "test_math_extraction_additional_cases", "$10455$", None): (
        CONVENTION, True, "the response's last \\boxed{} is 255; rlscale takes the last box, "
        "Math-Verify a later \"final answer is\" line"),
    (_MV + "test_set_rel_assymetry", "$x \\in [-2,7]$", "$-2 \\\\le x \\\\le 7$"): (
        CONVENTION, True, "with allow_set_relation_comp=False Math-Verify refuses an inequality "
        "against a set reference; rlscale reads -2 <= x <= 7 as [-2, 7] either way"),
    ("test_numina_cases.py::test_numina_cases", "\\\\boxed{W(n) = 1 \\\\text{ and } W(n) = -1",
     "W(x)=1orW(x)=-1"): (
        BROKEN, True, "the reference's box is never closed and its backslashes are doubled; the "
        "response names the function of x, the reference of n"),
    ("test_open_thoughts.py::test_open_thoughts", "\\boxed{1} no no no no no \\boxed{2}",
     "$\\boxed{1,2}$"): (
        CONVENTION, True, "a reference with several boxes means all of them (issue 23); "
        "Math-Verify joins boxes only when they are close together"),
    ("test_strict.py::test_strict_variable_comparison", "$f(x)$", "$f(y)$"): (
        CONVENTION, False, "strict=False lets Math-Verify rename variables; rlscale never does"),
    ("test_yujianll.py::test_string_extraction", "$F_n = \\sum_{k=0}^{n-1} F_k F_{n-k-1}$",
     "$F_n = \\sum_{k=0}^{n-1} F_{n-k-1} F_k$"): (
        UNSUPPORTED, True, "\\sum is not in the parser's whitelist"),
    ("test_yujianll.py::test_string_extraction", "$1 - \\frac{1}{\\mathrm{e}}$",
     "$1 + \\frac{1}{\\mathrm{e}}$"): (
        RLSCALE_RIGHT, False, "1 + 1/e is not 1 - 1/e: the suite rewards a wrong answer"),
}


def reason_for(reasons: dict, test: str, gold: str, pred: str) -> Optional[tuple]:
  """The table row of (test, gold, pred); a row whose pred is None matches any prediction of
  that test and gold (for predictions too long to repeat in the table)."""
  return reasons.get((test, gold, pred)) or reasons.get((test, gold, None))


def _rlscale_scores(triples: Sequence[Triple],
                    feed: Callable[[str], str]) -> tuple[list[float], float]:
  """rlscale's rewards per row and the slowest row's wall time in seconds (the worker is
  started before the first timed row; the result cache is cleared so every row is computed)."""
  from rlscale.tasks import verifier  # pylint: disable=g-import-not-at-top
  verifier.verify("\\boxed{x+1}", "1+x")
  verifier._cache.clear()  # pylint: disable=protected-access (measure work, not the cache)
  scores, slowest = [], 0.0
  for t in triples:
    start = time.perf_counter()
    scores.append(verifier.verify(feed(t.pred), t.gold).reward)
    slowest = max(slowest, time.perf_counter() - start)
  return scores, slowest


def _math_verify_scores(triples: Sequence[Triple]) -> Optional[list[Optional[float]]]:
  """Math-Verify's verdicts as the tests compute them, or None when it is not installed."""
  try:
    import math_verify  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  scores = []
  for t in triples:
    targets = []
    for kind in t.options.get("match_types", ["latex", "expr"]):
      targets.append(math_verify.LatexExtractionConfig(boxed_match_priority=0) if kind == "latex"
                     else math_verify.ExprExtractionConfig())
    flags = {k: t.options[k] for k in ("strict", "allow_set_relation_comp") if k in t.options}
    try:
      gold = math_verify.parse(t.gold, targets, parsing_timeout=None)
      pred = math_verify.parse(t.pred, targets, parsing_timeout=None)
      scores.append(float(math_verify.verify(
          gold, pred, float_rounding=t.options.get("precision", 6), timeout_seconds=None,
          **flags)))
    except Exception:  # pylint: disable=broad-except (a crash is recorded as no verdict)
      scores.append(None)
  return scores


def _agreement(rows: list[dict], key: str) -> dict:
  agree = sum(r[key] == r["expected"] for r in rows)
  return {"agree": agree, "total": len(rows),
          "percent": round(100.0 * agree / len(rows), 1) if rows else None}


def summarize(triples: Sequence[Triple], boxed: Sequence[float], verbatim: Sequence[float],
              theirs: Optional[Sequence[Optional[float]]], reasons: dict = REASONS) -> dict:
  """The report: agreement overall and per kind, disagreements with reasons, false positives.

  Args:
    triples: the suite's rows.
    boxed, verbatim: rlscale's rewards (0.0 or 1.0) per row in the two feeds.
    theirs: Math-Verify's verdicts per row (None where it crashed), or None if not run.
    reasons: (test, gold, pred) -> (reason kind, answer right, explanation), see `REASONS`.

  Returns:
    A JSON-serialisable dict (see the module docstring).
  """
  rows = []
  for i, t in enumerate(triples):
    row_reason = reason_for(reasons, t.test, t.gold, t.pred)
    wrong = t.expected == 0 if row_reason is None else not row_reason[1]
    rows.append({"test": t.test, "gold": t.gold, "pred": t.pred, "expected": t.expected,
                 "kind": kind_of(t.gold, t.pred), "boxed": int(boxed[i]),
                 "verbatim": int(verbatim[i]), "wrong_answer": wrong,
                 "math_verify": None if theirs is None or theirs[i] is None else int(theirs[i])})
  kinds = sorted({r["kind"] for r in rows})
  disagreements = []
  for r in rows:
    if r["boxed"] != r["expected"] or r["verbatim"] != r["expected"]:
      kind, _, why = reason_for(reasons, r["test"], r["gold"], r["pred"]) or (
          "unexplained", None, "")
      disagreements.append({**r, "reason": kind, "explanation": why})
  counts = {k: sum(d["reason"] == k for d in disagreements if d["boxed"] != d["expected"])
            for k in (*REASON_KINDS, "unexplained")}
  false_positives = [r for r in rows if r["wrong_answer"] and (r["boxed"] or r["verbatim"])]
  used = {(d["test"], d["gold"], p) for d in disagreements for p in (d["pred"], None)}
  stale = [list(k) for k in reasons if k not in used]
  report = {
      "triples": len(rows),
      "agreement": {"boxed": _agreement(rows, "boxed"), "verbatim": _agreement(rows, "verbatim")},
      "agreement_by_kind": {k: {"boxed": _agreement([r for r in rows if r["kind"] == k], "boxed"),
                                "verbatim": _agreement([r for r in rows if r["kind"] == k],
                                                       "verbatim")} for k in kinds},
      "disagreement_reasons": counts,
      "false_positives": false_positives,
      "stale_reasons": stale,
      "disagreements": disagreements,
  }
  if theirs is not None:
    report["agreement"]["math_verify"] = _agreement(
        [r for r in rows if r["math_verify"] is not None], "math_verify")
  return report


def format_table(report: dict) -> str:
  """Agreement per kind (boxed and verbatim feeds), reasons and false positives as text."""
  line = lambda name, a: f"{name:26s} {a['boxed']['agree']:4d}/{a['boxed']['total']:<4d} " \
                         f"{a['verbatim']['agree']:4d}/{a['verbatim']['total']:<4d}"
  out = [f"{'kind':26s} {'boxed':9s} {'verbatim':9s}"]
  out += [line(k, v) for k, v in report["agreement_by_kind"].items()]
  out.append(line("all", report["agreement"]))
  out.append("boxed disagreements: " + ", ".join(
      f"{k} {n}" for k, n in report["disagreement_reasons"].items()))
  out.append(f"false positives (a wrong answer scored 1): {len(report['false_positives'])}")
  if "slowest_case_seconds" in report:
    out.append(f"slowest case (s): {report['slowest_case_seconds']}")
  return "\n".join(out)


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Command line; returns the exit status (2 with one `error:` line on bad input)."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--math-verify-tests", required=True,
                      help="the tests/ folder of a local huggingface/Math-Verify checkout")
  parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results",
                                                    "verifier_suite.json"),
                      help="output JSON file")
  parser.add_argument("--source", default="huggingface/Math-Verify tests/*.py",
                      help="where the tests come from (e.g. the commit), recorded in the JSON")
  parser.add_argument("--no-math-verify", action="store_true",
                      help="do not run Math-Verify even if it is installed")
  args = parser.parse_args(argv)
  if not os.path.isdir(args.math_verify_tests):
    print(f"error: --math-verify-tests {args.math_verify_tests!r} is not a directory",
          file=sys.stderr)
    return 2
  try:
    triples, skipped = read_triples(args.math_verify_tests)
  except (FileNotFoundError, SyntaxError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  boxed, boxed_s = _rlscale_scores(triples, boxed_feed)
  verbatim, verbatim_s = _rlscale_scores(triples, lambda p: p)
  theirs = None if args.no_math_verify else _math_verify_scores(triples)
  report = {"source": args.source, "skipped_not_literal": skipped,
            "slowest_case_seconds": {"boxed": round(boxed_s, 3), "verbatim": round(verbatim_s, 3)},
            **summarize(triples, boxed, verbatim, theirs)}
  outputs.write_atomic(args.out, json.dumps(report, indent=1, ensure_ascii=False) + "\n")
  print(format_table(report))
  return 0


if __name__ == "__main__":
  sys.exit(main())
