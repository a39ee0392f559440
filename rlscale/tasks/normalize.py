"""Text normalisation of extracted answers, shared by the number fast path and the parser.

Pure string rewriting (no sympy, no eval): unicode operators to ASCII, math delimiters and spacing
commands removed, `\\dfrac`/`\\tfrac`/`\\cfrac` to `\\frac`, digit-group separators (`1\\,000`,
`1{,}000`, `11,\\! 111`) to commas, "and"/"or" between answers to commas, units dropped with their
exponents (`rlscale.tasks.units`: "5\\text{ cm}^2" -> "5", "28 percent" -> "28%", scale words
kept as factors: "5 thousand" -> "5 \\cdot 10^{3}"), trailing sentence punctuation removed.
Everything here is linear in the input length (anchored or bounded regexes only).
"""

from __future__ import annotations

import re

from rlscale.tasks import units

# Unicode that models (and LaTeX-to-text converters) use for ASCII operators.
_UNICODE = {
    "\u2212": "-", "\u2013": "-", "\u00d7": "*", "\u00b7": "*", "\u22c5": "*", "\u2217": "*",
    "\u00f7": "/", "\u03c0": r"\pi ", "\u221a": r"\sqrt", "\u00a0": " ", "\u2009": " ",
    "\u202f": " ", "\u2002": " ", "\u2003": " ", "\u00b0": "", "\u221e": r"\infty ",
    "\u222a": r" \cup ", "\u2208": r" \in ", "\u2264": r" \le ", "\u2265": r" \ge ",
    "\u2260": r" \ne ", "\u00b1": r"\pm ", "\u2248": r" \approx ",
}
_UNICODE_RE = re.compile("|".join(map(re.escape, _UNICODE)))
# Group separator between digit groups of three: 1\,000  1{,}000  1~000  1\ 000.
_GROUP_SEP_RE = re.compile(
    r"(?<=\d)(?:\\,|\\ |\{,\}|\\;|\\!|~|,\\! ?)(?=\d{3}(?!\d))", re.ASCII)
# "and" / "or" between answers (1 and 2, 6 \text{ and } 8, (11,7)or(7,11)) separate a list,
# in answers with maths in them; word answers ("salt and pepper") keep their words.
_JOIN_RE = re.compile(r"\\text ?\{ ?(?:and|or) ?\}|(?<![A-Za-z])(?:and|or)(?![A-Za-z])"
                      r"|(?<=[)\d])or(?=[(A-Z])")
_MATH_HINT_RE = re.compile(r"[\d\\=]")
_EMPTY_ITEM_RE = re.compile(r",(?: ?,)+")
# Not the second backslash of a line break "\\\\ " (a matrix row); "\\quadx" is a space too.
_SPACING_RE = re.compile(r"(?<!\\)\\(?:,|;|:|!| |q?quad)|~")
# A doubled backslash before a letter is a command escaped twice ("\\\\frac" written for
# "\\frac" in a Python string), not a line break followed by letters.
_DOUBLED_RE = re.compile(
    r"(?<!\\)\\\\(?=(?:[dtc]?frac|sqrt|left|right|leq?|geq?|neq?|pi|cdot|times|infty|text"
    r"|boxed|mathrm)(?![A-Za-z]))")
_DROP_RE = re.compile(
    r"\\displaystyle|\\left(?=[(\[{|.\\])|\\right(?=[)\]}|.\\])|\\[bB]ig{1,2}[lr]?"
    r"|\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\\$|\\!")
_PERCENT_RE = re.compile(r"\\%")
_FRAC_RE = re.compile(r"\\[dtc]frac(?![A-Za-z])")
_STYLE_RE = re.compile(r"\\(?:mathrm|mathbf|boldsymbol|operatorname|mathit|textit)\s*\{([^{}]*)\}")
_TEXT_RE = re.compile(r"\\(?:text|textbf|mbox|textrm|textnormal|textup) ?\{([^{}]*)\}")
_DELIMS = ((r"\(", r"\)"), (r"\[", r"\]"), ("$$", "$$"), ("$", "$"))
_WS_RE = re.compile(r"\s+")
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z '\-]*[A-Za-z]")


