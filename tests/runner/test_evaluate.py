"""Held-out evaluation counts the verifier's verdicts (issue 13 item 1) with one fixed key, and
samples with the rollout's sampling config unless eval.sampling overrides it (issue 22 item 3)."""

import jax
import numpy as np
import pytest

from rlscale import tokenizers
from rlscale.runner.evaluate import Evaluator, eval_sampling, evaluation_key
from rlscale.sampler.decode import Rollout
from rlscale.sampler.strategies import SamplingConfig
from rlscale.tasks import arithmetic, base, rewards, verifier


class _FixedSampler:
  """Answers every prompt with the same response text (samples_per_prompt copies each)."""

  def __init__(self, tokenizer, response, width=24):
    self.tokenizer, self.response, self.width = tokenizer, response, width
    self.samplings = []  # the SamplingConfig of every call

  def __call__(self, params, tokens, mask, rng, *, sampling, samples_per_prompt):
    del params, rng
    self.samplings.append(sampling)
    b = len(tokens) * samples_per_prompt
    ids = self.tokenizer.encode(self.response)
    response = np.full((b, self.width), self.tokenizer.pad_id, np.int32)
    response[:, :len(ids)] = ids
    response_mask = np.zeros((b, self.width), np.int32)
    response_mask[:, :len(ids)] = 1
    prompts = np.repeat(np.asarray(tokens), samples_per_prompt, axis=0)
    return Rollout(tokens=np.concatenate([prompts, response], 1),
                   prompt_mask=np.repeat(np.asarray(mask), samples_per_prompt, axis=0),
                   response_mask=response_mask, logp=np.zeros((b, self.width), np.float32),
                   lengths=np.full((b,), len(ids), np.int32),
                   num_steps=np.full((b,), len(ids), np.int32))


def _evaluate(response, sampling=SamplingConfig(temperature=1.0), sampler=None, **reward):
  task = arithmetic.ArithmeticSource(
      seed=0, verifier_config=verifier.VerifierConfig(extract_order="answer_tag,last_number"))
  task.reward_config = rewards.RewardConfig(**reward)
  tokenizer = tokenizers.load_tokenizer("char")
  examples = [base.Example("3 + 4", "7", {"expression": "3 + 4"})] * 2
  evaluator = Evaluator(task=task, tokenizer=tokenizer,
                        sampler=sampler or _FixedSampler(tokenizer, response),
                        examples=examples, prompt_buckets=(16,), num_devices=1, pass_k=2,
                        sampling=sampling)
  return evaluator(None, evaluation_key(1234))


def test_sampled_metrics_use_the_rollouts_whole_sampling_config_and_greedy_stays_greedy():
  # The evaluator kept only the temperature: top-k 20, top-p 0.9 and min-p 0.05 of the rollout
  # were dropped (SamplingConfig(0.7) = top_k 0, top_p 1, min_p 0) for pass@k.
  rollout = SamplingConfig(temperature=0.7, top_k=20, top_p=0.9, min_p=0.05)
  sampler = _FixedSampler(tokenizers.load_tokenizer("char"), "7")
  _evaluate("7", sampling=eval_sampling(rollout), sampler=sampler)
  assert sampler.samplings == [SamplingConfig(temperature=0.0), rollout]


def test_eval_sampling_overrides_only_the_fields_set():
  rollout = SamplingConfig(temperature=0.7, top_k=20, top_p=0.9, min_p=0.05)
  assert eval_sampling(rollout) == rollout
  assert eval_sampling(rollout, dict(temperature=None, top_k=None, top_p=None, min_p=None)) == rollout
  assert eval_sampling(rollout, dict(top_p=1.0, min_p=0.0)) == SamplingConfig(0.7, 20, 1.0, 0.0)
  assert eval_sampling(rollout, dict(temperature=1.0)) == SamplingConfig(1.0, 20, 0.9, 0.05)
  with pytest.raises(ValueError, match=r"eval\.sampling\.top_p must be a float in \(0, 1\]"):
    eval_sampling(rollout, dict(top_p=0.0))
  with pytest.raises(ValueError, match=r"unknown eval\.sampling field\(s\) \['top_a'\]; allowed: "
                                       "temperature, top_k, top_p, min_p"):
    eval_sampling(rollout, dict(top_a=0.1))


def test_correct_answer_shaped_to_zero_counts_as_correct():
  # "00000007" is 8 tokens: overlong shaping with L_max 8, L_cache 4 gives reward 1 - 1 = 0.
  metrics = _evaluate("00000007", overlong_max_len=8, overlong_cache_len=4)
  assert metrics["eval/mean_reward"] == pytest.approx(0.0)
  assert metrics["eval/greedy_accuracy"] == 1.0
  assert metrics["eval/pass_at_k"] == 1.0 and metrics["eval/sampled_accuracy"] == 1.0


def test_wrong_answer_with_format_reward_counts_as_wrong():
  metrics = _evaluate("<answer>9</answer>", format_weight=1.0)
  assert metrics["eval/mean_reward"] == pytest.approx(1.0)
  assert metrics["eval/greedy_accuracy"] == 0.0
  assert metrics["eval/pass_at_k"] == 0.0 and metrics["eval/sampled_accuracy"] == 0.0


def test_evaluation_key_depends_only_on_the_eval_seed():
  np.testing.assert_array_equal(jax.random.key_data(evaluation_key(1234)),
                                jax.random.key_data(evaluation_key(1234)))
  assert not np.array_equal(jax.random.key_data(evaluation_key(1234)),
                            jax.random.key_data(evaluation_key(1235)))
  with pytest.raises(ValueError, match=r"task\.eval_seed"):
    evaluation_key("1234")


def test_accuracy_noise_by_hand():
  from rlscale.runner.evaluate import accuracy_noise  # pylint: disable=g-import-not-at-top
  # 16 prompts, 0.25 -> 0.25: pooled p = (0.5 * 16 + 1) / 34 = 9/34; 2 sqrt(2 p (1 - p) / 16).
  p = 9 / 34
  assert accuracy_noise(0.25, 0.25, 16) == pytest.approx(2 * np.sqrt(2 * p * (1 - p) / 16))
  # Both 0 still gives a positive noise: p = 1 / 34.
  assert accuracy_noise(0.0, 0.0, 16) == pytest.approx(2 * np.sqrt(2 / 34 * 33 / 34 / 16))
  with pytest.raises(ValueError, match="n=0"):
    accuracy_noise(0.5, 0.5, 0)


def test_accuracy_change_note():
  from rlscale.runner.evaluate import accuracy_change_note  # pylint: disable=g-import-not-at-top
  smoke = accuracy_change_note(0.0625, 0.0625, 16, smoke=True)
  assert smoke.startswith("smoke run: it checks the pipeline") and "no gain beyond noise" in smoke
  assert "0.062 -> 0.062 (+0.000; noise +-" in smoke
  # 0.484 -> 0.770 on 256 prompts: p = (1.254 * 256 + 1) / 514, noise = 0.088.
  assert accuracy_change_note(0.484, 0.770, 256).endswith("a gain beyond noise")
  assert accuracy_change_note(0.50, 0.52, 256).endswith("no change beyond noise")
  assert accuracy_change_note(None, 0.5, 16) == "no held-out accuracy to compare"
