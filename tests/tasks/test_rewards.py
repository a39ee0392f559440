"""score_batch: correctness + format reward + DAPO overlong shaping, worked out by hand."""

import numpy as np
import pytest

from rlscale.tasks import arithmetic
from rlscale.tasks import base
from rlscale.tasks import rewards
from rlscale.tasks import verifier


def _task(order="answer_tag,last_number", **reward):
  task = arithmetic.ArithmeticSource(
      seed=0, verifier_config=verifier.VerifierConfig(extract_order=order))
  task.reward_config = rewards.RewardConfig(**reward)
  return task


def test_overlong_penalty_by_hand():
  # L_max = 16, L_cache = 4: free up to 12, linear to -1 at 16, -1 beyond.
  got = rewards.overlong_penalty(np.array([10, 12, 13, 14, 16, 17, 100]), max_len=16,
                                 cache_len=4)
  np.testing.assert_allclose(got, [0, 0, -0.25, -0.5, -1, -1, -1])
  assert got.dtype == np.float32


def test_score_batch_by_hand():
  task = _task(format_weight=0.5, overlong_max_len=16, overlong_cache_len=4)
  ex7, ex8 = base.Example("3 + 4", "7", {}), base.Example("4 + 4", "8", {})
  responses = ["<answer>7</answer>", "7", "<answer>9</answer>", "it is 7 or 8 but 8",
               "<answer>7</answer>", "\x00"]
  examples = [ex7, ex7, ex7, ex8, ex7, ex7]
  lengths = [18, 1, 18, 14, 13, 1]
  rewards_b, verdicts, infos = rewards.score_batch(task, responses, examples,
                                                   response_lengths=lengths)
  correct = [1, 1, 0, 1, 1, 0]
  np.testing.assert_array_equal(verdicts, np.array(correct, bool))
  assert verdicts.dtype == bool
  fmt = [1, 0, 1, 0, 1, 0]
  overlong = [-1, 0, -1, -0.5, -0.25, 0]
  np.testing.assert_allclose(infos["correct"], correct)
  np.testing.assert_allclose(infos["format"], fmt)
  np.testing.assert_allclose(infos["overlong"], overlong)
  np.testing.assert_allclose(rewards_b, [0.5, 1, -0.5, 0.5, 1.25, 0])
  assert rewards_b.dtype == np.float32 and rewards_b.shape == (6,)
  assert infos["extracted"] == ["7", "7", "9", "8", "7", None]
  assert infos["reason"][2] == "wrong: 9 != 7"


def test_defaults_are_plain_correctness_and_char_lengths():
  task = _task()  # no format reward, no overlong shaping
  ex = base.Example("3 + 4", "7", {})
  r, _, infos = rewards.score_batch(task, ["7", "8", "x" * 40], [ex] * 3)
  np.testing.assert_array_equal(r, [1, 0, 0])
  np.testing.assert_array_equal(infos["format"], 0)
  task = _task(overlong_max_len=16, overlong_cache_len=4)
  r, _, _ = rewards.score_batch(task, ["7", "7" + " " * 13], [ex] * 2)  # 1 and 14 characters
  np.testing.assert_allclose(r, [1, 0.5])


def test_verdict_is_the_verifiers_not_the_shaped_reward():
  """Issue 13 item 1: shaping moves the reward, never the verdict."""
  ex = base.Example("3 + 4", "7", {})
  # Overlong shaping with L_max = 8, L_cache = 4: a correct 8-token answer gets reward 1 - 1 = 0.
  task = _task(overlong_max_len=8, overlong_cache_len=4)
  r, correct, _ = rewards.score_batch(task, ["7"], [ex], response_lengths=[8])
  np.testing.assert_allclose(r, [0.0])
  np.testing.assert_array_equal(correct, [True])
  # format_weight = 1: a wrong, well-formatted answer gets reward 0 + 1 = 1.
  task = _task(format_weight=1.0)
  r, correct, _ = rewards.score_batch(task, ["<answer>9</answer>"], [ex])
  np.testing.assert_allclose(r, [1.0])
  np.testing.assert_array_equal(correct, [False])


def test_partial_credit_is_not_correct():
  class Partial(arithmetic.ArithmeticSource):

    def score(self, response_text, example):
      return base.Score(0.5, "partial", response_text)

  r, correct, _ = rewards.score_batch(Partial(seed=0), ["7"], [base.Example("3 + 4", "7", {})])
  np.testing.assert_allclose(r, [0.5])
  np.testing.assert_array_equal(correct, [False])


def test_never_raises_on_content_and_scores_duplicates_once():
  calls = []

  class Counting(arithmetic.ArithmeticSource):

    def score(self, response_text, example):
      calls.append(response_text)
      if response_text == "boom":
        raise RuntimeError("custom scorer bug")
      return super().score(response_text, example)

  task = Counting(seed=0)
  ex = base.Example("3 + 4", "7", {})
  responses = ["7", "7", None, b"7", "boom", "7" * 100_000, "7"]
  r, _, infos = rewards.score_batch(task, responses, [ex] * len(responses))
  np.testing.assert_array_equal(r, [1, 1, 0, 0, 0, 0, 1])
  assert calls.count("7") == 1
  assert infos["reason"][4] == "scorer error (RuntimeError)"


