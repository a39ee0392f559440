"""A bounded allow-list parser for Python-syntax arithmetic (`3*x**2/2 + C`, `6*(98 - 54) - 34`).

Some reasoning-gym scorers read answers with sympy's `parse_expr`, which is Python `eval`. rlscale's
own scorers for those tasks (`rlscale.tasks.native_scorers`) read the same answers with this
module instead, so no answer text ever reaches `eval`, `exec`, `sympify` or `parse_expr`.

Lexer: the text must be ASCII; every token is one of: whitespace (space or tab), an integer
`[0-9]+` (a decimal `[0-9]+.[0-9]+` only where the grammar allows it), a name `[A-Za-z]+` that is
on the grammar's list of symbols or functions, `+ - * / **`, `(`, `)`. Anything else (quotes,
backslashes, underscores, dots, brackets, commas, `#`, `;`, `:`, `=`, newlines, unknown names,
non-ASCII characters such as fullwidth letters that Python would NFKC-normalise into names) is
an `ExprError` naming it. Operators the grammar does not list are errors too.

Parser: recursive descent with Python's precedence, so a value means what `parse_expr` would
make it mean: `+ -` < `* /` < unary `+ -` < `**` (right-associative, binding tighter than a
unary minus on its left: `-2**2` is -4, `2**-1` is 1/2). A function name must be followed by
`(`; a name never is called otherwise (no `(f)(x)`, no `x(y)`), and juxtaposition (`2x`,
`2(3)`) is an error as it is for `parse_expr`'s standard transformations.

Bounds (model text is untrusted): at most `MAX_CHARS` characters, `MAX_TOKENS` tokens,
`MAX_DIGITS` digits per number, nesting depth `MAX_DEPTH`; evaluation refuses numeric exponents
beyond `MAX_EXPONENT` in magnitude and exact powers of more than `MAX_POWER_BITS` bits, so
`9**9**9**9` is an error, not an hour of big-integer arithmetic.

The tree is plain tuples: ("num", text), ("name", text), ("call", function, argument),
("neg", operand), ("pos", operand), ("bin", operator, left, right).
"""

from __future__ import annotations

import dataclasses
import fractions
import operator
import re
from typing import Any, Callable, Mapping

MAX_CHARS = 1000
MAX_TOKENS = 256
MAX_DIGITS = 30
MAX_DEPTH = 32
MAX_EXPONENT = 1000
MAX_POWER_BITS = 20000

# re.ASCII: \s would otherwise also match Unicode spaces; [0-9] and [A-Za-z] are spelled out
# because \d and \w match non-ASCII digits and letters.
_TOKEN_RE = re.compile(
    r"(?P<space>[ \t]+)|(?P<number>[0-9]+(?:\.[0-9]+)?)|(?P<name>[A-Za-z]+)"
    r"|(?P<operator>\*\*|[-+*/])|(?P<paren>[()])|(?P<other>.)", re.ASCII | re.DOTALL)
_NAME_RE = re.compile(r"[A-Za-z]{1,16}", re.ASCII)


class ExprError(ValueError):
  """The text is outside the grammar, exceeds a size bound, or cannot be evaluated exactly."""


@dataclasses.dataclass(frozen=True)
class Grammar:
  """What one task's answers may contain.

  Attributes:
    symbols: names that stand for a value (e.g. {"x", "C", "pi"}).
    functions: names that must be applied to one parenthesised argument (e.g. {"sin", "exp"}).
    operators: the binary operators allowed, a subset of {"+", "-", "*", "/", "**"}; unary `+`
      and `-` are allowed whenever `+` or `-` is.
    decimals: whether numbers may have a fractional part (`0.5`).
  """
  symbols: frozenset = frozenset()
  functions: frozenset = frozenset()
  operators: frozenset = frozenset({"+", "-", "*", "/"})
  decimals: bool = False

  def __post_init__(self):
    for name in self.symbols | self.functions:
      if not _NAME_RE.fullmatch(name):
        raise ValueError(f"grammar name {name!r} is not 1-16 ASCII letters")
    if self.symbols & self.functions:
      raise ValueError(f"names both symbol and function: {sorted(self.symbols & self.functions)}")
    if not self.operators <= {"+", "-", "*", "/", "**"}:
      raise ValueError(f"unknown operators {sorted(self.operators)}")


