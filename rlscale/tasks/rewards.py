"""Batch rewards: verifier correctness, an optional format reward, DAPO overlong shaping.

    reward_b = correct_b + format_weight * format_b + overlong_b

  * correct_b in [0, 1]: `task.score(response_b, example_b).reward`. A non-finite or None score
    (a custom or native scorer's NaN) would make every GRPO advantage of its group NaN, so it is
    counted (`infos["nonfinite"]`, the runner's `reward/nonfinite_frac`), warned about once per
    task (`NonFiniteRewardWarning`, naming the task and row) and scored 0; with
    `task.nonfinite_reward="error"` it raises `NonFiniteRewardError` naming the row instead.
  * format_b in {0, 1}: 1 iff the answer is found by the first extractor of `extract_order`
    (e.g. a complete `<answer>...</answer>` block when "answer_tag" comes first), in the spirit
    of DeepSeek-R1's format reward (Guo et al. 2025).
  * overlong_b <= 0: DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), with L = response
    length in tokens, L_max = `overlong_max_len`, L_cache = `overlong_cache_len`:
        0                                 if L <= L_max - L_cache
        ((L_max - L_cache) - L) / L_cache if L_max - L_cache < L <= L_max
        -1                                if L > L_max
    (disabled when `overlong_max_len` is None). `rlscale.rl.dapo.overlong_penalty` is the same
    formula in JAX for the update step (config `rl.overlong_buffer_frac`); enable one, not both.
This module is NumPy only (no JAX), so the reward path runs on the host next to the verifier.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
import weakref
from typing import Any, NamedTuple, Optional, Sequence

import numpy as np

from rlscale.tasks import base
from rlscale.tasks import extract
from rlscale.tasks import verifier


# What a non-finite task score becomes (`RewardConfig.nonfinite_reward`).
NONFINITE_REWARD_MODES = ("zero", "error")


class NonFiniteRewardError(ValueError):
  """A task score was NaN, infinite or None under task.nonfinite_reward="error" (a user error:
  the command line reports it on one line)."""


class NonFiniteRewardWarning(RuntimeWarning):
  """A task score was NaN, infinite or None and was scored 0 (issued once per task)."""


@dataclasses.dataclass(frozen=True)
class RewardConfig:
  """Optional reward terms (config fields `task.format_weight`, `task.overlong_*`).

  Attributes:
    format_weight: weight of the format reward (0 = off), >= 0.
    overlong_max_len: L_max in tokens, or None for no overlong shaping.
    overlong_cache_len: L_cache in tokens, 0 < L_cache <= L_max (required with L_max).
    nonfinite_reward: what a non-finite or None task score becomes (`task.nonfinite_reward`):
      "zero" (None means it too: scored 0, counted and warned about once) or "error" (the run
      stops with `NonFiniteRewardError`).

  Raises:
    ValueError: a field outside its allowed range.
  """
  format_weight: float = 0.0
  overlong_max_len: Optional[int] = None
  overlong_cache_len: Optional[int] = None
  nonfinite_reward: Optional[str] = None

  def __post_init__(self):
    if not isinstance(self.format_weight, (int, float)) or not 0 <= self.format_weight:
      raise ValueError(f"task.format_weight must be a float >= 0, got {self.format_weight!r}")
    if self.nonfinite_reward not in (None,) + NONFINITE_REWARD_MODES:
      raise ValueError(f"task.nonfinite_reward={self.nonfinite_reward!r}; allowed values: "
                       f"{', '.join(NONFINITE_REWARD_MODES)} (None = zero)")
    if self.overlong_max_len is None:
      return
    l_max, l_cache = self.overlong_max_len, self.overlong_cache_len
    if not isinstance(l_max, int) or l_max < 1:
      raise ValueError(f"task.overlong_max_len must be a positive int or None, got {l_max!r}")
    if not isinstance(l_cache, int) or not 0 < l_cache <= l_max:
      raise ValueError("task.overlong_cache_len must be an int in (0, task.overlong_max_len="
                       f"{l_max}], got {l_cache!r}")


# A response is correct (the verifier's verdict) when its task score is full marks: the verifier
# scores 0 or 1; a generator's native scorer may give partial credit, which is not correct.
CORRECT_SCORE = 1.0 - 1e-6


class ScoredBatch(NamedTuple):
  """What `score_batch` returns (a tuple: `rewards, correct, infos = score_batch(...)`).

  Attributes:
    rewards: [B] float32 shaped training reward (correctness + format + overlong terms).
    correct: [B] bool, the verifier's verdict: task score >= CORRECT_SCORE, before any shaping.
      Every metric or filter that means "correct" (accuracy, pass@k, DAPO's filter) uses this,
      never `rewards`, which shaping can push below 1 for a right answer or to 1 for a wrong one.
    infos: {"correct": [B] float32 task score, "format": [B] float32, "overlong": [B] float32,
      "nonfinite": [B] bool (the task score was NaN, infinite or None and was scored 0),
      "reason": list[str], "extracted": list[str | None]}.
  """
  rewards: np.ndarray
  correct: np.ndarray
  infos: dict[str, Any]


def overlong_penalty(lengths: np.ndarray, *, max_len: int, cache_len: int) -> np.ndarray:
  """DAPO soft overlong punishment (see module docstring).

  Args:
    lengths: [B] response lengths in tokens (int or float).
    max_len: L_max.
    cache_len: L_cache, 0 < L_cache <= L_max.

  Returns:
    [B] float32 penalties in [-1, 0].
  """
  lengths = np.asarray(lengths, np.float64)
  soft = ((max_len - cache_len) - lengths) / cache_len
  return np.clip(np.minimum(soft, 0.0), -1.0, 0.0).astype(np.float32)


# Tasks already warned about a non-finite score (once per task object, not per row or batch).
_WARNED_NONFINITE: "weakref.WeakSet[Any]" = weakref.WeakSet()


def _finite_reward(value: Any) -> Optional[float]:
  """`value` as a finite float, or None when it is None, NaN, infinite or not a number."""
  try:
    value = float(value)
  except (TypeError, ValueError):
    return None
  return value if math.isfinite(value) else None


def _first_nonfinite_of(task: Any) -> bool:
  """True the first time it is asked about `task` (always for a task that cannot be weakly
  referenced or hashed)."""
  try:
    if task in _WARNED_NONFINITE:
      return False
    _WARNED_NONFINITE.add(task)
  except TypeError:
    pass
  return True


def _task_label(task: Any) -> str:
  """The task in messages: its class and, where it has one, its generator name."""
  name = getattr(task, "name", None)
  return type(task).__name__ + (f" {name!r}" if isinstance(name, str) else "")


def _replace_nonfinite(task, scores: list, examples: Sequence[base.Example], mode: Optional[str]
                       ) -> np.ndarray:
  """Scores non-finite task scores 0 in place (see the module docstring); returns [B] bool flags.

  Raises:
    NonFiniteRewardError: mode "error" and a score is non-finite (names the first such row).
  """
  flags = np.array([_finite_reward(s.reward) is None for s in scores], bool)
  if not flags.any():
    return flags
  row = int(np.flatnonzero(flags)[0])
  where = (f"the scorer of {_task_label(task)} returned reward {repr(scores[row].reward)[:40]} "
           f"for row {row} of the batch (prompt {examples[row].prompt[:80]!r}, reference "
           f"{examples[row].answer[:40]!r})")
  if mode == "error":
    raise NonFiniteRewardError(f"{where}; task.nonfinite_reward='error' stops the run (set it to "
                               "'zero' to score such responses 0)")
  if _first_nonfinite_of(task):
    warnings.warn(f"{where}: scored 0 and counted in reward/nonfinite_frac ({int(flags.sum())} "
                  "row(s) in this batch); further ones are counted without a warning "
                  "(task.nonfinite_reward='error' stops the run instead)",
                  NonFiniteRewardWarning, stacklevel=3)
  for b in np.flatnonzero(flags):
    scores[b] = base.Score(0.0, f"non-finite reward {repr(scores[b].reward)[:40]} scored 0",
                           scores[b].extracted)
  return flags


def format_ok(response: str, config: verifier.VerifierConfig) -> bool:
  """True iff the first extractor of `config.extract_order` finds an answer (bounds apply)."""
  if verifier.check_response(response, config) is not None:
    return False
  try:
    return extract.extract_answer(response, config.extract_order[:1]) is not None
  except extract.ExtractionError:
    return False


def score_batch(task: base.TaskSource, responses: Sequence[str],
                examples: Sequence[base.Example], *,
                response_lengths: Optional[Sequence[int] | np.ndarray] = None
                ) -> ScoredBatch:
  """Rewards of B responses; never raises because of response content.

  Identical (response, reference) pairs are scored once (groups often repeat answers).

  Args:
    task: the task source (its `score`, `verifier_config` and `reward_config` are used).
    responses: B decoded response texts.
    examples: B examples (example b is the prompt response b answers).
    response_lengths: [B] response lengths in tokens for overlong shaping; when None, the
      character counts of the responses are used (exact for the character tokenizer).

  Returns:
    ScoredBatch(rewards [B] float32, correct [B] bool verdicts, infos).

  Raises:
    ValueError: responses, examples and response_lengths differ in length (a caller bug).
    NonFiniteRewardError: a task score is non-finite and task.nonfinite_reward is "error".
  """
  b = len(responses)
  if len(examples) != b or (response_lengths is not None and len(response_lengths) != b):
    raise ValueError(f"score_batch needs equal lengths: responses {b}, examples "
                     f"{len(examples)}, response_lengths "
                     f"{None if response_lengths is None else len(response_lengths)}")
  reward_config = getattr(task, "reward_config", None) or RewardConfig()
  memo: dict[tuple[Any, str, str], base.Score] = {}
  scores = []
  for response, example in zip(responses, examples):
    key = (response if isinstance(response, str) else id(response), example.prompt,
           example.answer)
    if key not in memo:
      try:
        memo[key] = task.score(response, example)
      except Exception as e:  # pylint: disable=broad-except (a custom scorer must not stop a run)
        memo[key] = base.Score(0.0, f"scorer error ({type(e).__name__})", None)
    scores.append(memo[key])
  nonfinite = _replace_nonfinite(task, scores, examples, reward_config.nonfinite_reward)
  correct = np.array([s.reward for s in scores], np.float32).reshape(b)
  rewards = correct.copy()
  fmt = np.zeros(b, np.float32)
  if reward_config.format_weight:
    fmt = np.array([format_ok(r, task.verifier_config) for r in responses], np.float32)
    rewards += reward_config.format_weight * fmt
  overlong = np.zeros(b, np.float32)
  if reward_config.overlong_max_len is not None:
    lengths = (np.asarray(response_lengths) if response_lengths is not None else
               np.array([len(r) if isinstance(r, str) else 0 for r in responses]))
    overlong = overlong_penalty(lengths, max_len=reward_config.overlong_max_len,
                                cache_len=reward_config.overlong_cache_len)
    rewards += overlong
  infos = {"correct": correct, "format": fmt, "overlong": overlong, "nonfinite": nonfinite,
           "reason": [s.reason for s in scores], "extracted": [s.extracted for s in scores]}
  return ScoredBatch(rewards.astype(np.float32), correct >= CORRECT_SCORE, infos)
