"""The whitelist parser and sympy equivalence, in process (the verifier runs them in a worker)."""

import pytest
import sympy

from rlscale.tasks import equivalence
from rlscale.tasks import math_parser

x, y = sympy.symbols("x y")


@pytest.mark.parametrize("text, expected", [
    ("1,000", sympy.Integer(1000)), (r"\frac12", sympy.Rational(1, 2)),
    (r"\frac{\frac{1}{2}}{3}", sympy.Rational(1, 6)), ("2^3^2", sympy.Integer(512)),
    ("-2^2", sympy.Integer(-4)), ("2**10", sympy.Integer(1024)), ("2x", 2 * x),
    ("x^2y", x**2 * y), (r"\sin^2 x", sympy.sin(x)**2), (r"\sin x^2", sympy.sin(x**2)),
    (r"\sqrt[3]{8}", sympy.Integer(2)), ("sqrtx", sympy.sqrt(x)), ("e^x", sympy.exp(x)),
    (r"\ln(e^2)", sympy.Integer(2)), (r"2\pi", 2 * sympy.pi), ("(x+1)(x-1)", (x + 1) * (x - 1)),
    ("3 * 4 / 6", sympy.Integer(2)), (r"\alpha", sympy.Symbol("alpha")),
])
def test_parse_values(text, expected):
  assert math_parser.parse_math(text).value == expected


def test_parse_structures_and_flags():
  assert math_parser.parse_math("x = 5").value == sympy.Eq(x, 5, evaluate=False)
  assert math_parser.parse_math("(1, 2)").value == sympy.Tuple(1, 2)
  assert math_parser.parse_math("0.5").decimal and not math_parser.parse_math("1/2").decimal
  assert math_parser.parse_math("50%").value == 50
  assert math_parser.parse_math("50%", percent_mode="divide").value == sympy.Rational(1, 2)
  assert math_parser.parse_math("50%").percent


@pytest.mark.parametrize("text, message", [
    ("__import__('os')", "unsupported character '_'"),
    ("os.system('ls')", "unsupported character '.'"),
    (r"\input{x}", r"unsupported command \\input"),
    ("9^9^9^9", "exponent 387420489 beyond"),
    ("2^{1001}", "beyond"),
    ("(10^{100})^{1000}", "more than 20000 bits"),
    ("1e999", "scientific exponent"),
    ("1" * 65, "more than 64 digits"),
    ("x+" * 200, "more than 256 tokens"),
    ("(" * 49 + "1" + ")" * 49, "nesting deeper"),
    ("-" * 60 + "1", "nesting deeper"),
    ("(1,2)*3", "arithmetic on a tuple"),
    ("x = 1 = 2", "chained equation"),
    ("", "empty answer"),
    ("{{{", "unexpected end"),
    ("2 3", "unexpected '3'"),
    ("x\u00b2", "unsupported character"),
])
def test_parse_errors(text, message):
  with pytest.raises(math_parser.ParseError, match=message):
    math_parser.parse_math(text)


def test_bad_percent_mode():
  with pytest.raises(ValueError, match="percent_mode"):
    math_parser.parse_math("1", percent_mode="x")


@pytest.mark.parametrize("a, b, equal, how", [
    ("(x+1)^2", "x^2+2x+1", True, "polynomial expansion"),
    ("x^2", "2x", False, "polynomial expansion"),
    (r"\sqrt{8}", r"2\sqrt{2}", True, "identical"),
    (r"\sqrt{2}+\sqrt{3}", r"\sqrt{5+2\sqrt{6}}", True, "numeric"),
    (r"\frac{x^2-1}{x-1}", "x+1", True, "equal at test points"),
    (r"\sqrt{x^2}", "x", False, "differ at a test point"),
    ("x", "y", False, "different variables (x vs y)"),
    (r"\sin^2 x + \cos^2 x", "1", True, "equal at test points"),
    ("1/0", "1", False, "undefined value (division by zero)"),
    ("(1, 2)", "(1, 2, 3)", False, "different tuple lengths"),
    ("2x = 4", "4", False, "equation against a value"),
    ("y = x", "x - y = 0", True, "identical"),
    ("y = (x+1)^2", "y - x^2 - 2x = 1", True, "polynomial expansion"),
    ("2y = 2x", "y = x", False, "polynomial expansion"),  # scaled equations: documented gap
])
def test_compare_answers(a, b, equal, how):
  assert equivalence.compare_answers(a, b, rel_tol=1e-6, percent=False) == (equal, how)


def test_compare_parse_failures():
  assert equivalence.compare_answers("_", "1", rel_tol=0, percent=False)[0] is False
  # An unparseable reference returns None so that the caller may compare text.
  assert equivalence.compare_answers("1", "a_b", rel_tol=0, percent=False)[0] is None


def test_degree_bound_does_not_expand():
  assert equivalence._degree_bound((x + 1)**10 * y) == 11
  assert equivalence._degree_bound(sympy.sin(x)) == float("inf")