def _describe(token: str) -> str:
  return repr(token) if token.isprintable() else f"U+{ord(token[0]):04X}"


def tokenize(text: str, grammar: Grammar) -> list[str]:
  """The tokens of `text` (whitespace dropped), each on the grammar's allow-list.

  Raises:
    ExprError: text not a str, too long, non-ASCII, or a character, name, operator or number
      outside the grammar or its bounds.
  """
  if not isinstance(text, str):
    raise ExprError(f"answer is not a string ({type(text).__name__})")
  if len(text) > MAX_CHARS:
    raise ExprError(f"answer too long ({len(text)} > {MAX_CHARS} chars)")
  tokens = []
  for match in _TOKEN_RE.finditer(text):
    kind, token = match.lastgroup, match.group()
    if kind == "space":
      continue
    if kind == "number":
      if "." in token and not grammar.decimals:
        raise ExprError("decimal numbers not allowed")
      if sum(c != "." for c in token) > MAX_DIGITS:
        raise ExprError(f"number with more than {MAX_DIGITS} digits not allowed")
    elif kind == "name":
      if token not in grammar.symbols and token not in grammar.functions:
        raise ExprError(f"name {token[:20]!r} not allowed")
    elif kind == "operator":
      if token not in grammar.operators:
        raise ExprError(f"operator {token!r} not allowed")
    elif kind == "other":  # incl. every non-ASCII character (fullwidth letters, digits, ...)
      raise ExprError(f"character {_describe(token)} not allowed")
    tokens.append(token)
    if len(tokens) > MAX_TOKENS:
      raise ExprError(f"more than {MAX_TOKENS} tokens")
  if not tokens:
    raise ExprError("empty expression")
  return tokens


class _Parser:
  """Recursive descent over a token list (see the module docstring for the precedence)."""

  def __init__(self, tokens: list[str], grammar: Grammar):
    self.tokens = tokens
    self.grammar = grammar
    self.pos = 0
    self.depth = 0

  def peek(self) -> str:
    return self.tokens[self.pos] if self.pos < len(self.tokens) else ""

  def take(self, expected: str = "") -> str:
    token = self.peek()
    if not token or (expected and token != expected):
      raise ExprError(f"expected {expected or 'more input'!r}, got {token or 'end'!r}")
    self.pos += 1
    return token

  def nested(self, parse: Callable[[], tuple]) -> tuple:
    self.depth += 1
    if self.depth > MAX_DEPTH:
      raise ExprError(f"nesting deeper than {MAX_DEPTH}")
    try:
      return parse()
    finally:
      self.depth -= 1

  def sum(self) -> tuple:
    node = self.product()
    while self.peek() in ("+", "-"):
      op = self.take()
      node = ("bin", op, node, self.product())
    return node

  def product(self) -> tuple:
    node = self.unary()
    while self.peek() in ("*", "/"):
      op = self.take()
      node = ("bin", op, node, self.unary())
    return node

  def unary(self) -> tuple:
    if self.peek() in ("+", "-"):
      op = self.take()
      return ("neg" if op == "-" else "pos", self.nested(self.unary))
    return self.power()

  def power(self) -> tuple:
    base = self.atom()
    if self.peek() == "**":
      self.take()
      return ("bin", "**", base, self.nested(self.unary))
    return base

  def atom(self) -> tuple:
    token = self.take()
    if token == "(":
      node = self.nested(self.sum)
      self.take(")")
      return node
    if token[0].isdigit():
      return ("num", token)
    if token in self.grammar.functions:
      self.take("(")
      argument = self.nested(self.sum)
      self.take(")")
      return ("call", token, argument)
    if token in self.grammar.symbols:
      return ("name", token)
    raise ExprError(f"unexpected {token!r}")


