"""A whitelist parser from answer text (plain math or simple LaTeX) to sympy objects.

Model output is untrusted, so it never reaches `eval`, `exec`, `sympify` or `parse_expr`. This
module tokenizes the normalised answer with its own lexer, in which every character and command
must be on a whitelist (digits, ASCII letters, `+-*/^()[]{},=%`, `\\frac`, `\\sqrt`, `\\pi`,
`\\cdot`, trig/log functions, Greek letters), and builds the expression with sympy constructors
(`Integer`, `Rational`, `Symbol`, `Add`, `Mul`, `Pow`, ...) by recursive descent. Anything else is
a `ParseError`. Sizes are bounded before sympy does any arithmetic: at most `MAX_TOKENS` tokens,
`MAX_DIGITS` digits per number, nesting depth `MAX_DEPTH`, numeric exponents of magnitude at most
`MAX_EXPONENT` and exact integer powers of at most `MAX_POWER_BITS` bits, so `9^9^9^9` is refused
before it is computed (and the verifier runs this in a worker process with a hard time limit).

Conventions: implicit multiplication (`2x`, `2\\sqrt{2}`, `(x+1)(x-1)`, `xy`) except before a
number, and except `f(...)`, `g(...)`, `h(...)`, `F`, `G`, `H`, `P`, `Q`, `W` before a bracket,
which apply an undefined function (`FUNCTION_NAMES`); `^` and `**` are powers, right-associative;
`e` is Euler's number; `log` is natural; a top-level comma (or `;`) list is a tuple flagged
`Parsed.bare_list` (the verifier reads it as a set of answers); `a = b` is an equation (a
`sympy.Eq`), or `Labelled` when `a` is a name that is not one variable (`f(x)`, `|AB|`, `(p, q)`,
`A : B`) or names a point, set or matrix (`A = (1, 2)`); a chain or an inequality (`<`, `>`,
`\\le`, `\\ge`, `\\ne`, `<=`, `\\approx`, ...) is a `Relation`; `a : b` is the ratio a/b;
`x_1`, `a_{37}` are variable names; `|x|` is the absolute value; `\\{a, b\\}`, `{a, b}` and
`\\pm a` are a `SetOf`; `pmatrix`, `bmatrix`, `matrix` and `array` are a `sympy.ImmutableMatrix`
(+, -, * allowed), `vmatrix` its determinant (symbolic only up to 3x3).

Intervals: two values between brackets of which at least one is square, `[a, b]`, `(a, b]`,
`[a, b)`, are an `Interval` (ends open or closed as written, `\\infty` allowed); `(a, b)` alone
is a pair (a `sympy.Tuple`, flagged `Parsed.open_pair`, which the verifier also reads as the
open interval when the other side is an interval); pieces joined by `\\cup` are an
`IntervalUnion` (each `(a, b)` piece is then open); `x \\in S` is the set S.
"""

from __future__ import annotations

import dataclasses
import fractions
import functools
import operator
import re
from typing import Any, Optional

import sympy
from sympy.matrices.exceptions import NonSquareMatrixError, ShapeError

MAX_TOKENS = 256
MAX_DIGITS = 64
MAX_DEPTH = 48
MAX_EXPONENT = 1000
MAX_POWER_BITS = 20000
MAX_SCI_EXPONENT = 300


class ParseError(ValueError):
  """The text is not in the whitelisted grammar, or exceeds a size bound."""


@dataclasses.dataclass(frozen=True)
class Interval:
  """An interval of real numbers as written: endpoints (sympy Expr, `-oo`/`oo` allowed) and
  whether each end is open (round bracket) or closed (square bracket)."""
  left: sympy.Expr
  right: sympy.Expr
  left_open: bool
  right_open: bool


@dataclasses.dataclass(frozen=True)
class IntervalUnion:
  """A union of intervals written with `\\cup`, pieces in the order written."""
  parts: tuple[Interval, ...]


@dataclasses.dataclass(frozen=True)
class SetOf:
  """A set written `\\{a, b\\}` or `{a, b}` (or `\\pm a`), elements in the order written."""
  items: tuple


@dataclasses.dataclass(frozen=True)
class Relation:
  """A chain of relations `a op b op c ...` other than one `=` (which is a `sympy.Eq`).

  `ops[i]` relates `terms[i]` and `terms[i + 1]`: one of "=", "<", "<=", ">", ">=", "!=",
  "approx". `label` is True when the first term is a name (`x`, `f(x)`, `|AB|`, `a_3`): the
  chain then states the value of that name.
  """
  terms: tuple
  ops: tuple
  label: bool


