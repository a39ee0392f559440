"""Stable hashing for seeds and the train / held-out partition of question space.

Held-out evaluation must never overlap the training stream, even for generators whose whole
question space is a few thousand strings (chain_sum with one-digit terms repeats questions within
minutes). A disjoint seed space alone cannot promise that, so the partition is by content: a
question is held out iff `sha256(question)` falls in the first `fraction` of hash space. Training
streams skip held-out questions and evaluation draws only held-out ones, so the two sets are
disjoint by construction and the held-out set is the same for every run seed (sweeps compare
metrics on identical prompts).
"""

from __future__ import annotations

import hashlib
from typing import Callable, TypeVar

T = TypeVar("T")


def stable_seed(*parts: object) -> int:
  """A 63-bit seed from the `repr` of `parts`, identical across processes and Python versions.

  (Python's `hash` of str is salted per process, so it cannot give reproducible streams.)
  """
  digest = hashlib.sha256(repr(parts).encode("utf-8", "surrogatepass")).digest()
  return int.from_bytes(digest[:8], "big") >> 1


def check_fraction(fraction: float) -> float:
  """Validates `task.holdout_fraction`: a float in (0, 0.5]; raises ValueError otherwise."""
  if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not (
      0.0 < fraction <= 0.5):
    raise ValueError(f"task.holdout_fraction must be a float in (0, 0.5], got {fraction!r}")
  return float(fraction)


def is_held_out(question: str, fraction: float) -> bool:
  """True iff `question` belongs to the held-out part of question space.

  Args:
    question: the question text (Example.prompt).
    fraction: share of question space held out, in (0, 0.5].
  """
  digest = hashlib.sha256(question.encode("utf-8", "surrogatepass")).digest()
  return int.from_bytes(digest[:8], "big") < fraction * 2.0**64


MAX_ATTEMPTS = 64


def first_training_draw(draw: Callable[[int], T], key: Callable[[T], str], fraction: float,
                        what: str) -> T:
  """The first of draw(0), draw(1), ... whose question is not held out.

  Args:
    draw: attempt number -> item (deterministic).
    key: item -> question text.
    fraction: held-out share of question space.
    what: name for the error message.

  Raises:
    RuntimeError: MAX_ATTEMPTS draws in a row were held out (a degenerate generator).
  """
  for attempt in range(MAX_ATTEMPTS):
    item = draw(attempt)
    if not is_held_out(key(item), fraction):
      return item
  raise RuntimeError(f"{MAX_ATTEMPTS} held-out draws in a row from {what}: it seems to "
                     "produce a single question")


def distinct_held_out(draw: Callable[[int], T], key: Callable[[T], str], fraction: float,
                      n: int, what: str) -> list[T]:
  """The first `n` distinct held-out items among draw(0), draw(1), ...

  Raises:
    ValueError: fewer than n found within 200 * n + 10000 draws (question space too small).
  """
  seen, out = set(), []
  limit = 200 * n + 10000
  for i in range(limit):
    item = draw(i)
    question = key(item)
    if question in seen or not is_held_out(question, fraction):
      continue
    seen.add(question)
    out.append(item)
    if len(out) == n:
      return out
  raise ValueError(f"only {len(out)} distinct held-out questions from {what} in {limit} draws; "
                   f"lower task.eval_size (now {n}) or raise task.holdout_fraction "
                   f"(now {fraction})")
