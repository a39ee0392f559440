"""Mathematical equivalence of two parsed answers with sympy (runs inside the verifier worker).

Rules, in order:
  * Equations: `x = 5` against a non-equation compares the right-hand side; two equations are
    equal when lhs - rhs agree up to sign.
  * Tuples: same length, elementwise equal, in order.
  * Intervals and unions of intervals (`math_parser.Interval`, `IntervalUnion`): the same
    pieces in any order, each with equal endpoints (compared as values, as below) and the same
    open/closed ends; an end at +-infinity is open whatever its bracket. Pieces are not merged:
    `[0, 1] \\cup [1, 2]` is not `[0, 2]`. A pair `(a, b)` against an interval is read as the
    open interval; against a pair it stays a pair.
  * Expressions without variables: exact rationals compare exactly; otherwise both sides are
    evaluated to 50 significant digits and compared with relative tolerance `rel_tol` when either
    side was written as a decimal, else 1e-30 (numerically exact: `\\sqrt{8}` = `2\\sqrt{2}`).
  * Expressions with variables (over the union of both sides' variables): polynomials of
    degree <= 40 with at most 20000 possible terms are compared exactly by expanding the
    difference (`(x+1)^2` = `x^2+2x+1`); anything else is compared at four fixed points with
    irrational coordinates of both signs, 40 significant digits each.
  * Percentages (`percent=True`): `x%` may also read as x/100.
No `simplify` is called: every step is bounded by the parser's size limits, and the worker's
hard time limit covers what remains (e.g. slow `evalf` of a deep expression).
"""

from __future__ import annotations

import math
from typing import Optional

import sympy

from rlscale.tasks import math_parser

MAX_POLY_DEGREE = 40
MAX_POLY_TERMS = 20000
_EXACT_TOL = sympy.Float("1e-30", 50)
_POINT_TOL = sympy.Float("1e-25", 50)
# Coordinates for the point check: irrational-looking so unequal expressions rarely coincide.
_POINTS = ("0.5772156649015328606", "1.3247179572447460260", "0.6180339887498948482",
           "2.2360679774997896964", "0.3183098861837906715", "1.6449340668482264365",
           "0.7071067811865475244", "2.6651441426902251887")


def _degree_bound(expr: sympy.Expr) -> float:
  """Upper bound on total degree without expanding; inf for non-polynomial nodes."""
  if expr.is_Symbol:
    return 1
  if expr.is_number:
    return 0
  if expr.is_Add:
    return max(_degree_bound(a) for a in expr.args)
  if expr.is_Mul:
    return sum(_degree_bound(a) for a in expr.args)
  if expr.is_Pow and expr.exp.is_Integer and expr.exp >= 0:
    return int(expr.exp) * _degree_bound(expr.base)
  return float("inf")


def _close(a: sympy.Expr, b: sympy.Expr, tol: sympy.Float) -> bool:
  """|a - b| <= tol * max(|a|, |b|) for evaluated numbers (complex allowed; oo == oo)."""
  if a.has(sympy.nan, sympy.zoo) or b.has(sympy.nan, sympy.zoo):
    return False
  if not (a.is_finite and b.is_finite):
    return a == b
  diff = abs(a - b)
  scale = max(abs(a), abs(b))
  return bool(diff <= tol * scale)


def _numbers_equal(a: sympy.Expr, b: sympy.Expr, tol: sympy.Float) -> tuple[bool, str]:
  if a.is_Rational and b.is_Rational and tol == _EXACT_TOL:
    return a == b, "exact rational"
  va, vb = a.evalf(50), b.evalf(50)
  if not (va.is_number and vb.is_number) or va.has(sympy.nan) or vb.has(sympy.nan):
    return False, "could not evaluate"
  return _close(va, vb, tol), "numeric"


