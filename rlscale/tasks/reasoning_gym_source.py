"""reasoning-gym generators as a task source (any generator by name, with its config kwargs).

Stream layout: training position i lives in chunk c = i // CHUNK at offset i % CHUNK; chunk c is
`reasoning_gym.create_dataset(name, size=CHUNK, seed=stable_seed(seed, "train", name, c, k))`.
Attempt k = 0 is used unless that item's question is held out (`rlscale.tasks.holdout`), in
which case attempts k = 1, 2, ... at the same offset are tried. So position i depends only on
(seed, name, kwargs, i), never on what was generated before (exact resume, identical sweeps),
and works for generators that precompute their items per dataset instance too. Evaluation draws
held-out questions (deduplicated) from chunks seeded by `eval_seed`, which does not depend on the
run seed, so every run of a sweep is evaluated on the same prompts.
"""

from __future__ import annotations

import collections
import json
import math
from typing import Any, Mapping, Optional

from rlscale.tasks import base
from rlscale.tasks import holdout
from rlscale.tasks import native
from rlscale.tasks import verifier
from rlscale.tasks import worker

CHUNK = 1000
_CACHED_CHUNKS = 8
SCORERS = ("verifier", "native")


def _jsonable(value: Any) -> Any:
  """Metadata as plain JSON types (tuples -> lists), so the worker can receive it."""
  return json.loads(json.dumps(value, default=str))


class ReasoningGymSource(base.TaskSource):
  """Examples from a reasoning-gym generator, scored by rlscale's verifier or natively.

  Args:
    name: generator name, e.g. "chain_sum", "basic_arithmetic", "countdown".
    kwargs: generator config kwargs, e.g. {"min_terms": 2, "max_terms": 3}.
    seed: run seed (training stream).
    eval_seed: seed of the held-out draw (default: independent of the run seed).
    scorer: "verifier" or "native": the generator's own scoring rule, partial credit possible,
      run in the worker process with the verifier's time limit; for generators whose
      `score_answer` evaluates answer text, rlscale's eval-free scorer of the same rule, and
      refused for generators not audited (see `rlscale.tasks.native`).
    holdout_fraction: share of question space held out for evaluation, in (0, 0.5].
    prompt_template, target_template, verifier_config: see `base.TaskSource`.

  Raises:
    ValueError: unknown generator or scorer, scorer="native" for a generator it is not allowed
      for, or kwargs the generator rejects.
  """

  def __init__(self, name: str, kwargs: Optional[Mapping[str, Any]] = None, *, seed: int,
               eval_seed: int = 1234, scorer: str = "verifier", holdout_fraction: float = 0.1,
               prompt_template: str = "{question}", target_template: str = "{answer}",
               verifier_config: Optional[verifier.VerifierConfig] = None):
    super().__init__(prompt_template=prompt_template, target_template=target_template,
                     verifier_config=verifier_config)
    import reasoning_gym  # pylint: disable=g-import-not-at-top (heavy; only for this source)
    from reasoning_gym import factory  # pylint: disable=g-import-not-at-top
    if name not in factory.DATASETS:
      raise ValueError(f"task.name={name!r} is not a reasoning-gym generator; choose from "
                       f"{', '.join(sorted(factory.DATASETS))}")
    if scorer not in SCORERS:
      raise ValueError(f"task.scorer={scorer!r}; allowed values: {', '.join(SCORERS)}")
    if scorer == "native":
      native.check_native_scorer(name)
    self._create = reasoning_gym.create_dataset
    self.name = name
    self.kwargs = dict(kwargs or {})
    self.seed = int(seed)
    self.eval_seed = int(eval_seed)
    self.scorer = scorer
    self.holdout_fraction = holdout.check_fraction(holdout_fraction)
    self._chunks: collections.OrderedDict = collections.OrderedDict()
    if scorer == "native":  # import reasoning-gym in the worker once, outside the time limit
      worker.client().preload(dict(op="native_setup", name=name, kwargs=_jsonable(self.kwargs)))
    try:
      self._chunk("train", 0, 0)
    except (TypeError, AssertionError, ValueError) as e:
      raise ValueError(f"task.kwargs={self.kwargs} rejected by reasoning-gym {name!r}: "
                       f"{type(e).__name__}: {e}") from None

  def _chunk(self, stream: str, chunk: int, attempt: int):
    key = (stream, chunk, attempt)
    if key not in self._chunks:
      run_seed = self.seed if stream == "train" else self.eval_seed
      seed = holdout.stable_seed(run_seed, stream, self.name, chunk, attempt) % 2**32
      self._chunks[key] = self._create(self.name, size=CHUNK, seed=seed, **self.kwargs)
      if len(self._chunks) > _CACHED_CHUNKS:
        self._chunks.popitem(last=False)
    else:
      self._chunks.move_to_end(key)
    return self._chunks[key]

  def _example(self, entry: Mapping[str, Any]) -> base.Example:
    return base.Example(prompt=str(entry["question"]), answer=str(entry["answer"]),
                        metadata=_jsonable(entry.get("metadata", {})))

  def train_example(self, index: int) -> base.Example:
    """Training example at position `index` (see the module docstring for the layout)."""
    index = base.check_index(index)
    chunk, offset = divmod(index, CHUNK)
    return holdout.first_training_draw(
        lambda attempt: self._example(self._chunk("train", chunk, attempt)[offset]),
        lambda e: e.prompt, self.holdout_fraction, f"reasoning-gym {self.name!r}")

  def eval_examples(self, n: int) -> list[base.Example]:
    """`n` distinct held-out examples (the same for every run seed).

    Raises:
      ValueError: fewer than `n` distinct held-out questions exist (see holdout.distinct_held_out).
    """
    n = base.check_count(n, "task.eval_size")
    return holdout.distinct_held_out(
        lambda i: self._example(self._chunk("eval", i // CHUNK, 0)[i % CHUNK]),
        lambda e: e.prompt, self.holdout_fraction, n, f"reasoning-gym {self.name!r}")

  def score(self, response_text: str, example: base.Example) -> base.Score:
    """Verifier score, or the generator's own `score_answer` when scorer="native", clamped to
    [0, 1]; a native NaN, infinity or None is returned as is, for `rewards.score_batch` to count
    and score 0."""
    if self.scorer == "verifier":
      return super().score(response_text, example)
    config = self.verifier_config
    try:
      answer, failure = verifier.find_answer(response_text, config)
      if answer is None:
        return base.Score(0.0, failure, None)
      entry = {"question": example.prompt, "answer": example.answer,
               "metadata": dict(example.metadata)}
      request = dict(op="native", name=self.name, kwargs=_jsonable(self.kwargs), entry=entry,
                     answer=answer)
      response, failure = worker.client().call(request, config.timeout_s)
      if response is None or "error" in response:
        return base.Score(0.0, failure or f"native scorer error: {response['error']}", answer)
      if response.get("refused"):
        return base.Score(0.0, str(response["refused"]), answer)
      reward = response["reward"]
      if reward is None or not math.isfinite(reward):
        # Not clamped (min/max keep a NaN and turn inf into 1): score_batch counts and zeroes it.
        return base.Score(reward, f"native {self.name} score_answer gave {reward!r}", answer)
      return base.Score(min(max(reward, 0.0), 1.0), f"native {self.name} score_answer", answer)
    except Exception as e:  # pylint: disable=broad-except (never raise into the training loop)
      return base.Score(0.0, f"internal scorer error ({type(e).__name__})", None)
