"""Vetting answers before a reasoning-gym generator's own `score_answer` sees them.

Some reasoning-gym scorers (countdown, puzzle24, ...) call sympy's `parse_expr`, which runs
Python `eval` on the answer. Native scoring therefore runs in the verifier's worker process
(time, memory and file-size limits) and only on answers that pass this vet, which rules out
every way to reach Python objects from an expression: no underscores (dunder access), no
attribute access (`.name`), no calls except to whitelisted math functions, no non-printable or
non-ASCII characters, no Python keywords that define or import code.
"""

from __future__ import annotations

import re
from typing import Optional

_CALL_RE = re.compile(r"([A-Za-z][A-Za-z0-9]*)\s*\(")
_ATTRIBUTE_RE = re.compile(r"\.\s*[A-Za-z]")
_WORD_RE = re.compile(r"[A-Za-z]+")
_ALLOWED_CALLS = frozenset({"sqrt", "sin", "cos", "tan", "log", "ln", "exp", "abs", "Abs"})
_FORBIDDEN_WORDS = frozenset({
    "lambda", "import", "exec", "eval", "open", "globals", "locals", "getattr", "setattr",
    "delattr", "compile", "vars", "input", "exit", "quit", "help", "breakpoint", "class",
    "def", "del", "yield", "await", "async", "global", "nonlocal", "with", "for", "while"})


def vet_native_answer(answer: str) -> Optional[str]:
  """Why `answer` may not reach a native scorer, or None when it may.

  Args:
    answer: extracted answer text (already bounded in length).
  """
  if not answer.isascii() or not all(c.isprintable() or c in "\n\t" for c in answer):
    return "non-printable or non-ASCII character (native scorer)"
  if "_" in answer or "`" in answer or "@" in answer or ";" in answer:
    return "character not allowed for the native scorer (_ ` @ ;)"
  if _ATTRIBUTE_RE.search(answer):
    return "attribute access not allowed (native scorer)"
  for m in _CALL_RE.finditer(answer):
    if m.group(1) not in _ALLOWED_CALLS:
      return f"call to {m.group(1)!r} not allowed (native scorer)"
  for word in _WORD_RE.findall(answer):
    if word in _FORBIDDEN_WORDS:
      return f"keyword {word!r} not allowed (native scorer)"
  return None
