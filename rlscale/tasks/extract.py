"""Answer extraction from model output: `\\boxed{}`, `<answer>` tags, GSM8K `####`, last number,
or the whole response.

Extractors run in the order the config sets (`task.extract_order`); the first that finds an
answer wins. All of them are linear-time in the response length, with no recursion, because the
verifier's time limit covers only the sympy check, not extraction: braces are matched once with a
stack, nested boxes are unwrapped by moving two indices, tags are found with `str.find`, and no
regex has two adjacent repeats that can backtrack into each other. A hostile 64 kB response
(6000 nested boxes, 8000 unclosed `<answer>` tags, a 64 kB line of spaces) costs milliseconds.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import re
from typing import Callable, Optional, Sequence

from rlscale.tasks import units

# "full" (the whole response is the answer) is opt-in: it suits models that answer bare text.
EXTRACTORS = ("boxed", "answer_tag", "gsm8k", "last_number", "full")
DEFAULT_ORDER = ("boxed", "answer_tag", "gsm8k", "last_number")

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_TOKEN_RE = re.compile(r"[^\s${}\\]+")
_SPACES_RE = re.compile(r" *")
# A brace that is not escaped (`\{` and `\}` are literal braces, not grouping).
_BRACE_RE = re.compile(r"(?<!\\)[{}]")
_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"
# The rest of the line is taken greedily and its blanks stripped in Python: a lazy group followed
# by `[ \t]*$` would retry the blank run at every position (quadratic on a long blank line).
_GSM8K_RE = re.compile(r"^[ \t]*####(.*)$", re.MULTILINE)
# A number not glued to a preceding letter, digit or dot: signed, thousands commas, decimals,
# scientific notation read as one number (mantissa "e"/"E" signed exponent, or LaTeX
# "\times 10^{k}", "\cdot 10^k" or "\u00d7 10^k" after the mantissa), an optional "/int" fraction,
# a trailing "%", "\%" or percent word; or a LaTeX fraction of integers.
_LAST_NUMBER_RE = re.compile(
    r"-?\\[dtc]?frac\{-?\d+\}\{\d+\}"
    # Digit groups: 1,234  1 234  14{,}916  32,\! 349  1\,000 (LaTeX separators, one number).
    r"|(?<![A-Za-z0-9.])-?(?:(?:[1-9]\d{0,2}(?:(?:(?:,|\{,\}|,\\! ?|\\,)\d{3})+"
    r"| \d{3}(?: \d{3})*)(?![\d])|\d+)"
    r"(?:\.\d+)?|\.\d+)"
    # One look at the next character skips the optional parts below for most numbers.
    r"(?:(?=[\seE/\\%p\u00d7])"
    r"(?:[eE][+-]?\d+(?![A-Za-z\d])"
    r"|\s*(?:\\times|\\cdot|\u00d7)\s*10\s*\^\s*(?:\{\s*[+-]?\d+\s*\}|[+-]?\d+))?"
    r"(?:\s*/\s*\d+(?!\d|\.\d))?"
    r"(?:\\?%|\s?(?:percentage|percent|per cent|pct)(?![A-Za-z]))?)?",
    re.ASCII)


_NUMBERS_CHECKED = 64
# Minerva's format ("Final Answer: The final answer is $28\%$. I hope it is correct."), read in
# references without a box or "####".
_FINAL_ANSWER_RE = re.compile(r"[Tt]he final answer is:? ?(?:\$([^$]{1,200})\$|([^\s$]{1,200}))")
_MATH_OPEN_RE = re.compile(r"\$\$|(?<!\\)\$|\\\(|\\\[")
_MATH_CLOSE_RE = {"$$": re.compile(r"\$\$"), "$": re.compile(r"(?<!\\)\$"),
                  "\\(": re.compile(r"\\\)"), "\\[": re.compile(r"\\\]")}
# Characters that make a number touching them an operand of a larger expression.
_OPERAND_BEFORE = frozenset("+-*/^_([{|\\\u00d7\u00f7")
_OPERAND_AFTER = frozenset("+-*/^_)]}|=!\u00d7\u00f7")
_LOOK_AROUND = 24
# An equation in prose ("so 3 + 4 = 7"): its left side is part of the final expression, so a
# false link ("4 + 4 = 7") scores 0 like any false chain.
_CHAIN_CHARS = frozenset("0123456789.+-*/^()= \u00d7\u00f7")
_CHAIN_LOOK_BACK = 200
# A command right before the number ("\\sqrt 4") takes it as an argument; after it, text and
# spacing commands ("5\\text{ cm}", "5\\,") are prose, any other command is an operator.
_COMMAND_END_RE = re.compile(r"\\[A-Za-z]+$")
_PROSE_COMMAND_RE = re.compile(
    r"\\(?:text|mathrm|mbox|textrm|textbf|textnormal|operatorname|quad|qquad)(?![A-Za-z])"
    r"|\\[,;!% ]")


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


def _closing_braces(text: str) -> dict[int, int]:
  """Maps the index of every unescaped `{` that is closed to the index of its `}`.

  One left-to-right pass with a stack of open positions; an unmatched `}` is ignored and an
  unclosed `{` gets no entry. O(len(text)) time, no recursion.
  """
  closing: dict[int, int] = {}
  opened: list[int] = []
  for m in _BRACE_RE.finditer(text):
    if m.group(0) == "{":
      opened.append(m.start())
    elif opened:
      closing[opened.pop()] = m.start()
  return closing


def _strip_span(text: str, start: int, end: int) -> tuple[int, int]:
  """`text[start:end].strip()` as indices, so repeated stripping never copies the text."""
  while start < end and text[start].isspace():
    start += 1
  while end > start and text[end - 1].isspace():
    end -= 1
  return start, end


def _unwrap_boxes(text: str, start: int, end: int, closing: dict[int, int]) -> str:
  """Strips `text[start:end]` and, while all of it is one `\\boxed{...}`, takes its content.

  Iterative on indices (each level moves `start` up and `end` down), so N nested boxes cost
  O(len(text)) in total rather than O(N * len(text)) and cannot hit Python's recursion limit.
  """
  while True:
    start, end = _strip_span(text, start, end)
    box = _BOX_RE.match(text, start, end)
    if not box:
      break
    brace = _SPACES_RE.match(text, box.end(), end).end()
    if brace < end and text[brace] == "{" and closing.get(brace) == end - 1:
      start, end = brace + 1, end - 1
    else:
      break
  return text[start:end]


def last_boxed(text: str) -> Optional[str]:
  """Content of the last complete `\\boxed{...}` / `\\fbox{...}` (nested braces allowed).

  A box that is the whole content of a box is unwrapped, however deep (`\\boxed{\\boxed{5}}`
  -> "5": the innermost answer, also for thousands of levels); `\\boxed 5` (LaTeX's single-token
  form) gives "5". Linear time in len(text).

  Raises:
    ExtractionError: the text has a box but none is complete (unbalanced braces).
  """
  span, seen, closing = None, False, None
  pos = 0
  while True:
    m = _BOX_RE.search(text, pos)
    if not m:
      break
    seen = True
    j = _SPACES_RE.match(text, m.end()).end()
    if j < len(text) and text[j] == "{":
      if closing is None:  # Computed once, only for text that has a braced box.
        closing = _closing_braces(text)
      end = closing.get(j)
      if end is None:
        break  # Nothing after an unclosed brace can be a complete later box.
      span, pos = (j + 1, end), end + 1
    else:
      token = _TOKEN_RE.match(text, j)
      if token:
        span = token.span()
      pos = m.end()
  if span is None:
    if seen:
      raise ExtractionError("incomplete \\boxed{...} (unbalanced braces)")
    return None
  # A token has no backslash, so it never starts a box: `closing` is only read for braced spans.
  return _unwrap_boxes(text, span[0], span[1], closing or {})


def all_boxed(text: str) -> list[str]:
  """Contents of every complete top-level `\\boxed{...}` / `\\fbox{...}`, left to right.

  A box inside another box is part of that box's content (and unwrapped when it is all of it,
  as in `last_boxed`); an unclosed box ends the list. Linear time in len(text).
  """
  found, pos, closing = [], 0, None
  while True:
    m = _BOX_RE.search(text, pos)
    if not m:
      return found
    j = _SPACES_RE.match(text, m.end()).end()
    if j < len(text) and text[j] == "{":
      closing = _closing_braces(text) if closing is None else closing
      end = closing.get(j)
      if end is None:
        return found
      found.append(_unwrap_boxes(text, j + 1, end, closing))
      pos = end + 1
    else:
      token = _TOKEN_RE.match(text, j)
      if token:
        found.append(token.group(0))
      pos = m.end()


def as_set(answers: Sequence[str]) -> str:
  """Several answers (the boxes of a reference or a response) as the text of one set."""
  return "\\{" + ", ".join(answers) + "\\}"


def has_several_items(answer: str) -> bool:
  """Whether a normalised answer is a list or set of several items: a top-level "," or ";"
  (outside brackets and braces), or a written set (`\\{...\\}`, `{...}`) with a comma."""
  depth = 0
  stripped = answer.strip()
  if stripped.startswith(("\\{", "{")) and stripped.endswith("}") and "," in stripped:
    return True
  for c in stripped:
    if c in "([{":
      depth += 1
    elif c in ")]}":
      depth -= 1
    elif c in ",;" and depth == 0:
      return True
  return False


def answer_tag(text: str) -> Optional[str]:
  """Content of the last `<answer>...</answer>` block (a box inside it is unwrapped).

  Blocks are read left to right without overlap (`<answer>a<answer>b</answer>` -> "a<answer>b"),
  as a lazy regex would, but with `str.find`: once an opening tag has no closing tag after it,
  no later one can, so the scan stops instead of retrying from every later `<answer>`.
  """
  block, pos = None, 0
  while True:
    opened = text.find(_ANSWER_OPEN, pos)
    if opened < 0:
      break
    closed = text.find(_ANSWER_CLOSE, opened + len(_ANSWER_OPEN))
    if closed < 0:
      break
    block, pos = (opened + len(_ANSWER_OPEN), closed), closed + len(_ANSWER_CLOSE)
  if block is None:
    return None
  inner = text[block[0]:block[1]].strip()
  boxed = last_boxed(inner) if _BOX_RE.search(inner) else None
  return boxed if boxed is not None else inner


def gsm8k(text: str) -> Optional[str]:
  """Text after the last `#### ` line marker (GSM8K's final-answer line), blanks stripped."""
  last = None
  for last in _GSM8K_RE.finditer(text):
    pass
  answer = last.group(1).strip(" \t") if last else ""
  return answer or None


def math_spans(text: str) -> list[tuple[int, int]]:
  """(start, end) of the content of every closed math span: `$...$`, `$$...$$`, `\\(...\\)`,
  `\\[...\\]`, left to right without overlap (an escaped `\\$` is a dollar sign, not a delimiter).

  Linear time: each opening delimiter is paired with the next closing one found by one forward
  search; once a kind of delimiter has no closing one left, later openings of that kind are
  skipped without searching again.
  """
  spans, pos, exhausted = [], 0, set()
  while True:
    m = _MATH_OPEN_RE.search(text, pos)
    if not m:
      return spans
    opening = m.group(0)
    if opening in exhausted:
      pos = m.end()
      continue
    closing = _MATH_CLOSE_RE[opening].search(text, m.end())
    if closing is None:
      exhausted.add(opening)
      pos = m.end()
      continue
    spans.append((m.end(), closing.start()))
    pos = closing.end()


def _part_of_expression(text: str, start: int, end: int) -> bool:
  """Whether the number `text[start:end]` (in prose) is an operand of a larger expression.

  It is when an operator, bracket, backslash command or letter touches it (blanks skipped):
  "3-5", "x^2", "(12, 102)", "2^{10}", "\\sqrt 4". A relation ("=", "<", ":") before it and
  sentence punctuation after it do not count: in "3 - 5 = -2" the number -2 is a whole side.
  """
  head = text[max(0, start - _LOOK_AROUND):start].rstrip(" \t")
  tail = text[end:end + _LOOK_AROUND].lstrip(" \t")
  command = _COMMAND_END_RE.search(head)
  if head[-1:] in _OPERAND_BEFORE or command and command.group(0) not in ("\\quad", "\\qquad"):
    return True
  if tail[:1] == "\\":
    return not _PROSE_COMMAND_RE.match(tail)
  return tail[:1] in _OPERAND_AFTER or text[end:end + 1].isalpha()


def _prose_equation(text: str, start: int) -> str:
  """The left side of an equation in prose that ends at `text[start]` ("3 + 4 = " before 7),
  or "": digits, operators, brackets, "=" and single-letter variables, read back at most
  `_CHAIN_LOOK_BACK` characters, when "=" stands right before the number."""
  head_end = start
  while head_end > 0 and text[head_end - 1] in " \t":
    head_end -= 1
  if head_end == 0 or text[head_end - 1] != "=":
    return ""
  i, low = head_end, max(0, start - _CHAIN_LOOK_BACK)
  while i > low:
    c = text[i - 1]
    single_letter = (c.isascii() and c.isalpha() and not text[i - 2:i - 1].isalpha() and
                     not text[i:i + 1].isalpha())
    if c not in _CHAIN_CHARS and not single_letter:
      break
    i -= 1
  left = text[i:start].lstrip(" .=+*/^)")
  return left if left.rstrip(" =") else ""


def last_number(text: str) -> Optional[str]:
  """The final answer written as a number: the whole last math expression, or the last number.

  "-1,234.5", "3/4", "50%", "28 percent", "1e-1", "3 \\times 10^{8}", "\\frac{1}{2}" (ASCII
  digits only). The exponent of a unit is not a number of its own: "The area is 5 cm^2." gives
  "5" (among the last `_NUMBERS_CHECKED` numbers). A number is never taken out of a larger
  expression: when the last number lies inside a math span (`$...$`, `\\(...\\)`, ...) the
  whole span is the answer ("$\\frac{1+\\sqrt{5}}{2}$" gives the fraction, not 2), as is a
  math span after the last number ("... so $x \\approx 11$", "$\\frac13$", "$E$"); in prose, a
  number that is an operand ("3-5", "x^2", "(12, 102)") gives no answer at all, and a number
  after "=" comes with the equation it ends ("so 3 + 4 = 7" gives "3 + 4 = 7", whose every link
  must hold).
  """
  # The regex scan runs in C; only the last `_NUMBERS_CHECKED` numbers are checked for being
  # a unit's exponent (almost always just the last one), so the cost stays that of one scan.
  spans = math_spans(text) if "$" in text or "\\" in text else []
  final = text[spans[-1][0]:spans[-1][1]].strip() or None if spans else None
  for m in reversed(collections.deque(_LAST_NUMBER_RE.finditer(text), _NUMBERS_CHECKED)):
    if units.is_unit_exponent(text, m.start()):
      continue
    i = bisect.bisect_right(spans, (m.start(), len(text))) - 1
    if i >= 0 and spans[i][0] <= m.start() and m.end() <= spans[i][1]:
      return text[spans[i][0]:spans[i][1]].strip() or None
    if spans and spans[-1][0] > m.end():
      return final  # a math span after the last number is the final expression
    if _part_of_expression(text, m.start(), m.end()):
      return None
    return _prose_equation(text, m.start()) + m.group(0)
  return final


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
  """The final answer inside a reference: boxed content, the `####` line, or the whole text.

  A reference with several boxes means all of them: their contents as one set
  (`\\boxed{1} and \\boxed{-2}` is {1, -2}), never just the last box.
  """
  boxes = all_boxed(reference)
  if len(boxes) >= 2:
    return as_set(b.strip() for b in boxes)
  try:
    boxed = last_boxed(reference)
  except ExtractionError:
    boxed = None
  if boxed is not None:
    return boxed.strip()
  marked = gsm8k(reference)
  if marked is not None:
    return marked.strip()
  final = None
  for final in _FINAL_ANSWER_RE.finditer(reference):
    pass
  return (final.group(1) or final.group(2) if final else reference).strip()