def _points_equal(a: sympy.Expr, b: sympy.Expr, symbols: list[sympy.Symbol],
                  tol: sympy.Float) -> tuple[bool, str]:
  compared = 0
  for k in range(4):
    # Alternate signs so that e.g. sqrt(x^2) and x differ (they agree for x > 0).
    subs = {s: sympy.Float(_POINTS[(k + 3 * j) % len(_POINTS)], 40) * (1 + j) * (-1)**(k + j)
            for j, s in enumerate(symbols)}
    va, vb = a.evalf(40, subs=subs), b.evalf(40, subs=subs)
    fa = va.is_number and va.is_finite
    fb = vb.is_number and vb.is_finite
    if fa != fb:
      return False, "differ at a test point"
    if not fa:
      continue  # both undefined here (e.g. a pole): no evidence either way
    if not _close(va, vb, max(tol, _POINT_TOL)):
      return False, "differ at a test point"
    compared += 1
  return compared >= 2, "equal at test points" if compared >= 2 else "undefined at test points"


def expressions_equal(a: sympy.Expr, b: sympy.Expr, *, rel_tol: float,
                      decimal: bool) -> tuple[bool, str]:
  """Whether two sympy expressions are the same answer; returns (equal, method/reason).

  Args:
    a, b: sympy expressions from `math_parser.parse_math`.
    rel_tol: relative tolerance used when `decimal` is True.
    decimal: either side was written with a decimal number.
  """
  if a == b:  # equal sympy trees, not equal texts: 1e3 and 1000, sqrt(8) and 2 sqrt(2)
    return True, "same expression after parsing"
  if a.has(sympy.zoo, sympy.nan) or b.has(sympy.zoo, sympy.nan):
    return False, "undefined value (division by zero)"
  tol = max(sympy.Float(rel_tol, 50), _EXACT_TOL) if decimal else _EXACT_TOL
  # A variable may cancel on one side (sin^2 x + cos^2 x = 1), so compare over the union.
  symbols = sorted(a.free_symbols | b.free_symbols, key=str)
  if not symbols:
    return _numbers_equal(a, b, tol)
  degree = max(_degree_bound(a), _degree_bound(b))
  # Expansion is exact but its size is C(variables + degree, degree) terms: bound both.
  if (not decimal and degree <= MAX_POLY_DEGREE and
      math.comb(len(symbols) + int(degree), len(symbols)) <= MAX_POLY_TERMS):
    same, how = sympy.expand(a - b) == 0, "polynomial expansion"
  else:
    same, how = _points_equal(a, b, symbols, tol)
  if not same and a.free_symbols != b.free_symbols:
    names = lambda s: ",".join(sorted(map(str, s))) or "none"
    how = f"different variables ({names(a.free_symbols)} vs {names(b.free_symbols)})"
  return same, how


def _values_equal(a: sympy.Basic, b: sympy.Basic, *, rel_tol: float,
                  decimal: bool) -> tuple[bool, str]:
  if isinstance(a, sympy.Equality) != isinstance(b, sympy.Equality):
    eq, other = (a, b) if isinstance(a, sympy.Equality) else (b, a)
    if not eq.lhs.is_Symbol:
      return False, "equation against a value"
    a, b = (eq.rhs, other) if eq is a else (other, eq.rhs)
  if isinstance(a, sympy.Equality):
    da, db = a.lhs - a.rhs, b.lhs - b.rhs
    same, how = expressions_equal(da, db, rel_tol=rel_tol, decimal=decimal)
    if same:
      return same, how
    return expressions_equal(da, -db, rel_tol=rel_tol, decimal=decimal)
  if isinstance(a, sympy.Tuple) or isinstance(b, sympy.Tuple):
    if not (isinstance(a, sympy.Tuple) and isinstance(b, sympy.Tuple)) or len(a) != len(b):
      return False, "different tuple lengths"
    for x, y in zip(a, b):
      same, how = _values_equal(x, y, rel_tol=rel_tol, decimal=decimal)
      if not same:
        return False, f"tuple element differs ({how})"
    return True, "tuple elementwise"
  return expressions_equal(a, b, rel_tol=rel_tol, decimal=decimal)