def test_length_mismatch_is_a_caller_error():
  ex = base.Example("3 + 4", "7", {})
  with pytest.raises(ValueError, match="responses 2, examples 1"):
    rewards.score_batch(_task(), ["7", "7"], [ex])
  with pytest.raises(ValueError, match="response_lengths 3"):
    rewards.score_batch(_task(), ["7"], [ex], response_lengths=[1, 2, 3])


@pytest.mark.parametrize("kwargs, field", [
    (dict(format_weight=-1), "task.format_weight"),
    (dict(overlong_max_len=0, overlong_cache_len=1), "task.overlong_max_len"),
    (dict(overlong_max_len=8), "task.overlong_cache_len"),
    (dict(overlong_max_len=8, overlong_cache_len=9), "task.overlong_cache_len"),
])
def test_reward_config_errors(kwargs, field):
  with pytest.raises(ValueError, match=field):
    rewards.RewardConfig(**kwargs)


def test_overlong_penalty_matches_the_jitted_twin():
  # rlscale.rl.dapo implements the same formula in JAX for the update step; keep them equal.
  dapo = pytest.importorskip("rlscale.rl.dapo")
  lengths = np.arange(0, 40)
  np.testing.assert_allclose(
      rewards.overlong_penalty(lengths, max_len=32, cache_len=8),
      np.asarray(dapo.overlong_penalty(lengths, max_len=32, buffer_len=8)), atol=1e-6)


class _NaNScorer(arithmetic.ArithmeticSource):
  """Scores "nan" as NaN, "none" as None, "inf" as +inf, and otherwise as the verifier does."""

  def score(self, response_text, example):
    special = {"nan": float("nan"), "none": None, "inf": float("inf")}
    if response_text in special:
      return base.Score(special[response_text], "broken custom scorer", None)
    return super().score(response_text, example)


def test_nonfinite_reward_is_counted_warned_once_and_scored_zero():
  task = _NaNScorer(seed=0)
  ex = base.Example("3 + 4", "7", {})
  with pytest.warns(rewards.NonFiniteRewardWarning) as caught:
    r, correct, infos = rewards.score_batch(task, ["nan", "7", "8", "7"], [ex] * 4)
  np.testing.assert_array_equal(r, [0, 1, 0, 1])  # was [nan, 1, 0, 1]
  np.testing.assert_array_equal(correct, [False, True, False, True])
  np.testing.assert_array_equal(infos["nonfinite"], [True, False, False, False])
  assert len(caught) == 1
  message = str(caught[0].message)
  assert "_NaNScorer" in message and "row 0" in message and "'3 + 4'" in message
  assert "reward/nonfinite_frac" in message and infos["reason"][0] == "non-finite reward nan scored 0"
  # None and infinities count too; the same task is not warned about again.
  import warnings  # pylint: disable=g-import-not-at-top
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    r, _, infos = rewards.score_batch(task, ["7", "none", "inf", "nan"], [ex] * 4)
  np.testing.assert_array_equal(r, [1, 0, 0, 0])
  np.testing.assert_array_equal(infos["nonfinite"], [False, True, True, True])


def test_grpo_on_a_group_with_a_nan_reward_is_grpo_on_zero():
  adv = pytest.importorskip("rlscale.rl.advantages")
  ex = base.Example("3 + 4", "7", {})
  with pytest.warns(rewards.NonFiniteRewardWarning):
    r, _, _ = rewards.score_batch(_NaNScorer(seed=0), ["nan", "7", "8", "7"], [ex] * 4)
  # GRPO on [0, 1, 0, 1]: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.5774, so
  # A = +-0.5 / 0.5774 = +-0.866 (on [nan, 1, 0, 1] every advantage of the group was NaN).
  np.testing.assert_allclose(adv.grpo(r, group_size=4), [-0.866, 0.866, -0.866, 0.866],
                             atol=1e-3)


def test_nonfinite_reward_error_mode_names_the_row():
  task = _NaNScorer(seed=0)
  task.reward_config = rewards.RewardConfig(nonfinite_reward="error")
  ex = base.Example("3 + 4", "7", {})
  with pytest.raises(rewards.NonFiniteRewardError,
                     match=r"returned reward None for row 2 .*task.nonfinite_reward='error'"):
    rewards.score_batch(task, ["7", "8", "none", "nan"], [ex] * 4)
  assert issubclass(rewards.NonFiniteRewardError, ValueError)  # one line `error:` on the CLI
  with pytest.raises(ValueError, match=r"task.nonfinite_reward='raise'; allowed values: zero, "
                                       r"error \(None = zero\)"):
    rewards.RewardConfig(nonfinite_reward="raise")
