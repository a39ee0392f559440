"""Mathematical equivalence of two parsed answers with sympy (runs inside the verifier worker).

Rules, in order:
  * Chains: `x = 5 + 5 + 1 = 11` states x = 11 when every link after the name holds (`2 + 3 = 5`:
    every link); a false link scores 0 (the safe reading for a reward). `\\approx` links hold
    within 1%.
  * Labels: `f(x) = 1`, `(p, q) = (3, 2)`, a named point `A = (1, 2)` against an unlabelled
    answer compare the value (either side may carry the label); two labelled answers also
    compare the names, so `B = (1, 2)` is not `A = (1, 2)` and `y = 3` is not `x = 3`
    (Math-Verify 0.9.0 decides both alike).
  * Equations: `x = 5` against a non-equation compares the right-hand side; two equations are
    equal when lhs - rhs agree up to a non-zero constant factor (sides swapped, scaled).
  * Inequalities: each link as lhs - rhs < 0 (<=, !=), equal up to a positive factor
    (`5 \\geq x` is `x \\leq 5`, `-x > -1` is `x < 1`); against an interval, an inequality in one
    variable is its interval (`-2 \\le x < 7` is [-2, 7), `1 \\le |z| \\le 2` is [-2,-1] U [1,2]).
  * Sets (`\\{...\\}`, several boxes, bare comma lists): the same elements in any order (a
    repeated element counts once, as in Math-Verify's FiniteSet). A bare list (`1, 3`, also
    `x = 1, x = 3` and a variable's values `a = 4, -8, -10`) is a set of answers, the
    solutions of an equation in any order: the project's convention, Math-Verify's too. Two
    exceptions keep the order: values named by different names (`x = 1, y = 2`, `AB = 4,
    CD = 5`) against an answer without names, where each position stands for one name; and a
    bracketed tuple, which is never a set (`(1, 2)` is not `(2, 1)`; against the bare list
    `1, 2` it is compared in order).
  * Matrices: the same shape, elementwise equal.
  * Tuples and other lists: same length, elementwise equal, in order.
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
  * Percentages (`numbers.percent_readings`, after Math-Verify): a trailing % may be dropped;
    the reference's `x%` may also read as x/100 (`28\\%` accepts 28, 28% and 0.28), the
    answer's only with `percent=True`; two sides with a % compare as written.
No `simplify` is called: every step is bounded by the parser's size limits, and the worker's
hard time limit covers what remains (e.g. slow `evalf` of a deep expression).
"""

from __future__ import annotations

import fractions
import math
from typing import Any, Optional, Sequence

import sympy

from rlscale.tasks import math_parser
from rlscale.tasks import numbers

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
  if a.has(sympy.zoo, sympy.nan) or b.has(sympy.zoo, sympy.nan):
    return False, "undefined value (division by zero)"  # also when both are: 12:00 is not 1:00
  if a == b:  # equal sympy trees, not equal texts: 1e3 and 1000, sqrt(8) and 2 sqrt(2)
    return True, "same expression after parsing"
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


_APPROX_TOL = sympy.Float("0.01", 50)
_INEQUALITY_FLIP = {">": "<", ">=": "<="}
_FALSE_CHAIN = "a link of the chain is false"


def _link_holds(a: sympy.Expr, op: str, b: sympy.Expr, *, rel_tol: float, decimal: bool) -> bool:
  """Whether `a = b` (or `a approx b`, within 1%: 1/3 approx 0.33 holds, 0.343 does not)."""
  if op == "approx":
    va, vb = a.evalf(30), b.evalf(30)
    if va.is_number and vb.is_number:
      return _close(va, vb, _APPROX_TOL)
  return expressions_equal(a, b, rel_tol=rel_tol, decimal=decimal)[0]