def _pieces(parsed: math_parser.Parsed) -> Optional[list[math_parser.Interval]]:
  """The intervals of a parsed answer (a pair in round brackets is the open interval)."""
  value = parsed.value
  if isinstance(value, math_parser.Interval):
    return [value]
  if isinstance(value, math_parser.IntervalUnion):
    return list(value.parts)
  if parsed.open_pair and all(isinstance(v, sympy.Expr) for v in value):
    return [math_parser.Interval(value[0], value[1], True, True)]
  return None


def _ends(piece: math_parser.Interval) -> tuple[bool, bool]:
  # [0, oo] is the same set of reals as [0, oo): an infinite end is never a member.
  return (piece.left_open or piece.left.is_infinite is True,
          piece.right_open or piece.right.is_infinite is True)


def _pieces_equal(a: math_parser.Interval, b: math_parser.Interval, *, rel_tol: float,
                  decimal: bool) -> bool:
  if _ends(a) != _ends(b):
    return False
  return all(expressions_equal(x, y, rel_tol=rel_tol, decimal=decimal)[0]
             for x, y in ((a.left, b.left), (a.right, b.right)))


def intervals_equal(a: list[math_parser.Interval], b: list[math_parser.Interval], *,
                    rel_tol: float, decimal: bool) -> tuple[bool, str]:
  """Whether two unions of intervals have the same pieces, in any order; (equal, reason).

  Each piece of `a` is matched with an unmatched equal piece of `b` (O(len(a) * len(b))
  comparisons; the parser's token bound keeps both short).
  """
  if len(a) != len(b):
    return False, f"{len(a)} interval(s) against {len(b)}"
  unmatched = list(b)
  for piece in a:
    match = next((i for i, other in enumerate(unmatched)
                  if _pieces_equal(piece, other, rel_tol=rel_tol, decimal=decimal)), None)
    if match is None:
      return False, "intervals differ (endpoints or open/closed ends)"
    unmatched.pop(match)
  return True, "same intervals"


def _parsed_equal(a: math_parser.Parsed, r: math_parser.Parsed, *, rel_tol: float,
                  decimal: bool) -> tuple[bool, str]:
  interval_types = (math_parser.Interval, math_parser.IntervalUnion)
  if isinstance(a.value, interval_types) or isinstance(r.value, interval_types):
    pa, pr = _pieces(a), _pieces(r)
    if pa is None or pr is None:
      return False, "interval against a non-interval"
    return intervals_equal(pa, pr, rel_tol=rel_tol, decimal=decimal)
  return _values_equal(a.value, r.value, rel_tol=rel_tol, decimal=decimal)


def _readings(text: str, percent: bool) -> list[math_parser.Parsed]:
  first = math_parser.parse_math(text, percent_mode="strip")
  if percent and first.percent:
    return [first, math_parser.parse_math(text, percent_mode="divide")]
  return [first]


def compare_answers(answer: str, reference: str, *, rel_tol: float,
                    percent: bool) -> tuple[Optional[bool], str]:
  """Compares normalised answer and reference text.

  Args:
    answer: normalised extracted answer.
    reference: normalised reference answer.
    rel_tol: relative tolerance for decimals.
    percent: whether "x%" may also mean x/100.

  Returns:
    (True, how) when equal; (False, why) when not or when the answer cannot be parsed;
    (None, why) when the reference itself cannot be parsed (the caller may compare text).
  """
  try:
    references = _readings(reference, percent)
  except math_parser.ParseError as e:
    return None, f"reference not parseable: {e}"
  try:
    answers = _readings(answer, percent)
  except math_parser.ParseError as e:
    return False, f"answer not parseable: {e}"
  why = "not equal"
  for a in answers:
    for r in references:
      same, how = _parsed_equal(a, r, rel_tol=rel_tol, decimal=a.decimal or r.decimal)
      if same:
        return True, how
      why = how
  return False, why
