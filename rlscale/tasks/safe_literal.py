"""A bounded parser for the Python list literals some reasoning-gym answers are written in
(`[1, 2, 3]`, `[['Q', '_'], ['_', 'Q']]`, `('ab', 'c')`), in place of `eval` / `ast.literal_eval`.

Model text is untrusted and never reaches Python's own parser (`ast.literal_eval` compiles its
input). Grammar, over ASCII text of at most `MAX_CHARS` characters:

  value   := number | string | '[' items ']' | '(' items ')'
  items   := (value (',' value)* ','?)?
  number  := '-'? digits ('.' digits)?        (at most `MAX_DIGITS` digits)
  string  := a single- or double-quoted string whose only escapes are \\\\ \\' \\" \\n \\t

Lists read as Python lists, parenthesised sequences as tuples (`(x)` without a comma is x, as in
Python). Nesting deeper than `MAX_DEPTH` brackets is refused, counted by the parser itself, so a
bracket inside a string neither counts nor hides one.
"""

from __future__ import annotations

import re
from typing import Any

MAX_CHARS = 10_000
MAX_DEPTH = 4
MAX_DIGITS = 30

_TOKEN = re.compile(r"""\s*(?:
    (?P<number>-?[0-9]+(?:\.[0-9]+)?)
  | (?P<string>'(?:[^'\\\n]|\\[\\'"nt])*'|"(?:[^"\\\n]|\\[\\'"nt])*")
  | (?P<punct>[\[\](),])
)""", re.VERBOSE)
_ESCAPES = {"\\\\": "\\", "\\'": "'", '\\"': '"', "\\n": "\n", "\\t": "\t"}
_CLOSING = {"[": "]", "(": ")"}


class LiteralError(ValueError):
  """The text is outside the grammar or beyond a bound."""


def _tokens(text: str) -> list[tuple[str, str]]:
  """(kind, text) pairs: kind "number", "string" or "punct"."""
  tokens, pos = [], 0
  while pos < len(text):
    if text[pos:].strip() == "":
      break
    match = _TOKEN.match(text, pos)
    if match is None:
      raise LiteralError(f"unexpected character {text[pos:].lstrip()[:1]!r}")
    kind = match.lastgroup
    tokens.append((kind, match.group(kind)))
    pos = match.end()
  return tokens


def _atom(kind: str, token: str) -> Any:
  if kind == "number":
    if sum(c.isdigit() for c in token) > MAX_DIGITS:
      raise LiteralError(f"number longer than {MAX_DIGITS} digits")
    return float(token) if "." in token else int(token)
  return re.sub(r"\\.", lambda m: _ESCAPES[m.group(0)], token[1:-1])


def parse_literal(text: str) -> Any:
  """The value of `text` under the module's grammar: int, float, str, list or tuple.

  Raises:
    LiteralError: non-ASCII text, longer than MAX_CHARS, nested deeper than MAX_DEPTH, a
      number of more than MAX_DIGITS digits, or anything outside the grammar (names, calls,
      operators, other escapes).
  """
  if len(text) > MAX_CHARS:
    raise LiteralError(f"answer too long ({len(text)} > {MAX_CHARS} chars)")
  if not text.isascii():
    raise LiteralError("non-ASCII character")
  tokens = _tokens(text)
  pos = 0

  def value(depth: int) -> Any:
    nonlocal pos
    if pos >= len(tokens):
      raise LiteralError("unexpected end of the answer")
    kind, token = tokens[pos]
    pos += 1
    if kind != "punct":
      return _atom(kind, token)
    if token not in _CLOSING:
      raise LiteralError(f"unexpected {token!r}")
    if depth >= MAX_DEPTH:
      raise LiteralError(f"literal nested deeper than {MAX_DEPTH}")
    items, comma = [], False
    while pos < len(tokens) and tokens[pos][1] != _CLOSING[token]:
      items.append(value(depth + 1))
      comma = pos < len(tokens) and tokens[pos][1] == ","
      if comma:
        pos += 1
      elif pos < len(tokens) and tokens[pos][1] != _CLOSING[token]:
        raise LiteralError(f"expected ',' or {_CLOSING[token]!r}")
    if pos >= len(tokens):
      raise LiteralError(f"missing {_CLOSING[token]!r}")
    pos += 1
    if token == "[":
      return items
    return items[0] if len(items) == 1 and not comma else tuple(items)

  result = value(0)
  if pos != len(tokens):
    raise LiteralError(f"unexpected {tokens[pos][1]!r} after the value")
  return result
