"""Fast path for plain numbers: exact rational arithmetic with `fractions.Fraction`, no sympy.

Most rewards in the main job compare an integer with an integer ("17" vs "17"), so the verifier
first tries to read both sides as a plain number: a signed integer or decimal (thousands commas
or spaces allowed: "1,000", "1 000"), optionally with a trailing "%", a fraction "3/4", or a LaTeX
fraction "\\frac{3}{4}" / "\\frac34". Only when either side is something else does the verifier
pay for sympy in a worker process. Inputs longer than `MAX_CHARS` are left to the slow path, so
no huge integer is ever built here.
"""

from __future__ import annotations

import dataclasses
import fractions
import re
from typing import Optional

MAX_CHARS = 80
# Grouping needs a non-zero leading group: "0,111" is not 111 (nor a plain number).
_INT = r"(?:[1-9]\d{0,2}(?:,\d{3})+(?![\d,])|[1-9]\d{0,2}(?: \d{3})+(?!\d)|\d+)"
# re.ASCII: only 0-9 are digits ("\uff11\uff17" and Arabic-Indic digits are not numbers here).
_DECIMAL_RE = re.compile(rf"([+-]?)\s*({_INT}(?:\.\d*)?|\.\d+)\s*(%?)", re.ASCII)
_SLASH_RE = re.compile(r"([+-]?)\s*(\d+)\s*/\s*(\d+)", re.ASCII)
_LATEX_FRAC_RE = re.compile(
    r"([+-]?)\s*\\frac\s*(?:\{\s*([+-]?)\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))",
    re.ASCII)


@dataclasses.dataclass(frozen=True)
class PlainNumber:
  """An exactly-read number.

  Attributes:
    value: exact rational value (a decimal like 0.1 is exactly 1/10).
    decimal: True when written with a decimal point (relative tolerance applies).
    percent: True when written with a trailing "%".
  """
  value: fractions.Fraction
  decimal: bool = False
  percent: bool = False


def parse_plain_number(text: str) -> Optional[PlainNumber]:
  """Reads a normalised answer as a plain number, or returns None (not an error).

  Args:
    text: output of `normalize.normalize_answer`.

  Returns:
    PlainNumber, or None when the text is anything else (expressions, words, zero denominators,
    more than MAX_CHARS characters).
  """
  if len(text) > MAX_CHARS:
    return None
  m = _DECIMAL_RE.fullmatch(text)
  if m:
    sign, digits, pct = m.groups()
    value = fractions.Fraction(digits.replace(",", "").replace(" ", ""))
    return PlainNumber(-value if sign == "-" else value, "." in digits, pct == "%")
  m = _SLASH_RE.fullmatch(text)
  if m:
    sign, num, den = m.groups()
    return _fraction(sign, int(num), int(den))
  m = _LATEX_FRAC_RE.fullmatch(text)
  if m:
    sign, inner_sign, num_braced, num_digit, den_braced, den_digit = m.groups()
    negative = (sign == "-") != (inner_sign == "-")
    return _fraction("-" if negative else "", int(num_braced or num_digit),
                     int(den_braced or den_digit))
  return None


_DECIMAL_COMMA_RE = re.compile(r"([+-]?)(\d+),(\d+)", re.ASCII)
_GROUPED_RE = re.compile(r"[+-]?[1-9]\d{0,2}(?:,\d{3})+", re.ASCII)


def parse_decimal_comma(text: str) -> Optional[PlainNumber]:
  """"1000,99" or "0,111" read with a decimal comma, or None (also for "1,000": grouping).

  Only the verifier's fallback when the other side is written with a decimal point: a comma
  otherwise separates a list or groups thousands.
  """
  m = _DECIMAL_COMMA_RE.fullmatch(text) if len(text) <= MAX_CHARS else None
  if m is None or _GROUPED_RE.fullmatch(text):
    return None
  value = fractions.Fraction(f"{m.group(2)}.{m.group(3)}")
  return PlainNumber(-value if m.group(1) == "-" else value, decimal=True)


def _fraction(sign: str, num: int, den: int) -> Optional[PlainNumber]:
  if den == 0:
    return None
  value = fractions.Fraction(num, den)
  return PlainNumber(-value if sign == "-" else value)


def percent_readings(answer_percent: bool, reference_percent: bool,
                     percent: bool) -> tuple[tuple[bool, bool], ...]:
  """Which sides' "x%" to read as x/100: (divide the answer, divide the reference) per reading.

  The rule follows Math-Verify 0.9.0 (`math_verify.grader.sympy_numeric_eq`: `45\\%` equals
  `0.45`, and `9\\%` equals `9`): a trailing % may always be dropped, so the first reading
  divides neither side. A reference written with % states a percentage, so it may also mean
  x/100 (reference `28%` accepts `28`, `28%` and `0.28`). An answer's % is untrusted text: it
  may mean x/100 only with `percent` (task.percent; Math-Verify always reads it so), e.g. answer
  `50%` against reference `0.5`. When both sides carry a % they compare as written (dividing one
  only would make `0.28%` equal `28%`). A plain reference `28` never accepts `0.28`
  (Math-Verify: 0 too).

  Args:
    answer_percent, reference_percent: whether each side was written with a %.
    percent: the config's `task.percent`.

  Returns:
    One or two (divide answer, divide reference) pairs, the as-written reading first.
  """
  readings = [(False, False)]
  if reference_percent and not answer_percent:
    readings.append((False, True))
  if answer_percent and not reference_percent and percent:
    readings.append((True, False))
  return tuple(readings)


def close(a: fractions.Fraction, b: fractions.Fraction, rel_tol: fractions.Fraction) -> bool:
  """|a - b| <= rel_tol * max(|a|, |b|), in exact arithmetic (rel_tol = 0 means a == b)."""
  return abs(a - b) <= rel_tol * max(abs(a), abs(b))


def plain_numbers_equal(answer: PlainNumber, reference: PlainNumber, *, rel_tol: float,
                        percent: bool) -> bool:
  """Whether two plain numbers are the same answer.

  Integers and fractions compare exactly; when either side is written as a decimal the relative
  tolerance `rel_tol` applies (|a - b| <= rel_tol * max(|a|, |b|)). Percentages follow
  `percent_readings`: reference "28%" matches 28, 28% and 0.28; answer "50%" matches 50, and
  0.5 only with `percent`.
  """
  tol = fractions.Fraction(repr(float(rel_tol))) if (answer.decimal or reference.decimal) else 0
  return any(close(answer.value / 100 if divide_a else answer.value,
                   reference.value / 100 if divide_r else reference.value, tol)
             for divide_a, divide_r in percent_readings(answer.percent, reference.percent,
                                                        percent))


def format_number(x: PlainNumber) -> str:
  """Short text of a plain number for reasons: "17", "-1/2", "0.5" stays "1/2"."""
  v = x.value
  return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"