def _canonical(value: Any, *, rel_tol: float, decimal: bool) -> Any:
  """A chain of equalities or a numeric equation as the value it states, or `_FALSE_CHAIN`.

  `x = 5 + 5 + 1 = 11` states x = 11 (every link after the name must hold); `2 + 3 = 5` states
  5 (every link must hold); the value is the last term before the first `approx`, or the term
  after the name when the name is approximated (`x approx 11`). Other values are unchanged.
  """
  if isinstance(value, sympy.Equality) and not (value.lhs.free_symbols or
                                                value.rhs.free_symbols):
    value = math_parser.Relation((value.lhs, value.rhs), ("=",), False)
  if not (isinstance(value, math_parser.Relation) and
          all(op in ("=", "approx") for op in value.ops)):
    return value
  terms, ops, first = value.terms, value.ops, 1 if value.label else 0
  for i in range(first, len(ops)):
    if not _link_holds(terms[i], ops[i], terms[i + 1], rel_tol=rel_tol, decimal=decimal):
      return _FALSE_CHAIN
  approx = next((i for i, op in enumerate(ops) if op == "approx"), len(ops))
  result = terms[max(approx, first)]
  if not value.label:
    return result
  if isinstance(terms[0], sympy.Symbol):
    return sympy.Eq(terms[0], result, evaluate=False)
  return math_parser.Labelled(terms[0], result)


def _ratio(a: sympy.Expr, b: sympy.Expr) -> Optional[sympy.Rational]:
  """c with a = c * b for a non-zero rational constant c (|numerator|, denominator < 10^6),
  found from the leading numeric value of a/b at a test point and then checked exactly."""
  symbols = sorted(a.free_symbols | b.free_symbols, key=str)
  subs = {s: sympy.Float(_POINTS[j % len(_POINTS)], 40) * (1 + j) for j, s in enumerate(symbols)}
  vb = b.evalf(40, subs=subs)
  if not (vb.is_number and vb.is_finite and vb != 0):
    return None
  ratio = (a.evalf(40, subs=subs) / vb)
  if not (ratio.is_number and ratio.is_real and ratio.is_finite and ratio != 0):
    return None
  c = fractions.Fraction(str(sympy.Float(ratio, 30))).limit_denominator(10**6)
  return sympy.Rational(c.numerator, c.denominator) if c else None


def proportional(a: sympy.Expr, b: sympy.Expr, *, positive: bool, rel_tol: float,
                 decimal: bool) -> tuple[bool, str]:
  """Whether a = c * b for a constant c != 0 (c > 0 when `positive`): the same equation
  (a = 0, b = 0) or inequality (a < 0, b < 0) written with sides scaled or swapped."""
  same, how = expressions_equal(a, b, rel_tol=rel_tol, decimal=decimal)
  if same:
    return same, how
  c = _ratio(a, b)
  if c is None or positive and c < 0:
    return False, how
  same, _ = expressions_equal(a, c * b, rel_tol=rel_tol, decimal=decimal)
  return same, "equal up to a constant factor" if same else how


def _forms(rel: math_parser.Relation) -> Optional[list[tuple[sympy.Expr, str]]]:
  """Each link of an inequality chain as (lhs - rhs, op) with op in <, <=, !=."""
  forms = []
  for a, op, b in zip(rel.terms, rel.ops, rel.terms[1:]):
    if op not in ("<", "<=", ">", ">=", "!="):
      return None
    if not (isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr)):
      return None
    forms.append((b - a, _INEQUALITY_FLIP[op]) if op in _INEQUALITY_FLIP else (a - b, op))
  return forms


def _relations_equal(a: math_parser.Relation, b: math_parser.Relation, *, rel_tol: float,
                     decimal: bool) -> tuple[bool, str]:
  fa, fb = _forms(a), _forms(b)
  if fa is None or fb is None:
    return False, "relations of different kinds"
  if len(fa) != len(fb):
    return False, f"{len(fa)} relation(s) against {len(fb)}"
  unmatched = list(fb)
  for expr, op in fa:
    match = next((i for i, (other, other_op) in enumerate(unmatched) if other_op == op and
                  proportional(expr, other, positive=op != "!=", rel_tol=rel_tol,
                               decimal=decimal)[0]), None)
    if match is None:
      return False, "relations differ"
    unmatched.pop(match)
  return True, "same relations"


