r"""Units after a value in an answer: recognised, then dropped together with their exponent.

"5 \text{ cm}^2", "5\mathrm{cm^2}", "5\mbox{ m/s}" and "5 square meters" all mean the number 5:
the unit is not part of the value the verifier compares, and the exponent that belongs to it must
go with it (leaving "^2" behind would turn 5 into 25). Every unit wrapper is treated alike:

  * text wrappers (`\text`, `\textrm`, `\textbf`, `\mbox`, `\textnormal`, `\textup`) hold a unit
    or a comment; either way they are dropped, with an exponent after the closing brace;
  * math wrappers (`\mathrm`, `\operatorname`) right after a value are dropped with their
    exponent when they hold a unit (`5\mathrm{cm}^2`); other content stays as maths
    (`\mathrm{e}^{x}`, `\operatorname{min}(a, b)`);
  * bare unit words right after a number ("18 meters", "5 cm^2", "60 km/h") are dropped with
    their exponent. Single letters ("5 m") are left alone when bare, since "m" may be a
    variable; inside a wrapper they are units.
A percent word ("percent", "per cent", "percentage", "pct", and `\%` or "%" inside a wrapper)
becomes "%", so it follows `task.percent` exactly as "%" does. Scale words ("hundred",
"thousand", "million", "billion", "trillion") are never dropped: after a value, bare or in a
wrapper, they become a factor (`5\text{ thousand}` -> `5 \cdot 10^{3}`).

All patterns are linear: alternations of fixed words joined by one-character separators, run on
text whose whitespace is already collapsed, with no two adjacent repeats that can trade characters.
"""

from __future__ import annotations

import re

# Words that may be written with a plural "s" (or "es").
_PLURAL_STEMS = (
    "meter", "metre", "centimeter", "centimetre", "millimeter", "millimetre", "kilometer",
    "kilometre", "inch", "yard", "mile", "gram", "kilogram", "milligram", "pound", "ounce", "ton",
    "tonne", "liter", "litre", "milliliter", "millilitre", "gallon", "quart", "pint", "second",
    "minute", "hour", "day", "week", "month", "year", "dollar", "cent", "euro", "degree",
    "radian", "unit", "mph", "kph", "calorie", "joule", "newton", "watt", "volt", "kelvin")
# Abbreviations of two or more letters, and irregular forms.
_ABBREVIATIONS = (
    "foot", "feet", "cm", "mm", "km", "ft", "yd", "mi", "kg", "mg", "lb", "lbs", "oz", "ml", "mL",
    "min", "mins", "hr", "hrs", "deg", "rad", "kmh", "sq", "Pa", "kPa", "Hz", "kJ", "kW", "cal",
    "kcal")
# Units written as one letter, and "in" (also a word): units only inside a wrapper. "sec" is
# left out everywhere (the secant).
_WRAPPED_ONLY = ("m", "g", "s", "h", "L", "l", "K", "N", "J", "W", "V", "A", "in")
_PREFIXES = r"(?:square|sq|cubic|cu)\.? "
_EXPONENT = r"\^ ?(?:\{ ?[+-]? ?\d+ ?\}|[+-]?\d)"


def _words(words) -> str:
  return "|".join(sorted(words, key=len, reverse=True))


_BARE_UNIT = rf"(?:{_PREFIXES})?(?:(?:{_words(_PLURAL_STEMS)})(?:es|s)?|{_words(_ABBREVIATIONS)})"
_ANY_UNIT = rf"(?:{_PREFIXES})?(?:(?:{_words(_PLURAL_STEMS)})(?:es|s)?|" \
            rf"{_words(_ABBREVIATIONS + _WRAPPED_ONLY)})"


def _run(unit: str, joined: str) -> str:
  """A unit with its exponent, optionally joined to more units: "km/h", "m s^{-1}", "N*m".

  After "/" any unit may follow ("km/h"); after a space, "*", `\\cdot` or "per" only `joined`.
  """
  power = rf"(?![A-Za-z])(?: ?{_EXPONENT})?"
  return (rf"{unit}{power}(?:(?: ?/ ?{_ANY_UNIT}|(?: ?\\cdot ?| ?\* ?| per | ){joined}){power})*")


_PERCENT_WORD = r"(?:percentage|percent|per cent|pct|%)(?![A-Za-z])"
# Scale words multiply the number before them (5 thousand = 5000), in a wrapper or bare.
SCALE_WORDS = {"hundred": 2, "thousand": 3, "million": 6, "billion": 9, "trillion": 12}
_SCALE = rf"(?:{_words(SCALE_WORDS)})s?(?![A-Za-z])"
_WRAPPED_SCALE_RE = re.compile(rf" ?({_SCALE}) ?", re.ASCII)
_WRAPPED_PERCENT_RE = re.compile(rf" ?{_PERCENT_WORD} ?", re.ASCII)
_WRAPPED_UNIT_RE = re.compile(rf" ?{_run(_ANY_UNIT, _ANY_UNIT)} ?", re.ASCII)
# Content may hold one level of braces: \mathrm{m s^{-1}}.
_WRAPPER_RE = re.compile(
    r"\\(text|textrm|textbf|mbox|textnormal|textup|mathrm|operatorname) ?"
    rf"\{{((?:[^{{}}]|\{{[^{{}}]*\}})*)\}}( ?{_EXPONENT})?", re.ASCII)