@dataclasses.dataclass(frozen=True)
class Labelled:
  """`name = value` where the name is not a plain variable (`f(x) = 1`, `|AB| = 1`,
  `(p, q) = (3, 2)`, `A : B = 1`) or the value is not an expression (a named point
  `A = (1, 2)`, a set, a matrix). Against an unlabelled answer only the value counts."""
  label: Any
  value: Any


@dataclasses.dataclass(frozen=True)
class Parsed:
  """A parsed answer.

  Attributes:
    value: sympy Expr, `sympy.Eq` (unevaluated), `sympy.Tuple` of those, `Interval` or
      `IntervalUnion`.
    decimal: True if any number was written with a decimal point or exponent (the verifier then
      compares with the relative tolerance).
    percent: True if a `%` appeared.
    open_pair: True if the whole answer is a pair in round brackets, `(a, b)`: a point, or the
      open interval from a to b (`rlscale.tasks.equivalence` decides by the other side).
    bare_list: True if the whole answer is a comma list without brackets (`1, 2`): a set of
      answers (`rlscale.tasks.equivalence` says when a list of named values keeps its order).
  """
  value: Any
  decimal: bool
  percent: bool
  open_pair: bool = False
  bare_list: bool = False


@dataclasses.dataclass(frozen=True)
class _Token:
  kind: str  # "num", "sym", "const", "func", "op"
  text: str


# Digit grouping needs a non-zero leading group and three digits after each separator ("0,111"
# is two numbers); inside round or square brackets a comma always separates ("(12,102)").
_NUM_RE = re.compile(
    r"(?:[1-9]\d{0,2}(?:,\d{3})+(?!\d)|[1-9]\d{0,2}(?: \d{3})+(?!\d)|\d+)(?:\.\d*)?"
    r"(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?", re.ASCII)
_UNGROUPED_NUM_RE = re.compile(r"\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?",
                               re.ASCII)
# A subscript makes one variable name: x_1, a_{37}, S_{MBCN}, F_{n-1}.
_SUBSCRIPT_RE = re.compile(r"_(?:\{ ?([A-Za-z0-9+\-, ]{1,16}) ?\}|([A-Za-z0-9]))", re.ASCII)
_MATRIX_BEGIN_RE = re.compile(r"\\begin\{([pbvBV]?matrix|array)\}(?:\{[lcr| ]{1,64}\})?")
_MATRIX_END_RE = re.compile(r"\\end\{([pbvBV]?matrix|array)\}")
_RELATION_COMMANDS = {"le": "<=", "leq": "<=", "leqslant": "<=", "ge": ">=", "geq": ">=",
                      "geqslant": ">=", "ne": "!=", "neq": "!=", "lt": "<", "gt": ">",
                      "approx": "approx"}
_RELATIONS = frozenset(_RELATION_COMMANDS.values()) | {"="}
_LETTERS_RE = re.compile(r"[A-Za-z]+")
_COMMAND_RE = re.compile(r"\\([A-Za-z]+)")
_FUNCTIONS = {
    "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "cot": sympy.cot, "sec": sympy.sec,
    "csc": sympy.csc, "arcsin": sympy.asin, "arccos": sympy.acos, "arctan": sympy.atan,
    "ln": sympy.log, "log": sympy.log, "exp": sympy.exp,
}
_CONSTANTS = {"pi": sympy.pi, "infty": sympy.oo, "e": sympy.E}
_GREEK = frozenset(
    "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu "
    "xi rho sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Sigma Phi Psi "
    "Omega".split())
# Words recognised inside a run of plain letters ("sqrt2", "sinx"), longest first.
_PLAIN_WORDS = sorted(["sqrt", "pi", *_FUNCTIONS], key=len, reverse=True)
_OPERATORS = frozenset("+-*/^(){}[],=%|:&<>")
# Letters that name a function when a bracket follows: f(2) is f at 2, not 2f (so that
# f(3) < f(1) differs from f(2) < f(1)); any other letter before a bracket multiplies, x(x+1).
FUNCTION_NAMES = frozenset("fghFGHPQW")
_CLOSE = {"(": ")", "[": "]", "{": "}"}


