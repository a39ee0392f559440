"""Answer extraction from model output: `\\boxed{}`, `<answer>` tags, GSM8K `####`, last number,
or the whole response.

Extractors run in the order the config sets (`task.extract_order`); the first that finds an
answer wins. All of them are linear-time scans (balanced-brace matching by a counter, bounded
regexes), so a 64 kB response costs well under a millisecond.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Optional, Sequence

# "full" (the whole response is the answer) is opt-in: it suits models that answer bare text.
EXTRACTORS = ("boxed", "answer_tag", "gsm8k", "last_number", "full")
DEFAULT_ORDER = ("boxed", "answer_tag", "gsm8k", "last_number")

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_TOKEN_RE = re.compile(r"[^\s${}\\]+")
_ANSWER_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_GSM8K_RE = re.compile(r"^[ \t]*####[ \t]*(.*?)[ \t]*$", re.MULTILINE)
# A number not glued to a preceding letter, digit or dot: signed, thousands commas, decimals,
# an optional "/int" fraction or trailing "%"; or a LaTeX fraction of integers.
_LAST_NUMBER_RE = re.compile(
    r"-?\\[dt]?frac\{-?\d+\}\{\d+\}"
    r"|(?<![A-Za-z0-9.])-?(?:\d{1,3}(?:,\d{3})+(?![\d])|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?![\d.]))?%?",
    re.ASCII)


class ExtractionError(ValueError):
  """The response has answer markup that is broken (e.g. an unclosed `\\boxed{`)."""


@dataclasses.dataclass(frozen=True)
class Extracted:
  """The answer found: `text` (stripped) and the extractor `method` that found it."""
  text: str
  method: str


def check_order(order: Sequence[str] | str) -> tuple[str, ...]:
  """Validates `task.extract_order` (a sequence or comma-separated string of extractor names).

  Raises:
    ValueError: empty, repeated or unknown names (the message lists the allowed ones).
  """
  names = tuple(s.strip() for s in order.split(",")) if isinstance(order, str) else tuple(order)
  if not names or len(set(names)) != len(names) or any(n not in EXTRACTORS for n in names):
    raise ValueError(f"task.extract_order={order!r}: use distinct names from {EXTRACTORS}")
  return names


def _braced(text: str, start: int) -> Optional[int]:
  """Index just past the `}` that closes the `{` at `start`, or None when it never closes."""
  depth = 0
  for i in range(start, len(text)):
    c = text[i]
    if c == "{" and text[i - 1:i] != "\\":
      depth += 1
    elif c == "}" and text[i - 1:i] != "\\":
      depth -= 1
      if depth == 0:
        return i + 1
  return None


def last_boxed(text: str) -> Optional[str]:
  """Content of the last complete `\\boxed{...}` / `\\fbox{...}` (nested braces allowed).

  A box inside a box is unwrapped (`\\boxed{\\boxed{5}}` -> "5"); `\\boxed 5` (LaTeX's
  single-token form) gives "5".

  Raises:
    ExtractionError: the text has a box but none is complete (unbalanced braces).
  """
  found, seen = None, False
  pos = 0
  while True:
    m = _BOX_RE.search(text, pos)
    if not m:
      break
    seen = True
    j = m.end()
    while j < len(text) and text[j] == " ":
      j += 1
    if j < len(text) and text[j] == "{":
      end = _braced(text, j)
      if end is None:
        break  # Nothing after an unclosed brace can be a complete later box.
      found, pos = text[j + 1:end - 1], end
    else:
      token = _TOKEN_RE.match(text, j)
      if token:
        found = token.group(0)
      pos = m.end()
  if found is None:
    if seen:
      raise ExtractionError("incomplete \\boxed{...} (unbalanced braces)")
    return None
  inner = found.strip()
  box = _BOX_RE.match(inner)
  if box:  # The whole content is itself a box: unwrap it.
    rest = inner[box.end():].lstrip(" ")
    if rest.startswith("{") and _braced(rest, 0) == len(rest):
      return last_boxed(inner)
  return inner


def answer_tag(text: str) -> Optional[str]:
  """Content of the last `<answer>...</answer>` block (a box inside it is unwrapped)."""
  matches = _ANSWER_TAG_RE.findall(text)
  if not matches:
    return None
  inner = matches[-1].strip()
  boxed = last_boxed(inner) if _BOX_RE.search(inner) else None
  return boxed if boxed is not None else inner


def gsm8k(text: str) -> Optional[str]:
  """Text after the last `#### ` line marker (GSM8K's final-answer line)."""
  matches = _GSM8K_RE.findall(text)
  return matches[-1] if matches and matches[-1] else None


def last_number(text: str) -> Optional[str]:
  """The last number in the text: "-1,234.5", "3/4", "50%", "\\frac{1}{2}" (ASCII digits only)."""
  last = None
  for last in _LAST_NUMBER_RE.finditer(text):
    pass
  return last.group(0) if last else None


def full(text: str) -> Optional[str]:
  """The whole response, stripped (for models that answer with the bare answer)."""
  return text.strip() or None


_FUNCTIONS: dict[str, Callable[[str], Optional[str]]] = {
    "boxed": last_boxed, "answer_tag": answer_tag, "gsm8k": gsm8k, "last_number": last_number,
    "full": full}


def extract_answer(text: str, order: Sequence[str] = DEFAULT_ORDER) -> Optional[Extracted]:
  """Runs the extractors in `order`; returns the first answer found or None.

  Args:
    text: model response (already bounded in size by the caller).
    order: extractor names from EXTRACTORS (validated by `check_order`).

  Raises:
    ExtractionError: broken markup (an unclosed `\\boxed{`), reported as reward 0 by the verifier.
  """
  for name in order:
    found = _FUNCTIONS[name](text)
    if found is not None and found.strip():
      return Extracted(found.strip(), name)
  return None


def reference_answer(reference: str) -> str:
  """The final answer inside a reference: boxed content, the `####` line, or the whole text."""
  try:
    boxed = last_boxed(reference)
  except ExtractionError:
    boxed = None
  if boxed is not None:
    return boxed.strip()
  marked = gsm8k(reference)
  return (marked if marked is not None else reference).strip()
