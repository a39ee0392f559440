"""Task sources: reasoning-gym stream determinism, held-out disjointness, templates, scorers."""

import hashlib

import pytest
import reasoning_gym

from rlscale.tasks import arithmetic
from rlscale.tasks import base
from rlscale.tasks import holdout
from rlscale.tasks import reasoning_gym_source

KWARGS = dict(min_terms=2, max_terms=3, min_digits=1, max_digits=1)


def _chain_sum(seed=0, **kw):
  return reasoning_gym_source.ReasoningGymSource("chain_sum", KWARGS, seed=seed, **kw)


@pytest.fixture(scope="module")
def chain_sum():
  return _chain_sum()


def test_position_matches_reasoning_gym_item_computed_here(chain_sum):
  # Position 1003 = chunk 1, offset 3, attempt 0 unless that item is held out.
  seed = holdout.stable_seed(0, "train", "chain_sum", 1, 0) % 2**32
  item = reasoning_gym.create_dataset("chain_sum", size=1000, seed=seed, **KWARGS)[3]
  assert not holdout.is_held_out(item["question"], 0.1)  # true for this seed; else attempt 1
  example = chain_sum.train_example(1003)
  assert (example.prompt, example.answer) == (item["question"], item["answer"])
  assert example.metadata["expression"] == item["metadata"]["expression"]


def test_stream_is_a_function_of_seed_and_position(chain_sum):
  fresh = _chain_sum()
  order = [2500, 7, 1999, 0, 7]  # random access, repeats, several chunks
  assert [fresh.train_example(i) for i in order] == [chain_sum.train_example(i) for i in order]
  assert [_chain_sum().train_example(i) for i in range(50)] == [
      chain_sum.train_example(i) for i in range(50)]
  other = [_chain_sum(seed=1).train_example(i).prompt for i in range(50)]
  assert other != [chain_sum.train_example(i).prompt for i in range(50)]


def test_held_out_set_is_disjoint_distinct_and_seed_independent(chain_sum):
  eval_set = chain_sum.eval_examples(128)
  questions = [e.prompt for e in eval_set]
  assert len(set(questions)) == 128
  assert all(holdout.is_held_out(q, 0.1) for q in questions)
  train = {chain_sum.train_example(i).prompt for i in range(5000)}
  assert len(train) > 1000  # most of the ~4,200-question space is seen in 5,000 draws
  assert not train & set(questions)
  assert [e.prompt for e in _chain_sum(seed=7).eval_examples(128)] == questions


def test_small_question_space_reports_eval_size():
  tiny = reasoning_gym_source.ReasoningGymSource(
      "chain_sum", dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1), seed=0)
  with pytest.raises(ValueError, match="task.eval_size"):
    tiny.eval_examples(150)  # 200 questions in all, about 20 held out


def test_prompt_template_and_targets_round_trip(chain_sum):
  example = chain_sum.train_example(0)
  assert example.prompt.startswith("State the final answer")
  short = _chain_sum(prompt_template="{metadata[expression]} =")
  assert short.format_prompt(example) == example.metadata["expression"] + " ="
  assert chain_sum.format_prompt(example) == example.prompt
  for template in ("{answer}", "<answer>{answer}</answer>", r"\boxed{{{answer}}}",
                   "work\n#### {answer}"):
    task = _chain_sum(target_template=template)
    for i in range(20):
      ex = task.train_example(i)
      score = task.score(task.format_target(ex), ex)
      assert score.reward == 1.0 and score.extracted == ex.answer, (template, score)


def test_template_errors():
  with pytest.raises(ValueError, match="allowed fields: question, metadata"):
    _chain_sum(prompt_template="{answer} =")
  with pytest.raises(ValueError, match="task.target_template"):
    _chain_sum(target_template="{answer")
  task = _chain_sum(prompt_template="{metadata[nope]}")
  with pytest.raises(ValueError, match="needs 'nope'"):
    task.format_prompt(task.train_example(0))


def test_native_scorer_gives_partial_credit(chain_sum):
  task = _chain_sum(scorer="native")
  example = base.Example("q", "6", {})
  # chain_sum's compute_decimal_reward: Decimal equality, else len(answer)/len(response).
  assert task.score("6.00", example).reward == 1.0
  assert task.score("<answer>66</answer>", example).reward == 0.5
  assert chain_sum.score("<answer>66</answer>", example).reward == 0.0


@pytest.mark.parametrize("native_reward, expected", [
    (float("nan"), None), (float("inf"), None), (None, None), (1.5, 1.0), (-0.5, 0.0)])