def _unlabel(a: Any, b: Any) -> tuple[Any, Any, Optional[tuple]]:
  """A labelled value against an unlabelled one is its value; two labels are set aside."""
  la, lb = isinstance(a, math_parser.Labelled), isinstance(b, math_parser.Labelled)
  if la and lb:
    return a.value, b.value, (a.label, b.label)
  if la and isinstance(b, sympy.Equality) and b.lhs.is_Symbol or lb and isinstance(
      a, sympy.Equality) and a.lhs.is_Symbol:
    return a, b, None  # a name against a variable: compared as different below
  return (a.value if la else a), (b.value if lb else b), None


def _sets_equal(a: Sequence, b: Sequence, *, rel_tol: float, decimal: bool) -> tuple[bool, str]:
  """Every element of each side equals some element of the other (O(len(a) * len(b)))."""
  for xs, ys in ((a, b), (b, a)):
    for x in xs:
      if not any(_values_equal(x, y, rel_tol=rel_tol, decimal=decimal)[0] for y in ys):
        return False, "sets differ"
  return True, "same sets"


def _matrices_equal(a: Any, b: Any, *, rel_tol: float, decimal: bool) -> tuple[bool, str]:
  if not (isinstance(a, sympy.ImmutableMatrix) and isinstance(b, sympy.ImmutableMatrix)):
    return False, "matrix against a non-matrix"
  if a.shape != b.shape:
    return False, f"matrix shapes {a.shape} and {b.shape}"
  for x, y in zip(a, b):
    if not expressions_equal(x, y, rel_tol=rel_tol, decimal=decimal)[0]:
      return False, "matrix entries differ"
  return True, "matrices elementwise"


def _values_equal(a: Any, b: Any, *, rel_tol: float, decimal: bool) -> tuple[bool, str]:
  a = _canonical(a, rel_tol=rel_tol, decimal=decimal)
  b = _canonical(b, rel_tol=rel_tol, decimal=decimal)
  if a is _FALSE_CHAIN or b is _FALSE_CHAIN:
    return False, _FALSE_CHAIN
  a, b, labels = _unlabel(a, b)
  if labels is not None:
    same, how = _values_equal(*labels, rel_tol=rel_tol, decimal=decimal)
    if not same:
      return False, f"different names ({how})"
  if isinstance(a, math_parser.Labelled) or isinstance(b, math_parser.Labelled):
    return False, "a name against a variable"
  if isinstance(a, math_parser.Relation) or isinstance(b, math_parser.Relation):
    if not (isinstance(a, math_parser.Relation) and isinstance(b, math_parser.Relation)):
      return False, "relation against a value"
    return _relations_equal(a, b, rel_tol=rel_tol, decimal=decimal)
  if isinstance(a, math_parser.SetOf) or isinstance(b, math_parser.SetOf):
    if not (isinstance(a, math_parser.SetOf) and isinstance(b, math_parser.SetOf)):
      return False, "set against a non-set"
    return _sets_equal(a.items, b.items, rel_tol=rel_tol, decimal=decimal)
  if isinstance(a, sympy.ImmutableMatrix) or isinstance(b, sympy.ImmutableMatrix):
    return _matrices_equal(a, b, rel_tol=rel_tol, decimal=decimal)
  if isinstance(a, sympy.Equality) != isinstance(b, sympy.Equality):
    eq, other = (a, b) if isinstance(a, sympy.Equality) else (b, a)
    if not eq.lhs.is_Symbol:
      return False, "equation against a value"
    a, b = (eq.rhs, other) if eq is a else (other, eq.rhs)
  if isinstance(a, sympy.Equality):
    if not all(isinstance(v, sympy.Expr) for v in (a.lhs, a.rhs, b.lhs, b.rhs)):
      return _values_equal(a.lhs, b.lhs, rel_tol=rel_tol, decimal=decimal)[0] and _values_equal(
          a.rhs, b.rhs, rel_tol=rel_tol, decimal=decimal)[0], "equation sides"
    return proportional(a.lhs - a.rhs, b.lhs - b.rhs, positive=False, rel_tol=rel_tol,
                        decimal=decimal)
  if math_parser.is_sequence(a) or math_parser.is_sequence(b):
    if not (math_parser.is_sequence(a) and math_parser.is_sequence(b)) or len(a) != len(b):
      return False, "different tuple lengths"
    for x, y in zip(a, b):
      same, how = _values_equal(x, y, rel_tol=rel_tol, decimal=decimal)
      if not same:
        return False, f"tuple element differs ({how})"
    return True, "tuple elementwise"
  if not (isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr)):
    return False, "different kinds of answer"
  return expressions_equal(a, b, rel_tol=rel_tol, decimal=decimal)