def tokenize(text: str) -> list[_Token]:
  """Splits normalised answer text into whitelisted tokens.

  Raises:
    ParseError: a character or command off the whitelist, a number with more than MAX_DIGITS
      digits, or more than MAX_TOKENS tokens.
  """
  tokens: list[_Token] = []
  pos, n = 0, len(text)
  brackets = 0  # open round or square brackets
  while pos < n:
    c = text[pos]
    if c in " \t\n\r":
      pos += 1
      continue
    if c.isascii() and (c.isdigit() or c == "." and text[pos + 1:pos + 2].isdigit()):
      m = (_UNGROUPED_NUM_RE if brackets else _NUM_RE).match(text, pos)
      _check_number(m.group(0))
      tokens.append(_Token("num", m.group(0)))
      pos = m.end()
    elif c == "\\":
      pos = _backslash(text, pos, tokens)
    elif c.isascii() and c.isalpha():
      m = _LETTERS_RE.match(text, pos)
      tokens.extend(_letters(m.group(0)))
      pos = m.end()
    elif c == "_" and tokens and tokens[-1].kind == "sym":
      m = _SUBSCRIPT_RE.match(text, pos)
      if not m:
        raise ParseError("unsupported subscript")
      tokens[-1] = _Token("sym", tokens[-1].text + "_" + (m.group(1) or m.group(2)).replace(" ",
                                                                                            ""))
      pos = m.end()
    elif text.startswith(("**", "<=", ">=", "!=", "=<", "=>"), pos):
      pair = text[pos:pos + 2]
      tokens.append(_Token("op", {"**": "^", "=<": "<=", "=>": ">="}.get(pair, pair)))
      pos += 2
    elif c in _OPERATORS:
      brackets += 1 if c in "([" else -1 if c in ")]" else 0
      tokens.append(_Token("op", c))
      pos += 1
    elif c == ";":
      tokens.append(_Token("op", ";"))
      pos += 1
    else:
      raise ParseError(f"unsupported character {c!r}")
    if len(tokens) > MAX_TOKENS:
      raise ParseError(f"more than {MAX_TOKENS} tokens")
  return tokens


def _backslash(text: str, pos: int, tokens: list[_Token]) -> int:
  """Lexes the backslash construct at `text[pos]`; returns the position after it."""
  for regex, kind in ((_MATRIX_BEGIN_RE, "begin"), (_MATRIX_END_RE, "end")):
    m = regex.match(text, pos)
    if m:
      tokens.append(_Token("op", f"{kind}:{m.group(1)}"))
      return m.end()
  two = text[pos:pos + 2]
  if two in ("\\{", "\\}"):
    tokens.append(_Token("op", "set" + two[1]))
    return pos + 2
  if two == "\\\\":
    tokens.append(_Token("op", "row"))
    return pos + 2
  m = _COMMAND_RE.match(text, pos)
  if not m:
    raise ParseError(f"unsupported LaTeX {two!r}")
  tokens.append(_command(m.group(1)))
  return m.end()


def _check_number(text: str) -> None:
  mantissa, _, exponent = text.lower().partition("e")
  if sum(ch.isdigit() for ch in mantissa) > MAX_DIGITS:
    raise ParseError(f"number with more than {MAX_DIGITS} digits")
  if exponent and abs(int(exponent)) > MAX_SCI_EXPONENT:
    raise ParseError(f"scientific exponent beyond +-{MAX_SCI_EXPONENT}")


def _command(name: str) -> _Token:
  if name in ("frac", "sqrt") or name in _FUNCTIONS:
    return _Token("func", name)
  if name in ("pi", "infty"):
    return _Token("const", name)
  if name in _GREEK:
    return _Token("sym", name)
  if name in ("cdot", "times", "ast"):
    return _Token("op", "*")
  if name == "div":
    return _Token("op", "/")
  if name in ("cup", "in", "pm"):
    return _Token("op", name)
  if name in _RELATION_COMMANDS:
    return _Token("op", _RELATION_COMMANDS[name])
  if name == "mid":
    return _Token("op", "|")
  raise ParseError(f"unsupported command \\{name}")


