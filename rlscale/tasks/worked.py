"""Worked solutions for SFT targets: the running sums of a chain of additions and subtractions.

`task.target_template = "{worked}"` makes the warm start write out its reasoning, e.g. for the
prompt `7 - 3 + 2 =` the target ` 4 + 2 = 6`: each step folds the first two terms, so a chain of
n terms takes n - 1 steps and the response grows with n (about 60 characters for 6 one-digit
terms). The final number is the answer, so the `last_number` extractor scores it.
"""

from __future__ import annotations

import re

_TERM = re.compile(r"\s*([+-])\s*(\d+)")


def parse_chain(expression: str) -> tuple[int, list[tuple[str, int]]]:
  """"7 - 3 + 2" -> (7, [("-", 3), ("+", 2)]). Raises ValueError for anything that is not
  integers joined by + and -."""
  head = re.match(r"\s*(-?\d+)", expression)
  if head is None:
    raise ValueError(f"worked solution: {expression!r} does not start with an integer")
  rest = expression[head.end():]
  terms = [(m.group(1), int(m.group(2))) for m in _TERM.finditer(rest)]
  if "".join(m.group(0) for m in _TERM.finditer(rest)).strip() != rest.strip():
    raise ValueError(f"worked solution: {expression!r} is not integers joined by + and -")
  return int(head.group(1)), terms


def running_sums(expression: str) -> str:
  """The worked solution of a +/- chain without its first line: "7 - 3 + 2" -> "4 + 2 = 6".

  Each step replaces the first two terms by their value; the last step is the answer. A single
  term gives itself. Raises ValueError for a malformed chain (see `parse_chain`)."""
  value, terms = parse_chain(expression)
  steps = []
  for i, (op, number) in enumerate(terms):
    value = value + number if op == "+" else value - number
    steps.append(" ".join([str(value)] + [f"{o} {n}" for o, n in terms[i + 1:]]))
  return " = ".join(steps) if steps else str(value)
