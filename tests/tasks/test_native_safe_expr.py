"""The allow-list arithmetic parser behind rlscale's native scorers (in process, no worker)."""

import fractions
import re

import pytest
import sympy

from rlscale.tasks import safe_expr

ARITHMETIC = safe_expr.Grammar()
FORMULA = safe_expr.Grammar(symbols=frozenset({"x", "C"}), functions=frozenset({"sin", "exp"}),
                            operators=frozenset({"+", "-", "*", "/", "**"}), decimals=True)
X, C = sympy.Symbol("x"), sympy.Symbol("C")
NAMES = {"x": X, "C": C, "sin": sympy.sin, "exp": sympy.exp}


def _value(text):
  return safe_expr.to_fraction(safe_expr.parse(text, FORMULA))


@pytest.mark.parametrize("text, expected", [
    ("6*(98 - 54) - 34 - 66", 164),  # 6*44 = 264; 264 - 100
    ("49*(85 - 1)/14 - 42 - 73", 179),  # 49*84/14 = 294; 294 - 115
    ("1/3 + 1/6", fractions.Fraction(1, 2)),
    ("-2**2", -4),  # Python: the power binds tighter than the unary minus on its left
    ("2**-1", fractions.Fraction(1, 2)),
    ("2**3**2", 512),  # right-associative: 2**9
    ("--3", 3),
    ("+(((7)))", 7),
    ("8 - 3 - 2", 3),  # left-associative
    ("12 / 3 / 2", 2),
    (" 1\t+ 2 ", 3),
    ("0.5*4", 2),
])
def test_values_follow_python_precedence(text, expected):
  assert _value(text) == expected


def test_numbers_are_listed_in_order_as_written():
  assert safe_expr.numbers(safe_expr.parse("6*(98 - 54) - 34", ARITHMETIC)) == ["6", "98", "54",
                                                                             "34"]
  assert safe_expr.numbers(safe_expr.parse("sin(2*x) + 3", FORMULA)) == ["2", "3"]


def test_tree_shape():
  assert safe_expr.parse("-x**2 + sin(C)", FORMULA) == (
      "bin", "+", ("neg", ("bin", "**", ("name", "x"), ("num", "2"))),
      ("call", "sin", ("name", "C")))


def test_to_sympy_equals_python_arithmetic_on_sympy_objects():
  tree = safe_expr.parse("3*x**2/2 - exp(x)*sin(x) + C + 0.5", FORMULA)
  expected = sympy.Integer(3) * X**2 / 2 - sympy.exp(X) * sympy.sin(X) + C + sympy.Float("0.5")
  assert safe_expr.to_sympy(tree, NAMES) == expected


@pytest.mark.parametrize("text, message", [
    ("2x", "after a complete expression"),  # no implicit multiplication
    ("2(3)", "after a complete expression"),
    ("(sin)(x)", "expected '('"),  # a function only as `name(`
    ("x(1)", "after a complete expression"),  # a symbol is never called
    ("sin x", "expected '('"),
    ("1 +", "more input"),
    ("(1", "expected ')'"),
    ("1)", "after a complete expression"),
    ("", "empty expression"),
    ("   ", "empty expression"),
    ("y", "name 'y' not allowed"),
    ("eval", "name 'eval' not allowed"),
    ("x.real", "character '.' not allowed"),
    ("__import__", "character '_' not allowed"),
    ("'1'", "character \"'\" not allowed"),
    ("1\n+1", "U+000A not allowed"),
    ("1#", "character '#' not allowed"),
    ("1;2", "character ';' not allowed"),
    ("[1]", "character '[' not allowed"),
    ("1,2", "character ',' not allowed"),
    ("\uff45xp(x)", "character '\uff45' not allowed"),  # fullwidth e (NFKC: e)
    ("\u0661", "character '\u0661' not allowed"),  # Arabic-Indic digit one
    ("x\u200b", "U+200B not allowed"),
])
def test_text_outside_the_grammar_is_refused(text, message):
  with pytest.raises(safe_expr.ExprError, match=re.escape(message)):
    safe_expr.parse(text, FORMULA)


@pytest.mark.parametrize("text, message", [
    ("2**3", "operator '\\*\\*' not allowed"),
    ("1.5", "decimal numbers not allowed"),
    ("x", "name 'x' not allowed"),
    ("7//2", "after a complete expression|more input|'/'"),
])
def test_arithmetic_grammar_is_narrower(text, message):
  with pytest.raises(safe_expr.ExprError, match=message):
    safe_expr.parse(text, ARITHMETIC)


def test_size_bounds():
  with pytest.raises(safe_expr.ExprError, match="too long"):
    safe_expr.parse("1+" * 600 + "1", FORMULA)
  with pytest.raises(safe_expr.ExprError, match="more than 256 tokens"):
    safe_expr.parse("1+" * 200 + "1", FORMULA)
  with pytest.raises(safe_expr.ExprError, match="more than 30 digits"):
    safe_expr.parse("1" * 31, FORMULA)
  with pytest.raises(safe_expr.ExprError, match="nesting deeper than 32"):
    safe_expr.parse("(" * 40 + "1" + ")" * 40, FORMULA)
  with pytest.raises(safe_expr.ExprError, match="nesting deeper than 32"):
    safe_expr.parse("-" * 40 + "1", FORMULA)
  assert _value("(" * 30 + "1" + ")" * 30) == 1


@pytest.mark.parametrize("text", ["9**9**9**9", "2**1001", "(10**30)**999", "2**(1/2)"])
def test_huge_or_inexact_powers_are_refused_before_computing(text):
  with pytest.raises(safe_expr.ExprError):
    _value(text)


@pytest.mark.parametrize("text", ["9**9**9**9", "2**1001", "(10**30)**999", "x**(10**4)"])
def test_huge_sympy_powers_are_refused_before_computing(text):
  with pytest.raises(safe_expr.ExprError):
    safe_expr.to_sympy(safe_expr.parse(text, FORMULA), NAMES)


def test_bounded_powers_are_exact():
  assert _value("2**10") == 1024
  assert _value("10**300") == 10**300  # 300 * 4 bits
  assert safe_expr.to_sympy(safe_expr.parse("2**(1/2)", FORMULA), NAMES) == sympy.sqrt(2)


def test_division_by_zero_raises_zero_division():
  with pytest.raises(ZeroDivisionError):
    _value("1/(2-2)")
  with pytest.raises(ZeroDivisionError):
    _value("0**-1")


def test_grammar_names_are_checked():
  with pytest.raises(ValueError, match="not 1-16 ASCII letters"):
    safe_expr.Grammar(symbols=frozenset({"x_1"}))
  with pytest.raises(ValueError, match="both symbol and function"):
    safe_expr.Grammar(symbols=frozenset({"sin"}), functions=frozenset({"sin"}))
  with pytest.raises(ValueError, match="unknown operators"):
    safe_expr.Grammar(operators=frozenset({"//"}))