def _letters(run: str) -> list[_Token]:
  """Splits a run of letters into known words and single-letter symbols ("sqrtx" -> sqrt, x)."""
  out, i = [], 0
  while i < len(run):
    word = next((w for w in _PLAIN_WORDS if run.startswith(w, i)), None)
    if word:
      out.append(_Token("const" if word == "pi" else "func", word))
      i += len(word)
    else:
      out.append(_Token("const" if run[i] == "e" else "sym", run[i]))
      i += 1
  return out


def _number(text: str) -> sympy.Rational:
  value = fractions.Fraction(text.replace(",", "").replace(" ", ""))
  return sympy.Rational(value.numerator, value.denominator)


def _short(value: sympy.Basic, limit: int = 24) -> str:
  text = str(value)
  return text if len(text) <= limit else text[:limit] + "..."


def checked_pow(base: sympy.Expr, exponent: sympy.Expr) -> sympy.Expr:
  """`base ** exponent`, refusing sizes that would make sympy compute huge numbers.

  Raises:
    ParseError: a numeric exponent that is not real or exceeds MAX_EXPONENT in magnitude, or an
      exact rational power with more than MAX_POWER_BITS bits.
  """
  if exponent.is_number:
    value = exponent.evalf(15)
    if not value.is_real or not value.is_finite:
      raise ParseError("exponent is not a finite real number")
    if abs(value) > MAX_EXPONENT:
      raise ParseError(f"exponent {_short(exponent)} beyond +-{MAX_EXPONENT}")
    if isinstance(base, sympy.Rational) and isinstance(exponent, sympy.Integer):
      bits = abs(int(exponent)) * max(int(base.p).bit_length(), int(base.q).bit_length())
      if bits > MAX_POWER_BITS:
        raise ParseError(f"power {_short(base)}^{_short(exponent)} has more than "
                         f"{MAX_POWER_BITS} bits")
  return sympy.Pow(base, exponent)


def _expr(value: Any) -> sympy.Expr:
  """Operand check: tuples, intervals and equations may only stand alone, never in arithmetic."""
  if not isinstance(value, sympy.Expr):
    raise ParseError("arithmetic on a tuple, interval or equation")
  return value


def _operand(value: Any) -> Any:
  """An operand of + - * /: an expression or a matrix (`_expr` for everything else)."""
  return value if isinstance(value, sympy.ImmutableMatrix) else _expr(value)


def is_sequence(value: Any) -> bool:
  """Whether a parsed value is a tuple or list of values (a `sympy.Tuple`, or a Python tuple holding relations)."""
  return isinstance(value, (sympy.Tuple, tuple))


def _sequence(items: list) -> Any:
  """A comma list: a `sympy.Tuple`, or a Python tuple when an item is not a sympy object."""
  if all(isinstance(item, sympy.Basic) for item in items):
    return sympy.Tuple(*items)
  return tuple(items)


def _interval(value: Any, left_open: bool, right_open: bool) -> Interval:
  """A pair of values as an interval with the given ends."""
  if not (is_sequence(value) and len(value) == 2):
    raise ParseError("an interval needs two endpoints")
  return Interval(_expr(value[0]), _expr(value[1]), left_open, right_open)


def _as_set(value: Any) -> Interval | IntervalUnion:
  """A piece of a union or the right side of `\\in`: an interval, or a pair read as open."""
  if isinstance(value, (Interval, IntervalUnion)):
    return value
  return _interval(value, True, True)