def normalize_answer(text: str) -> str:
  """Canonical text of an extracted answer (or reference) before parsing.

  Examples: "$\\dfrac{1}{2}$" -> "\\frac{1}{2}"; "1\\,000" -> "1,000"; "18 \\text{ cm}." -> "18";
  "5\\text{ cm}^2" -> "5"; "18 meters" -> "18"; "28 percent" -> "28%";
  "\\text{Paris}" -> "Paris"; "\u22123" -> "-3"; "50\\%" -> "50%"; "90^\\circ" -> "90".

  Args:
    text: any string (bounded by the caller; see `VerifierConfig.max_answer_chars`).

  Returns:
    The normalised string (possibly empty).
  """
  s = _UNICODE_RE.sub(lambda m: _UNICODE[m.group(0)], text).strip()
  for left, right in _DELIMS:
    if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
      s = s[len(left):len(s) - len(right)].strip()
  # Dollars left inside ("$21,16$ or $11$") delimit maths, as does a trailing one.
  s = s.replace(r"\$", "").replace("$", " ").strip()
  s = _DOUBLED_RE.sub(r"\\", s)
  s = _FRAC_RE.sub(r"\\frac", s)
  s = _GROUP_SEP_RE.sub(",", s)  # before \! is dropped: "11,\! 111" is 11111
  s = _DROP_RE.sub("", s)
  s = _PERCENT_RE.sub("%", s)
  if _MATH_HINT_RE.search(s):
    s = _EMPTY_ITEM_RE.sub(",", _JOIN_RE.sub(",", s))
  s = _SPACING_RE.sub(" ", s)
  s = _WS_RE.sub(" ", s).strip()
  whole_text = _TEXT_RE.fullmatch(s)
  # A whole-answer \text{...} is a word answer (or "5 cm"); other wrappers hold units, comments
  # or roman-type maths (rlscale.tasks.units).
  s = whole_text.group(1) if whole_text else s
  s = units.drop_units(s)
  s = _STYLE_RE.sub(r"\1", s)
  s = _WS_RE.sub(" ", s).strip()
  return s.rstrip(".;").rstrip() if not s.endswith("..") else s


def is_word_answer(reference: str) -> bool:
  """True when a normalised reference is plain words ("Paris", "True", "no solution").

  Such references are compared as case-insensitive text, never as products of symbols. A single
  letter ("x") is not a word answer; known math names ("pi", "sqrt") are not either.
  """
  return bool(_WORD_RE.fullmatch(reference)) and reference.lower() not in _MATH_WORDS


_MATH_WORDS = frozenset({"pi", "infty", "inf", "sqrt", "sin", "cos", "tan", "ln", "log", "exp"})


_TEXT_ANSWER_RE = re.compile(r"[A-Za-z0-9 .,;:'()!?\-]+")
_WORD_IN_RE = re.compile(r"[A-Za-z]{2,}")


def is_text_answer(reference: str) -> bool:
  """True when a normalised reference is text (letters, digits, spaces, plain punctuation; no
  LaTeX and no operators): "Paris", "(B)", "The midpoints form a regular hexagon"."""
  return bool(_TEXT_ANSWER_RE.fullmatch(reference)) and any(c.isalpha() for c in reference)


def text_key(text: str, reference: str = "") -> str:
  """Whitespace-collapsed text for text comparison, case-folded when `reference` (default:
  the text itself) has a word of two or more letters; single letters (a choice, a variable,
  a matrix name) keep their case."""
  text = _WS_RE.sub(" ", text).strip()
  return text.casefold() if _WORD_IN_RE.search(reference or text) else text
