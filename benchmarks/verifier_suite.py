r"""rlscale's verifier against Math-Verify's own test suite (a peer's expected verdicts).

  python benchmarks/verifier_suite.py --math-verify-tests DIR [--out FILE]

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
from typing import Any, Callable, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position (after the sys.path line)
from rlscale import outputs

RLSCALE_RIGHT = "rlscale right"
CONVENTION = "convention"
BROKEN = "broken test string"
REASON_KINDS = (RLSCALE_RIGHT, CONVENTION, BROKEN)


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
_NUMBER_RE = re.compile(r"^[\s$]*[-+]?[\d.,\s]+%?[\s$]*$")


def kind_of(gold: str, pred: str) -> str:
  """The answer kind of a row, from the gold (and the prediction for boxes and prose).

  First match wins: "several boxed" (two or more `\\boxed` on either side), "long response"
  (a prediction over 120 characters), "matrices", "equations and relations" (`=`, `<`, `>`,
  `:`, `\\le`, ...), "intervals", "sets / tuples / lists", "plain numbers", "expressions".
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
  if _SET_RE.search(gold):
    return "sets / tuples / lists"
  if _NUMBER_RE.match(gold):
    return "plain numbers"
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


# Why rlscale's verdict (boxed feed) differs from the suite's expected one, keyed by
# (test, gold, pred): (reason kind, explanation). Rows marked WRONG_REWARDED are rows the suite
# expects 1 for although the answer is wrong; rlscale must score them 0 in both feeds.
REASONS: dict[tuple[str, str, str], tuple[str, str]] = {}
WRONG_REWARDED: frozenset = frozenset()


def _rlscale_scores(triples: Sequence[Triple], feed: Callable[[str], str]) -> list[float]:
  from rlscale.tasks import verifier  # pylint: disable=g-import-not-at-top
  return [verifier.verify(feed(t.pred), t.gold).reward for t in triples]


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
              theirs: Optional[Sequence[Optional[float]]],
              reasons: dict = REASONS, wrong_rewarded: frozenset = WRONG_REWARDED) -> dict:
  """The report: agreement overall and per kind, disagreements with reasons, false positives.

  Args:
    triples: the suite's rows.
    boxed, verbatim: rlscale's rewards (0.0 or 1.0) per row in the two feeds.
    theirs: Math-Verify's verdicts per row (None where it crashed), or None if not run.
    reasons: (test, gold, pred) -> (reason kind, explanation) for boxed-feed disagreements.
    wrong_rewarded: keys of rows whose expected 1 is a wrong answer.

  Returns:
    A JSON-serialisable dict (see the module docstring).
  """
  rows = []
  for i, t in enumerate(triples):
    key = (t.test, t.gold, t.pred)
    wrong = t.expected == 0 or key in wrong_rewarded
    rows.append({"test": t.test, "gold": t.gold, "pred": t.pred, "expected": t.expected,
                 "kind": kind_of(t.gold, t.pred), "boxed": int(boxed[i]),
                 "verbatim": int(verbatim[i]), "wrong_answer": wrong,
                 "math_verify": None if theirs is None or theirs[i] is None else int(theirs[i])})
  kinds = sorted({r["kind"] for r in rows})
  disagreements = []
  for r in rows:
    if r["boxed"] != r["expected"]:
      kind, why = reasons.get((r["test"], r["gold"], r["pred"]), ("unexplained", ""))
      disagreements.append({**r, "reason": kind, "explanation": why})
  counts = {k: sum(d["reason"] == k for d in disagreements)
            for k in (*REASON_KINDS, "unexplained")}
  false_positives = [r for r in rows if r["wrong_answer"] and (r["boxed"] or r["verbatim"])]
  report = {
      "triples": len(rows),
      "agreement": {"boxed": _agreement(rows, "boxed"), "verbatim": _agreement(rows, "verbatim")},
      "agreement_by_kind": {k: {"boxed": _agreement([r for r in rows if r["kind"] == k], "boxed"),
                                "verbatim": _agreement([r for r in rows if r["kind"] == k],
                                                       "verbatim")} for k in kinds},
      "disagreement_reasons": counts,
      "false_positives": false_positives,
      "disagreements": disagreements,
  }
  if theirs is not None:
    report["agreement"]["math_verify"] = _agreement(
        [r for r in rows if r["math_verify"] is not None], "math_verify")
  return report


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Command line; returns the exit status (2 with one `error:` line on bad input)."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--math-verify-tests", required=True,
                      help="the tests/ folder of a local huggingface/Math-Verify checkout")
  parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results",
                                                    "verifier_suite.json"),
                      help="output JSON file")
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
  boxed = _rlscale_scores(triples, boxed_feed)
  verbatim = _rlscale_scores(triples, lambda p: p)
  theirs = None if args.no_math_verify else _math_verify_scores(triples)
  report = {"source": "huggingface/Math-Verify tests/*.py", "skipped_not_literal": skipped,
            **summarize(triples, boxed, verbatim, theirs)}
  outputs.write_atomic(args.out, json.dumps(report, indent=1, ensure_ascii=False) + "\n")
  print(json.dumps({k: report[k] for k in ("triples", "agreement", "agreement_by_kind",
                                           "disagreement_reasons")}, indent=1))
  print(f"false positives: {len(report['false_positives'])}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