def _relation_interval(value: Any) -> Optional[list[math_parser.Interval]]:
  """`x < 3`, `5 \\geq x`, `-2 \\le x \\le 7`, `0 < f(x) < 1` as the interval of the one side
  with variables (the other sides numbers); `1 \\le |z| \\le 2` (positive bounds) as the two
  intervals [-2, -1] and [1, 2]. None for any other relation."""
  if not isinstance(value, math_parser.Relation) or len(value.ops) > 2:
    return None
  terms, ops = value.terms, value.ops
  if any(op not in ("<", "<=", ">", ">=") for op in ops) or len({op[0] for op in ops}) != 1:
    return None  # a != b, a < x > b
  free = [bool(getattr(t, "free_symbols", True)) for t in terms]
  if sum(free) != 1 or len(ops) == 2 and not free[1]:
    return None
  bounds = {"lower": (-sympy.oo, True), "upper": (sympy.oo, True)}
  for i, op in enumerate(ops):
    variable_first = free[i]
    other = terms[i + 1] if variable_first else terms[i]
    # "x < b" and "b > x" bound x from above; "a < x" and "x > a" from below.
    above = variable_first == (op[0] == "<")
    bounds["upper" if above else "lower"] = (other, len(op) == 1)
  (low, low_open), (high, high_open) = bounds["lower"], bounds["upper"]
  variable = terms[free.index(True)]
  if isinstance(variable, sympy.Abs):
    if not (low.is_number and low.is_positive):
      return None
    return [math_parser.Interval(-high, -low, high_open, low_open),
            math_parser.Interval(low, high, low_open, high_open)]
  return [math_parser.Interval(low, high, low_open, high_open)]


def _pieces(parsed: math_parser.Parsed) -> Optional[list[math_parser.Interval]]:
  """The intervals of a parsed answer (a pair in round brackets is the open interval, an
  inequality in one variable its interval)."""
  value = parsed.value
  if isinstance(value, math_parser.Interval):
    return [value]
  if isinstance(value, math_parser.IntervalUnion):
    return list(value.parts)
  if parsed.open_pair and all(isinstance(v, sympy.Expr) for v in value):
    return [math_parser.Interval(value[0], value[1], True, True)]
  return _relation_interval(value)


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
  if isinstance(a.value, math_parser.Relation) and r.open_pair or (
      isinstance(r.value, math_parser.Relation) and a.open_pair):
    pa, pr = _pieces(a), _pieces(r)
    if pa is not None and pr is not None:
      return intervals_equal(pa, pr, rel_tol=rel_tol, decimal=decimal)
  if (a.bare_list and r.bare_list or isinstance(a.value, math_parser.SetOf) or
      isinstance(r.value, math_parser.SetOf)):
    items_a, items_r = _elements(a), _elements(r)
    if items_a is not None and items_r is not None:
      va, vr = _one_variable_list(items_a), _one_variable_list(items_r)
      if _names_fix_order(va, vr):
        return _values_equal(tuple(va), tuple(vr), rel_tol=rel_tol, decimal=decimal)
      return _sets_equal(va, vr, rel_tol=rel_tol, decimal=decimal)
  return _values_equal(a.value, r.value, rel_tol=rel_tol, decimal=decimal)