_TEXT_WRAPPERS = frozenset({"text", "textrm", "textbf", "mbox", "textnormal", "textup"})
# A bare unit (or percent word) right after a digit or a closing brace ("\frac{1}{2} cm").
_BARE_RE = re.compile(
    rf"(?<=[\d}}]) ?(?:({_PERCENT_WORD})|{_run(_BARE_UNIT, _BARE_UNIT)})(?![A-Za-z])", re.ASCII)
_VALUE_END = frozenset("0123456789})")


# Unit words that may carry an exponent when bare ("cm^2", "feet^2"), and a wrapper that ends
# right before the "^" ("\\text{ m}^3").
_BARE_UNIT_WORDS = frozenset(
    [w + end for w in _PLURAL_STEMS for end in ("", "s", "es")] + list(_ABBREVIATIONS))
_WRAPPERS = ("\\text", "\\textrm", "\\textbf", "\\mbox", "\\textnormal", "\\textup", "\\mathrm",
             "\\operatorname")
_LOOK_BACK = 48  # longer than any unit in a wrapper, with its spacing
_ASCII_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def is_unit_exponent(text: str, start: int) -> bool:
  """Whether the number at `text[start]` is the exponent of a unit ("5 cm^2", "5\\text{ m}^{3}").

  Reads at most `_LOOK_BACK` characters back with string methods, and only after "^", "{", a
  blank or a sign, so calling it for every number of a text stays linear and cheap. Bare single
  letters ("m^2") are not units (see the module docstring).
  """
  if start == 0 or text[start - 1] not in "^{ +-":
    return False  # the common case, decided in O(1)
  head = text[max(0, start - _LOOK_BACK):start].rstrip(" {+-")
  if not head.endswith("^"):
    return False
  head = head[:-1].rstrip(" ")
  if head.endswith("}"):  # "\\text{ cm}" (no brace inside the wrapper)
    brace = head.rfind("{")
    return (brace >= 0 and "}" not in head[brace + 1:-1] and
            head[:brace].rstrip(" ").endswith(_WRAPPERS))
  return head[len(head.rstrip(_ASCII_LETTERS)):] in _BARE_UNIT_WORDS


def _after_value(text: str, start: int) -> bool:
  """Whether text[start] follows a value: a digit, `}` or `)`, then at most one space."""
  before = text[start - 1:start]
  if before == " ":
    before = text[start - 2:start - 1]
  return before != "" and before in _VALUE_END


def _wrapped(m: re.Match) -> str:
  wrapper, content, exponent = m.group(1), m.group(2), m.group(3) or ""
  if _WRAPPED_PERCENT_RE.fullmatch(content):
    return "%"
  scale = _WRAPPED_SCALE_RE.fullmatch(content)
  if scale:
    return _scaled(scale.group(1)) + exponent
  if wrapper in _TEXT_WRAPPERS:
    return " "  # a unit or a comment after a value ("\text{ (rounded)}"), with its exponent
  if _WRAPPED_UNIT_RE.fullmatch(content) and _after_value(m.string, m.start()):
    return " "  # \mathrm{cm}^2 after a number
  return content + exponent  # maths in roman type: \mathrm{e}^{x}, \operatorname{min}(a, b)


def _scaled(word: str) -> str:
  return rf" \cdot 10^{{{SCALE_WORDS[word.lower().rstrip('s')]}}}"


def _bare(m: re.Match) -> str:
  return "%" if m.group(1) else ""


_BARE_SCALE_RE = re.compile(rf"(?<=[\d}}]) ?({_SCALE})", re.ASCII)


def drop_units(text: str) -> str:
  """Removes units (with their exponents) from normalised text; percent words become "%".

  Args:
    text: answer text with whitespace collapsed to single spaces (`normalize.normalize_answer`
      calls this after its own rewriting).

  Returns:
    The text without units, e.g. "5 \\text{ cm}^2" -> "5 ", "18 meters" -> "18",
    "28 percent" -> "28%", "\\mathrm{e}^{x}" unchanged but unwrapped to "e^{x}".
  """
  text = _WRAPPER_RE.sub(_wrapped, text)
  text = _BARE_SCALE_RE.sub(lambda m: _scaled(m.group(1)), text)
  return _BARE_RE.sub(_bare, text)