def parse(text: str, grammar: Grammar) -> tuple:
  """The expression tree of `text` (see the module docstring for its shape).

  Raises:
    ExprError: outside the grammar or its bounds, or not one complete expression.
  """
  parser = _Parser(tokenize(text, grammar), grammar)
  node = parser.sum()
  if parser.pos != len(parser.tokens):
    raise ExprError(f"unexpected {parser.peek()!r} after a complete expression")
  return node


def numbers(node: tuple) -> list[str]:
  """The number literals of a tree, left to right, as written (e.g. ["6", "98", "54"])."""
  kind = node[0]
  if kind == "num":
    return [node[1]]
  if kind == "name":
    return []
  return [n for child in node[1:] if isinstance(child, tuple) for n in numbers(child)]


def _check_power_size(base_bits: int, exponent: int) -> None:
  if abs(exponent) > MAX_EXPONENT:
    raise ExprError(f"exponent {exponent} beyond +-{MAX_EXPONENT}")
  if abs(exponent) * base_bits > MAX_POWER_BITS:
    raise ExprError(f"power with more than {MAX_POWER_BITS} bits")


def _fraction_pow(base: fractions.Fraction, exponent: fractions.Fraction) -> fractions.Fraction:
  if exponent.denominator != 1:
    raise ExprError("non-integer exponent has no exact rational value")
  _check_power_size(max(base.numerator.bit_length(), base.denominator.bit_length()),
                    exponent.numerator)
  if base == 0 and exponent < 0:
    raise ZeroDivisionError("0 to a negative power")
  return base ** exponent.numerator


_FRACTION_OPS: Mapping[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "**": _fraction_pow}


def to_fraction(node: tuple) -> fractions.Fraction:
  """The exact rational value of a tree without names or functions.

  Raises:
    ExprError: a name, a function or a non-integer or oversized exponent.
    ZeroDivisionError: division by zero.
  """
  kind = node[0]
  if kind == "num":
    return fractions.Fraction(node[1])
  if kind == "neg":
    return -to_fraction(node[1])
  if kind == "pos":
    return to_fraction(node[1])
  if kind == "bin":
    return _FRACTION_OPS[node[1]](to_fraction(node[2]), to_fraction(node[3]))
  raise ExprError(f"{node[1]!r} has no numeric value here")


def _sympy_pow(base: Any, exponent: Any) -> Any:
  """`base ** exponent` with sympy under the verifier's size bounds (`math_parser.checked_pow`)."""
  from rlscale.tasks import math_parser  # pylint: disable=g-import-not-at-top (imports sympy)
  try:
    return math_parser.checked_pow(base, exponent)
  except math_parser.ParseError as e:
    raise ExprError(str(e)) from None


def to_sympy(node: tuple, names: Mapping[str, Any]) -> Any:
  """The sympy expression of a tree, built by Python operators on sympy objects (so it equals
  what `parse_expr` would give for the same text: `3*x**2` is Integer(3)*x**Integer(2)).

  Args:
    node: tree from `parse`.
    names: value of each symbol and callable of each function the grammar allows, e.g.
      {"x": Symbol("x"), "sin": sympy.sin}.

  Raises:
    ExprError: a name missing from `names`, or an oversized exponent.
  """
  import sympy  # pylint: disable=g-import-not-at-top
  kind = node[0]
  if kind == "num":
    return sympy.Float(node[1]) if "." in node[1] else sympy.Integer(node[1])
  if kind in ("name", "call") and node[1] not in names:
    raise ExprError(f"name {node[1]!r} has no value")
  if kind == "name":
    return names[node[1]]
  if kind == "call":
    return names[node[1]](to_sympy(node[2], names))
  if kind == "neg":
    return -to_sympy(node[1], names)
  if kind == "pos":
    return to_sympy(node[1], names)
  left, right = to_sympy(node[2], names), to_sympy(node[3], names)
  if node[1] == "**":
    return _sympy_pow(left, right)
  return _FRACTION_OPS[node[1]](left, right)