def _name(item: Any) -> Any:
  """The name an item gives its value: `x` of `x = 3`, `AB` of `AB = 4`; None if unnamed."""
  if isinstance(item, math_parser.Labelled):
    return item.label
  if isinstance(item, sympy.Equality) and item.lhs.is_Symbol:
    return item.lhs
  return None


def _names_fix_order(answer: Sequence, reference: Sequence) -> bool:
  """Whether two lists read as sets compare in order after all: the reference names its
  values with two or more different names (`AB = 4, CD = 5`, `x = 1, y = 2`) and the answer
  names none (`4, 5`, or the boxes `\\boxed{4}, \\boxed{5}`), so each position stands for one
  name and `5, 4` says AB = 5 (Math-Verify, comparing sets, rewards it). Otherwise a bare list
  is a set of answers (the project's convention; Math-Verify reads `1, 3` as the set {1, 3})."""
  names = [_name(v) for v in reference]
  return (all(n is not None for n in names) and len(set(names)) > 1 and
          all(_name(v) is None for v in answer))


def _one_variable_list(items: Sequence) -> Sequence:
  """`a = 4, -8, -10` (a variable's values listed after one `=`) as a = 4, a = -8, a = -10."""
  first = items[0]
  if (isinstance(first, sympy.Equality) and first.lhs.is_Symbol and
      all(isinstance(v, sympy.Expr) for v in items[1:])):
    return [first] + [sympy.Eq(first.lhs, v, evaluate=False) for v in items[1:]]
  return items


def _elements(parsed: math_parser.Parsed) -> Optional[Sequence]:
  """The elements of a parsed answer read as a set: a set's, a bare list's, or a single
  value's; None for a bracketed tuple (a tuple is not a set). A named value (`A = \\{1, 2\\}`)
  is its value: it is compared with a set, which has no name."""
  value = parsed.value
  if isinstance(value, math_parser.Labelled):
    value = value.value
  if isinstance(value, math_parser.SetOf):
    return value.items
  if parsed.bare_list:
    return value
  return None if math_parser.is_sequence(value) else (value,)


def _divided(text: str) -> Optional[math_parser.Parsed]:
  """`text` with each x% read as x/100, or None when that reading does not parse (`(1, 2)%`)."""
  try:
    return math_parser.parse_math(text, percent_mode="divide")
  except math_parser.ParseError:
    return None


def _reading_pairs(answer: str, a: math_parser.Parsed, reference: str,
                   r: math_parser.Parsed, percent: bool) -> list[tuple]:
  """(answer, reference) readings to try, as written first; which sides' x% may also mean
  x/100 is `numbers.percent_readings` (a reference's always, an answer's only with `percent`)."""
  pairs = []
  for divide_a, divide_r in numbers.percent_readings(a.percent, r.percent, percent):
    pair = (_divided(answer) if divide_a else a, _divided(reference) if divide_r else r)
    if pair[0] is not None and pair[1] is not None:
      pairs.append(pair)
  return pairs


def compare_answers(answer: str, reference: str, *, rel_tol: float,
                    percent: bool) -> tuple[Optional[bool], str]:
  """Compares normalised answer and reference text.

  Args:
    answer: normalised extracted answer.
    reference: normalised reference answer.
    rel_tol: relative tolerance for decimals.
    percent: whether the answer's "x%" may also mean x/100 (the reference's always may).

  Returns:
    (True, how) when equal; (False, why) when not or when the answer cannot be parsed;
    (None, why) when the reference itself cannot be parsed (the caller may compare text).
  """
  try:
    r = math_parser.parse_math(reference)
  except math_parser.ParseError as e:
    return None, f"reference not parseable: {e}"
  try:
    a = math_parser.parse_math(answer)
  except math_parser.ParseError as e:
    return False, f"answer not parseable: {e}"
  why = "not equal"
  for x, y in _reading_pairs(answer, a, reference, r, percent):
    same, how = _parsed_equal(x, y, rel_tol=rel_tol, decimal=x.decimal or y.decimal)
    if same:
      return True, how
    why = how
  return False, why
