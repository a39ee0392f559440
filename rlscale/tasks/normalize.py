"""Text normalisation of extracted answers, shared by the number fast path and the parser.

Pure string rewriting (no sympy, no eval): unicode operators to ASCII, math delimiters and spacing
commands removed, `\\dfrac`/`\\tfrac` to `\\frac`, digit-group separators (`1\\,000`, `1{,}000`)
to commas, units dropped with their exponents (`rlscale.tasks.units`: "5\\text{ cm}^2" -> "5",
"28 percent" -> "28%"), trailing sentence punctuation removed. Everything here is
linear in the input length (anchored or bounded regexes only).
"""

from __future__ import annotations

import re

from rlscale.tasks import units

# Unicode that models (and LaTeX-to-text converters) use for ASCII operators.
_UNICODE = {
    "\u2212": "-", "\u2013": "-", "\u00d7": "*", "\u00b7": "*", "\u22c5": "*", "\u2217": "*",
    "\u00f7": "/", "\u03c0": r"\pi ", "\u221a": r"\sqrt", "\u00a0": " ", "\u2009": " ",
    "\u202f": " ", "\u2002": " ", "\u2003": " ", "\u00b0": "", "\u221e": r"\infty ",
    "\u222a": r" \cup ", "\u2208": r" \in ",
}
_UNICODE_RE = re.compile("|".join(map(re.escape, _UNICODE)))
# Group separator between digit groups of three: 1\,000  1{,}000  1~000  1\ 000.
_GROUP_SEP_RE = re.compile(
    r"(?<=\d)(?:\\,|\\ |\{,\}|\\;|\\!|~)(?=\d{3}(?!\d))", re.ASCII)
_SPACING_RE = re.compile(r"\\(?:,|;|:|!| |quad\b|qquad\b)|~")
_DROP_RE = re.compile(
    r"\\displaystyle|\\left(?=[(\[{|.\\])|\\right(?=[)\]}|.\\])|\\[bB]ig{1,2}[lr]?"
    r"|\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\\$|\\!")
_PERCENT_RE = re.compile(r"\\%")
_FRAC_RE = re.compile(r"\\[dt]frac(?![A-Za-z])")
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
  s = s.replace(r"\$", "").lstrip("$").strip()
  s = _FRAC_RE.sub(r"\\frac", s)
  s = _DROP_RE.sub("", s)
  s = _PERCENT_RE.sub("%", s)
  s = _GROUP_SEP_RE.sub(",", s)
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


def text_key(text: str) -> str:
  """Case-folded, whitespace-collapsed text for word-answer comparison."""
  return _WS_RE.sub(" ", text).strip().casefold()
