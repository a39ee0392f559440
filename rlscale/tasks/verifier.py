"""rlscale's answer verifier: extraction, a plain-number fast path, sympy in a bounded worker.

`verify(response, reference, config)` returns a `Score` (reward 1.0 or 0.0, a short reason, the
extracted answer) and never raises. Steps:
  1. Bounds on the raw response: type, length (`max_response_chars`), control/format characters
     (NUL, bidi overrides, zero-width, lone surrogates) -> reward 0 with the reason.
  2. Extraction in `extract_order` (`rlscale.tasks.extract`); an unclosed `\\boxed{` is reward 0.
  3. Normalisation (`rlscale.tasks.normalize`).
  4. Fast path: both sides plain numbers -> exact `Fraction` comparison (tolerance for decimals).
     Identical text -> 1. Word references ("Paris") -> case-insensitive text comparison.
     A reference with several `\\boxed{}` is the set of all of them; a response then gives
     all of its boxes as one set.
  5. Otherwise sympy equivalence (`rlscale.tasks.equivalence`) in the worker process with a hard
     `timeout_s` limit (`rlscale.tasks.worker`); results are cached per (answer, reference).
     A reference the parser cannot read is compared as text only when it is text (words,
     letters, multiple choice: `normalize.is_text_answer`), case-sensitively unless it has a
     word; other unreadable maths scores 1 only as identical text.
This module imports neither sympy nor JAX, so `python -m rlscale.verify` answers in about a second.
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
from typing import Optional, Sequence

from rlscale.tasks import extract
from rlscale.tasks import normalize
from rlscale.tasks import numbers
from rlscale.tasks import worker

# C0/C1 controls except \t \n \r, lone surrogates, zero-width and bidi formatting characters.
_FORBIDDEN_RE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2069\ufeff\ufff9-\ufffb]")
_CACHE_LIMIT = 1 << 16


@dataclasses.dataclass(frozen=True)
class Score:
  """Result of scoring one response.

  Attributes:
    reward: float in [0, 1] (the verifier gives 0.0 or 1.0; native scorers may give partial credit).
    reason: short human-readable explanation ("correct: equal numbers", "wrong: 12 != 1/2",
      "timeout after 0.9 s", ...).
    extracted: the answer text found in the response, or None.
  """
  reward: float
  reason: str
  extracted: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class VerifierConfig:
  """Settings of `verify` (from the config's `task` section).

  Attributes:
    extract_order: extractor names from `extract.EXTRACTORS`, tried in order (a tuple, or a
      comma-separated string).
    rel_tol: relative tolerance when either side is written as a decimal (0 = exact).
    percent: whether the answer's "x%" may also mean x/100 (answer "50%" against reference
      "0.5"). A trailing % may always be dropped ("50%" = "50"), and the reference's "x%" may
      always mean x/100 (reference "28%" accepts "28", "28%" and "0.28", as in Math-Verify);
      two sides with a % compare as written (`numbers.percent_readings`). "x percent",
      "x per cent" and "x\\text{ percent}" are read as "x%".
    timeout_s: hard wall-clock limit in seconds for one sympy comparison (worker process). The
      default 0.9 s keeps the call that meets a runaway under 1 s (the kill adds 10-50 ms);
      the fresh worker starts at the next call, which pays its start-up outside the limit
      (~0.35 s, ~1 s when it must import reasoning-gym for a native scorer).
    max_response_chars: longer responses score 0 unread.
    max_answer_chars: longer extracted answers score 0 unparsed.

  Raises:
    ValueError: a field outside its allowed range (the message names the config field).
  """
  extract_order: Sequence[str] | str = extract.DEFAULT_ORDER
  rel_tol: float = 1e-6
  percent: bool = False
  timeout_s: float = 0.9
  max_response_chars: int = 65536
  max_answer_chars: int = 512

  def __post_init__(self):
    object.__setattr__(self, "extract_order", extract.check_order(self.extract_order))
    if not (isinstance(self.rel_tol, (int, float)) and 0 <= self.rel_tol < 1):
      raise ValueError(f"task.rel_tol must be a float in [0, 1), got {self.rel_tol!r}")
    if not isinstance(self.percent, bool):
      raise ValueError(f"task.percent must be True or False, got {self.percent!r}")
    if not (isinstance(self.timeout_s, (int, float)) and 0 < self.timeout_s <= 600 and
            math.isfinite(self.timeout_s)):
      raise ValueError(f"task.timeout_s must be in (0, 600] seconds, got {self.timeout_s!r}")
    for name in ("max_response_chars", "max_answer_chars"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"task.{name} must be a positive int, got {value!r}")


_cache: dict[tuple, tuple[Optional[bool], str]] = {}
_cache_lock = threading.Lock()


def _compare_in_worker(answer: str, reference: str,
                       config: VerifierConfig) -> tuple[Optional[bool], str]:
  key = (answer, reference, config.rel_tol, config.percent)
  with _cache_lock:
    if key in _cache:
      return _cache[key]
  request = dict(op="compare", answer=answer, reference=reference, rel_tol=config.rel_tol,
                 percent=config.percent)
  response, failure = worker.client().call(request, config.timeout_s)
  if response is None:
    result = (False, failure)
  elif "error" in response:
    result = (False, f"verifier error: {response['error']}")
  else:
    result = (response["equal"], response["reason"])
  with _cache_lock:
    if len(_cache) >= _CACHE_LIMIT:
      _cache.clear()
    _cache[key] = result
  return result


def check_response(response: object, config: VerifierConfig) -> Optional[str]:
  """Why a raw response must score 0 before extraction (type, size, characters), or None."""
  if not isinstance(response, str):
    return f"response is not a string ({type(response).__name__})"
  if len(response) > config.max_response_chars:
    return f"response too long ({len(response)} > {config.max_response_chars} chars)"
  bad = _FORBIDDEN_RE.search(response)
  if bad:
    return f"control or format character U+{ord(bad.group(0)):04X} in response"
  return None


def find_answer(response: str, config: VerifierConfig) -> tuple[Optional[str], str]:
  """(extracted answer, "") or (None, reason) after `check_response` and extraction."""
  failure = check_response(response, config)
  if failure:
    return None, failure
  try:
    found = extract.extract_answer(response, config.extract_order)
  except extract.ExtractionError as e:
    return None, str(e)
  if found is None:
    return None, f"no answer found (tried {', '.join(config.extract_order)})"
  if len(found.text) > config.max_answer_chars:
    return None, f"answer too long ({len(found.text)} > {config.max_answer_chars} chars)"
  return found.text, ""


def compare(answer: str, reference: str, config: VerifierConfig) -> tuple[bool, str]:
  """Whether an extracted answer equals the reference; returns (equal, reason)."""
  a = normalize.normalize_answer(answer)
  r = normalize.normalize_answer(extract.reference_answer(reference))
  if not r:
    return False, "empty reference"
  if not a:
    return False, "empty answer"
  pa, pr = numbers.parse_plain_number(a), numbers.parse_plain_number(r)
  # "1000,99" against "1000.99": a decimal comma, read only against a decimal point.
  if pa is None and pr is not None and pr.decimal:
    pa = numbers.parse_decimal_comma(a)
  elif pr is None and pa is not None and pa.decimal:
    pr = numbers.parse_decimal_comma(r)
  if pa is not None and pr is not None:
    if numbers.plain_numbers_equal(pa, pr, rel_tol=config.rel_tol, percent=config.percent):
      return True, "equal numbers"
    return False, f"{numbers.format_number(pa)} != {numbers.format_number(pr)}"
  return _compare_general(a, r, config)


def _short(text: str, limit: int = 40) -> str:
  return text if len(text) <= limit else text[:limit] + "..."


def _compare_general(a: str, r: str, config: VerifierConfig) -> tuple[bool, str]:
  """Non-numeric comparison of normalised texts: identical, word answers, then sympy."""
  if a == r:
    return True, "identical text"
  if normalize.is_word_answer(r):
    same = normalize.text_key(a) == normalize.text_key(r)
    return same, "same text" if same else "different text"
  equal, reason = _compare_in_worker(a, r, config)
  if equal is None:  # the reference is not mathematics we parse
    if not normalize.is_text_answer(r):
      return False, reason  # maths we cannot read: only identical text (above) scores
    same = normalize.text_key(a, r) == normalize.text_key(r, r)
    return same, "same text" if same else f"different text ({reason})"
  return equal, reason if equal else f"{_short(a)} != {_short(r)} ({reason})"


def verify(response: str, reference: str,
           config: VerifierConfig = VerifierConfig()) -> Score:
  """Scores a model response against a reference answer. Never raises.

  Args:
    response: untrusted model output text.
    reference: trusted reference answer ("17", "\\frac{1}{2}", a GSM8K "... #### 17" solution or
      a MATH solution with `\\boxed{}`; the final answer is taken from it).
    config: extraction order, tolerance, bounds and time limit.

  Returns:
    Score(reward 1.0 or 0.0, reason, extracted answer or None).
  """
  try:
    answer, failure = find_answer(response, config)
    if answer is None:
      return Score(0.0, failure, None)
    if not isinstance(reference, str):
      return Score(0.0, f"reference is not a string ({type(reference).__name__})", answer)
    reference_text = extract.reference_answer(reference)
    if extract.has_several_items(normalize.normalize_answer(reference_text)):
      boxes = extract.all_boxed(response)
      if len(boxes) >= 2:  # a reference of several items: every box of the response counts
        answer = extract.as_set(boxes)
        if len(answer) > config.max_answer_chars:
          return Score(0.0, f"answer too long ({len(answer)} > {config.max_answer_chars} chars)",
                       None)
    equal, reason = compare(answer, reference, config)
    return Score(1.0 if equal else 0.0, ("correct: " if equal else "wrong: ") + reason, answer)
  except Exception as e:  # pylint: disable=broad-except (the training loop must never see one)
    return Score(0.0, f"internal verifier error ({type(e).__name__})", None)