def test_native_non_finite_reward_reaches_score_batch_unclamped(monkeypatch, native_reward,
                                                               expected):
  # min(max(nan, 0), 1) is nan and min(max(inf, 0), 1) is 1: the clamp let NaN through and turned
  # an infinity into full marks. Now a non-finite or None native reward is returned as it is, and
  # score_batch counts it and scores it 0; finite rewards are still clamped to [0, 1].
  from rlscale.tasks import rewards  # pylint: disable=g-import-not-at-top
  from rlscale.tasks import worker  # pylint: disable=g-import-not-at-top

  class Client:
    def preload(self, request):
      pass

    def call(self, request, timeout_s):
      return {"reward": native_reward}, ""

  monkeypatch.setattr(worker, "client", Client)
  task = _chain_sum(scorer="native")
  example = base.Example("q", "6", {})
  score = task.score("<answer>6</answer>", example)
  if expected is not None:
    assert score.reward == expected
    return
  assert score.reward is native_reward  # passed on unclamped
  with pytest.warns(rewards.NonFiniteRewardWarning, match="ReasoningGymSource 'chain_sum'"):
    r, _, infos = rewards.score_batch(task, ["<answer>6</answer>"], [example])
  assert r.tolist() == [0.0] and infos["nonfinite"].tolist() == [True]


def test_bad_arguments():
  with pytest.raises(ValueError, match="not a reasoning-gym generator; choose from .*chain_sum"):
    reasoning_gym_source.ReasoningGymSource("nope", {}, seed=0)
  with pytest.raises(ValueError, match="allowed values: verifier, native"):
    _chain_sum(scorer="sympy")
  with pytest.raises(ValueError, match="rejected by reasoning-gym"):
    reasoning_gym_source.ReasoningGymSource("chain_sum", {"min_terms": 0}, seed=0)
  with pytest.raises(ValueError, match="holdout_fraction"):
    _chain_sum(holdout_fraction=0.9)
  with pytest.raises(ValueError, match="non-negative int"):
    _chain_sum().train_example(-1)
  with pytest.raises(ValueError, match="task.eval_size must be a positive int"):
    _chain_sum().eval_examples(0)


def _value(question):
  # The generator's own trusted text, evaluated with no builtins to check its answers.
  return eval(question, {"__builtins__": {}})  # pylint: disable=eval-used


def test_arithmetic_answers_and_determinism():
  task = arithmetic.ArithmeticSource(seed=3, num_operands=3, operators="+-*", max_operand=20)
  examples = [task.train_example(i) for i in range(200)]
  assert all(int(e.answer) == _value(e.prompt) for e in examples)
  assert examples[:5] == [arithmetic.ArithmeticSource(
      seed=3, num_operands=3, operators="+-*", max_operand=20).train_example(i) for i in range(5)]
  assert task.format_prompt(examples[0]) == examples[0].prompt + " ="
  eval_set = task.eval_examples(50)
  assert not {e.prompt for e in eval_set} & {e.prompt for e in examples}
  assert all(holdout.is_held_out(e.prompt, 0.1) for e in eval_set)
  product = arithmetic.ArithmeticSource(seed=0, operators="*", min_operand=2, max_operand=5)
  ex = product.train_example(0)
  assert int(ex.answer) == ex.metadata["operands"][0] * ex.metadata["operands"][1]


@pytest.mark.parametrize("kwargs, field", [
    (dict(min_operand=5, max_operand=2), "min_operand"), (dict(num_operands=1), "num_operands"),
    (dict(operators="/"), "operators"), (dict(operators=""), "operators"),
])
def test_arithmetic_bad_arguments(kwargs, field):
  with pytest.raises(ValueError, match=field):
    arithmetic.ArithmeticSource(seed=0, **kwargs)


def test_stable_seed_and_holdout_are_reproducible():
  # Independent of Python's salted hash(): sha256 of the repr, first 8 bytes, top 63 bits.
  digest = hashlib.sha256(repr((0, "train", 1)).encode()).digest()
  assert holdout.stable_seed(0, "train", 1) == int.from_bytes(digest[:8], "big") >> 1
  assert holdout.stable_seed(0, "train", 1) != holdout.stable_seed(1, "train", 1)
  question_digest = hashlib.sha256(b"2 + 3").digest()
  expected = int.from_bytes(question_digest[:8], "big") < 0.1 * 2**64
  assert holdout.is_held_out("2 + 3", 0.1) == expected
  share = sum(holdout.is_held_out(str(i), 0.1) for i in range(20000)) / 20000
  assert 0.09 < share < 0.11