class _Parser:
  """Recursive descent over the token list; one instance per parse."""

  def __init__(self, tokens: list[_Token], percent_mode: str):
    self.tokens = tokens
    self.pos = 0
    self.depth = 0
    self.percent_mode = percent_mode
    self.decimal = False
    self.percent = False
    self.pair_span = (-1, -1)  # token span of the last "(a, b)" pair
    self.bare_list = False

  # --- token helpers
  def peek(self) -> Optional[_Token]:
    return self.tokens[self.pos] if self.pos < len(self.tokens) else None

  def at_op(self, *ops: str) -> bool:
    t = self.peek()
    return t is not None and t.kind == "op" and t.text in ops

  def take(self) -> _Token:
    t = self.peek()
    if t is None:
      raise ParseError("unexpected end of answer")
    self.pos += 1
    return t

  def expect(self, op: str) -> None:
    t = self.take()
    if t.kind != "op" or t.text != op:
      raise ParseError(f"expected {op!r}, found {t.text!r}")

  def enter(self) -> None:
    self.depth += 1
    if self.depth > MAX_DEPTH:
      raise ParseError(f"nesting deeper than {MAX_DEPTH}")

  # --- grammar
  def parse(self) -> Any:
    if not self.tokens:
      raise ParseError("empty answer")
    if self.at_op("pm"):  # \pm a: the two values a and -a
      self.take()
      value = _expr(self.sum())
      value = SetOf((value, -value))
    else:
      items = self.items()
      self.bare_list = len(items) > 1
      value = self.build_list(items)
    if self.peek() is not None:
      raise ParseError(f"unexpected {self.peek().text!r}")
    return value

  def items(self) -> list:
    """Items separated by "," or ";"; where both appear, ";" separates groups of items, each
    group of several a tuple (`p=5,q=2;p=7,q=2` is two pairs, `(0;1)` a pair)."""
    groups = [[self.membership()]]
    while self.at_op(",", ";"):
      if self.take().text == ";":
        groups.append([])
      if self.peek() is None or self.at_op(",", ";"):
        continue  # "19, 46, and 82" leaves an empty item after normalisation
      groups[-1].append(self.membership())
    if len(groups) == 1:
      return groups[0]
    if all(len(g) <= 1 for g in groups):
      return [g[0] for g in groups if g]
    return [g[0] if len(g) == 1 else _sequence(g) for g in groups if g]

  @staticmethod
  def build_list(items: list) -> Any:
    if len(items) == 1:
      return items[0]
    if any(isinstance(item, (Interval, IntervalUnion)) for item in items):
      # Refused here rather than handed to sympy.Tuple, which would sympify a foreign object.
      raise ParseError("a list of intervals is not supported")
    return _sequence(items)

  def comma_list(self) -> Any:
    return self.build_list(self.items())

  def membership(self) -> Any:
    """`x \\in S` is the set S (x a single variable); otherwise a union or an equation."""
    value = self.union()
    if not self.at_op("in"):
      return value
    self.take()
    if not isinstance(value, sympy.Symbol):
      raise ParseError("only a variable may stand before \\in")
    return _as_set(self.union())

  def union(self) -> Any:
    value = self.relation()
    if not self.at_op("cup"):
      return value
    parts = [_as_set(value)]
    while self.at_op("cup"):
      self.take()
      parts.append(_as_set(self.relation()))
    flat = [p for part in parts for p in (part.parts if isinstance(part, IntervalUnion) else
                                          (part,))]
    return IntervalUnion(tuple(flat))

  def relation(self) -> Any:
    """`a`, `a = b` (a `sympy.Eq`, or `Labelled` for a name), or a chain (`Relation`)."""
    start = self.pos
    terms, ops = [self.ratio()], []
    label_end = self.pos
    while self.peek() is not None and self.peek().kind == "op" and self.peek().text in _RELATIONS:
      ops.append(self.take().text)
      terms.append(self.ratio())
    if not ops:
      return terms[0]
    if any(isinstance(t, (Interval, IntervalUnion)) for t in terms):
      raise ParseError("an equation with an interval; write x \\in [a, b]")
    label = self.is_label(start, label_end)
    if ops == ["="]:
      # A variable stays an equation's side (x = 3 is Eq(x, 3)); a variable naming a point, a
      # set, a list or a matrix (A = (1, 2)) labels it, as Math-Verify's Eq(A, ...) does.
      expression = isinstance(terms[1], sympy.Expr) and not isinstance(terms[1], sympy.MatrixBase)
      if label and not (isinstance(terms[0], sympy.Symbol) and expression):
        return Labelled(terms[0], terms[1])
      return sympy.Eq(_operand(terms[0]), _operand(terms[1]), evaluate=False)
    if any(not isinstance(t, sympy.Expr) for t in terms[1:]) or not (
        label or isinstance(terms[0], sympy.Expr)):
      raise ParseError("a chain of relations between non-numbers")
    return Relation(tuple(terms), tuple(ops), label)

  def is_label(self, start: int, end: int) -> bool:
    """Whether tokens[start:end] are a name: letters, |.|, :, brackets, \\frac; no number, no
    function like \\sqrt (`\\sqrt{x} = 3` says x = 9) and no + - * / ^ (`f(x)`, `|AB|`,
    `(p, q)`, `A : B`, `\\frac{NO}{BO}`, `a_3`)."""
    return all(t.kind == "sym" or t.kind == "func" and t.text == "frac" or
               t.kind == "op" and t.text in "()|:,{}"
               for t in self.tokens[start:end]) and end > start

  def ratio(self) -> Any:
    """`a : b` is the ratio a/b (one colon; `12:00` is undefined, never 12)."""
    value = self.sum()
    if not self.at_op(":"):
      return value
    self.take()
    rhs = self.sum()
    if self.at_op(":"):
      raise ParseError("a ratio of more than two terms")
    return _expr(value) / _expr(rhs)

  def sum(self) -> sympy.Expr:
    terms = [self.term()]
    while self.at_op("+", "-"):
      op = self.take().text
      term = self.term()
      terms.append(term if op == "+" else -_operand(term))
    if len(terms) == 1:
      return terms[0]
    if any(isinstance(t, sympy.ImmutableMatrix) for t in terms):
      return functools.reduce(operator.add, map(_operand, terms))
    return sympy.Add(*map(_expr, terms))

  def term(self) -> sympy.Expr:
    value = self.unary()
    while True:
      if self.at_op("*", "/"):
        op = self.take().text
        rhs = self.unary()
        value = _operand(value) * _operand(rhs) if op == "*" else _operand(value) / _expr(rhs)
      elif self.starts_implicit_factor():
        value = _operand(value) * _operand(self.power())
      else:
        return value

  def starts_implicit_factor(self) -> bool:
    t = self.peek()
    return t is not None and (t.kind in ("sym", "const", "func") or t.kind == "op" and
                              (t.text in "([{" or t.text.startswith("begin:")))

  def unary(self) -> sympy.Expr:
    if self.at_op("-", "+"):
      self.enter()
      sign = self.take().text
      value = self.unary()
      self.depth -= 1
      return -_operand(value) if sign == "-" else value
    return self.power()

  def power(self) -> sympy.Expr:
    base = self.postfix()
    if self.at_op("^"):
      self.take()
      self.enter()
      exponent = self.unary()  # right-associative: 2^3^2 = 2^(3^2)
      self.depth -= 1
      return checked_pow(_expr(base), _expr(exponent))
    return base

  def postfix(self) -> sympy.Expr:
    value = self.atom()
    while self.at_op("%"):
      self.take()
      self.percent = True
      if self.percent_mode == "divide":
        value = _expr(value) / 100
    return value

  def atom(self) -> sympy.Expr:
    t = self.take()
    if t.kind == "num":
      self.decimal |= "." in t.text or "e" in t.text.lower()
      return _number(t.text)
    if t.kind == "sym":
      if t.text in FUNCTION_NAMES and self.at_op("("):
        self.enter()
        self.take()
        args = self.comma_list()
        self.expect(")")
        self.depth -= 1
        args = tuple(args) if is_sequence(args) else (args,)
        return sympy.Function(t.text)(*map(_expr, args))
      return sympy.Symbol(t.text)
    if t.kind == "const":
      return _CONSTANTS[t.text]
    if t.kind == "op" and t.text in "([":
      return self.bracketed(t.text)
    if t.kind == "op" and t.text in ("{", "set{"):
      # Braces group one value; with a comma (or as \{ \}) they are a set.
      self.enter()
      items = self.items()
      self.expect("}" if t.text == "{" else "set}")
      self.depth -= 1
      return SetOf(tuple(items)) if len(items) > 1 or t.text == "set{" else items[0]
    if t.kind == "op" and t.text == "|":
      self.enter()
      value = sympy.Abs(_expr(self.sum()))
      self.expect("|")
      self.depth -= 1
      return value
    if t.kind == "op" and t.text.startswith("begin:"):
      self.enter()
      value = self.matrix(t.text[len("begin:"):])
      self.depth -= 1
      return value
    if t.kind == "func":
      self.enter()
      value = self.function(t.text)
      self.depth -= 1
      return value
    raise ParseError(f"unexpected {t.text!r}")

  def bracketed(self, opening: str) -> Any:
    """After `(` or `[`: a group, a tuple, or an interval when a square bracket is involved."""
    start = self.pos - 1
    self.enter()
    value = self.comma_list()
    closing = self.take()
    if closing.kind != "op" or closing.text not in ")]":
      raise ParseError(f"expected ')' or ']', found {closing.text!r}")
    self.depth -= 1
    pair = is_sequence(value) and len(value) == 2
    if opening + closing.text == "()":
      if pair:
        self.pair_span = (start, self.pos)
      return value
    if pair:
      return _interval(value, opening == "(", closing.text == ")")
    if opening + closing.text == "[]":
      return value  # [x + 1] grouping, [1, 2, 3] list
    raise ParseError(f"mismatched brackets {opening}...{closing.text} around other than a pair")

  def matrix(self, environment: str) -> Any:
    """Rows of `&`-separated entries up to `\\end{environment}`; vmatrix is the determinant."""
    rows, row = [], [_expr(self.sum())]
    while not self.at_op("end:" + environment):
      t = self.take()
      if t.kind == "op" and t.text == "&":
        row.append(_expr(self.sum()))
      elif t.kind == "op" and t.text == "row":
        rows.append(row)
        row = [] if self.at_op("end:" + environment) else [_expr(self.sum())]
      else:
        raise ParseError(f"unexpected {t.text!r} in a matrix")
    self.take()
    if row:
      rows.append(row)
    if len({len(r) for r in rows}) != 1:
      raise ParseError("matrix rows of different lengths")
    value = sympy.ImmutableMatrix(rows)
    if environment in ("vmatrix", "Vmatrix"):
      # A symbolic determinant has n! terms: computed only up to 3x3 (numbers: any size).
      if value.rows != value.cols or value.rows > 3 and value.free_symbols:
        raise ParseError("a determinant of a non-square or symbolic matrix larger than 3x3")
      return value.det() if environment == "vmatrix" else value.norm()
    return value

  def function(self, name: str) -> sympy.Expr:
    if name == "frac":
      numerator = _expr(self.argument())
      return numerator / _expr(self.argument())
    if name == "sqrt":
      if self.at_op("["):
        self.take()
        index = self.sum()
        self.expect("]")
        if not (isinstance(index, sympy.Integer) and 2 <= index <= MAX_EXPONENT):
          raise ParseError(f"root index must be an integer in [2, {MAX_EXPONENT}]")
        return sympy.root(_expr(self.argument()), index)
      return sympy.sqrt(_expr(self.argument()))
    exponent = None
    if self.at_op("^"):  # \sin^2 x = (\sin x)^2
      self.take()
      exponent = self.postfix()
    t = self.peek()
    arg = self.atom() if t is not None and t.kind == "op" and t.text in "([{" else self.power()
    value = _FUNCTIONS[name](_expr(arg))
    return checked_pow(value, _expr(exponent)) if exponent is not None else value

  def argument(self) -> sympy.Expr:
    """A LaTeX macro argument: `{...}`, or one token (`\\frac12` has arguments 1 and 2)."""
    t = self.peek()
    if t is not None and t.kind == "num" and len(t.text) > 1 and t.text[0].isdigit():
      # \frac12: the lexer read "12"; the first argument is only its first digit.
      self.tokens[self.pos] = _Token("num", t.text[1:])
      if not t.text[1].isdigit():
        raise ParseError(f"bad macro argument {t.text!r}")
      return sympy.Integer(int(t.text[0]))
    if t is not None and t.kind == "op" and t.text != "{":
      raise ParseError(f"bad macro argument {t.text!r}")
    return self.atom()


def parse_math(text: str, *, percent_mode: str = "strip") -> Parsed:
  """Parses a normalised answer into sympy.

  Args:
    text: output of `normalize.normalize_answer` (bounded in length by the caller).
    percent_mode: "strip" reads `50%` as 50; "divide" reads it as 1/2.

  Returns:
    Parsed(value, decimal, percent).

  Raises:
    ParseError: off-whitelist text, a size bound exceeded, or an ill-formed expression (e.g.
      arithmetic on a tuple).
  """
  if percent_mode not in ("strip", "divide"):
    raise ValueError(f"percent_mode must be 'strip' or 'divide', got {percent_mode!r}")
  parser = _Parser(tokenize(text), percent_mode)
  try:
    value = parser.parse()
  except (TypeError, AttributeError, sympy.SympifyError, ShapeError, NonSquareMatrixError) as e:
    # e.g. "(1,2)*3": sympy refuses arithmetic on a Tuple.
    raise ParseError(f"ill-formed expression ({type(e).__name__})") from None
  open_pair = parser.pair_span == (0, len(parser.tokens))
  return Parsed(value, parser.decimal, parser.percent, open_pair, parser.bare_list)
