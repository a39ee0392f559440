"""DAPO dynamic sampling in the loop: keep groups with signal, refill, count every sample."""

import types

import numpy as np
import pytest

from rlscale.runner import rollouts, update_batch
from rlscale.runner.hosts import Hosts
from rlscale.sampler.decode import Rollout


def _generated(scores, round_index, correct=None):
  """A fake round: 2 prompts x 2 samples whose tokens hold the round index (to trace rows);
  verdicts are scores == 1 unless given."""
  b = len(scores)
  rollout = Rollout(tokens=np.full((b, 3), round_index, np.int32), prompt_mask=np.ones((b, 1), np.int32),
                    response_mask=np.ones((b, 2), np.int32), logp=np.zeros((b, 2), np.float32),
                    lengths=np.full((b,), 2, np.int32), num_steps=np.full((b,), 2, np.int32))
  scores = np.asarray(scores, np.float32)
  correct = scores >= 1 if correct is None else np.asarray(correct, bool)
  return rollouts.Generated(rollout, scores, scores, correct)


def _run(monkeypatch, rounds, dynamic=True):
  calls = iter(rounds)
  monkeypatch.setattr(rollouts, "generate_groups",
                      lambda run, state, key, position, phase_totals: next(calls))
  run = types.SimpleNamespace(rl_config=types.SimpleNamespace(
      prompts_per_step=2, group_size=2, dynamic_sampling=dynamic), hosts=Hosts())
  counters = {"samples": 0, "prompts": 0}
  import jax  # pylint: disable=g-import-not-at-top
  generated, stats = rollouts.collect_rollouts(run, None, jax.random.key(0), counters, {})
  return generated, stats, counters


def test_keeps_groups_with_signal_until_full(monkeypatch):
  rounds = [_generated([1, 1, 0, 1], 0),  # group 0 all correct (dropped), group 1 kept
            _generated([0, 1, 0, 0], 1)]  # group 0 kept -> batch full after 2 rounds
  generated, stats, counters = _run(monkeypatch, rounds)
  np.testing.assert_array_equal(generated.scores, [0, 1, 0, 1])
  np.testing.assert_array_equal(generated.rollout.tokens[:, 0], [0, 0, 1, 1])
  assert counters == {"samples": 8, "prompts": 4}
  assert stats["sampling/rounds"] == 2 and stats["sampling/kept_groups_with_signal"] == 2
  assert stats["sampling/out_of_rounds"] == 0
  # Statistics cover all 8 generated responses, before the filter.
  assert stats["reward/mean"] == 0.5  # (1+1+0+1 + 0+1+0+0) / 8
  assert stats["groups/with_variance"] == 0.5
  assert stats["tokens/generated"] == 16


def test_refills_with_zero_signal_groups_after_the_last_round(monkeypatch):
  rounds = [_generated([0, 0, 1, 1], r) for r in range(rollouts.MAX_SAMPLING_ROUNDS)]
  generated, stats, counters = _run(monkeypatch, rounds)
  assert generated.scores.shape == (4,)  # still P x G rows
  assert counters["samples"] == 4 * rollouts.MAX_SAMPLING_ROUNDS
  assert stats["sampling/kept_groups_with_signal"] == 0
  assert stats["sampling/out_of_rounds"] == 1  # counted in metrics.jsonl (and warned once)


def test_without_dynamic_sampling_one_round(monkeypatch):
  generated, stats, counters = _run(monkeypatch, [_generated([1, 1, 0, 0], 0)], dynamic=False)
  np.testing.assert_array_equal(generated.scores, [1, 1, 0, 0])
  assert counters == {"samples": 4, "prompts": 2} and stats["sampling/rounds"] == 1


def test_filter_uses_verdicts_not_shaped_rewards(monkeypatch):
  # Round 0: group 0's shaped rewards vary (format reward 1 on a wrong answer) but both responses
  # are wrong -> no correctness signal, dropped; group 1 is one right, one wrong (shaped to 0 by
  # overlong shaping) -> kept although its rewards are equal.
  rounds = [_generated([1, 0, 0, 0], 0, correct=[False, False, True, False]),
            _generated([0, 0, 1, 0], 1, correct=[False, False, True, False])]
  generated, stats, _ = _run(monkeypatch, rounds)
  np.testing.assert_array_equal(generated.rollout.tokens[:, 0], [0, 0, 1, 1])
  np.testing.assert_array_equal(generated.correct, [True, False, True, False])
  assert stats["sampling/kept_groups_with_signal"] == 2
  assert stats["reward/accuracy"] == 0.25


def _mask_run(mask_truncated=False, eos_ids=(9,)):
  return types.SimpleNamespace(rl_config=types.SimpleNamespace(mask_truncated=mask_truncated),
                               sampler=types.SimpleNamespace(eos_ids=eos_ids))


def test_filler_groups_are_masked_out_of_the_loss_but_counted(monkeypatch):
  # Round 0 has one group with signal; the later rounds none: the batch is that group plus the
  # first zero-signal group as filler, which the loss mask removes (issue 13 item 6).
  rounds = [_generated([1, 0, 1, 1], 0)] + [
      _generated([0, 0, 1, 1], r) for r in range(1, rollouts.MAX_SAMPLING_ROUNDS)]
  generated, stats, counters = _run(monkeypatch, rounds)
  np.testing.assert_array_equal(generated.scores, [1, 0, 1, 1])
  np.testing.assert_array_equal(generated.filler, [False, False, True, True])
  assert counters["samples"] == 4 * rollouts.MAX_SAMPLING_ROUNDS  # every sample still counts
  assert stats["sampling/kept_groups_with_signal"] == 1
  loss_mask, mask_stats = update_batch.loss_mask_of(_mask_run(), generated)
  np.testing.assert_array_equal(loss_mask, [[1, 1], [1, 1], [0, 0], [0, 0]])
  assert mask_stats["loss_mask/filler_frac"] == 0.5 and mask_stats["loss_mask/truncated_frac"] == 0


def test_groups_with_signal_are_not_filler(monkeypatch):
  generated, _, _ = _run(monkeypatch, [_generated([1, 0, 0, 1], 0)])
  np.testing.assert_array_equal(generated.filler, [False] * 4)
  generated, _, _ = _run(monkeypatch, [_generated([1, 1, 0, 0], 0)], dynamic=False)
  assert update_batch.loss_mask_of(_mask_run(), generated)[0].min() == 1  # truncated, but not asked


@pytest.mark.parametrize("mask_truncated", [False, True])
def test_truncated_responses_are_masked_only_when_asked(mask_truncated):
  # Responses (Tr = 3, EOS 9): ended by EOS, cut at the limit, ended by EOS at the limit, cut.
  response = np.array([[4, 9, 0], [4, 5, 6], [4, 5, 9], [5, 5, 5]], np.int32)
  response_mask = np.array([[1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 1, 1]], np.int32)
  rollout = Rollout(tokens=np.concatenate([np.ones((4, 2), np.int32), response], 1),
                    prompt_mask=np.ones((4, 2), np.int32), response_mask=response_mask,
                    logp=np.zeros((4, 3), np.float32), lengths=response_mask.sum(1),
                    num_steps=np.full((4,), 3, np.int32))
  generated = rollouts.Generated(rollout, np.zeros(4, np.float32), np.zeros(4, np.float32),
                             np.zeros(4, bool))
  loss_mask, stats = update_batch.loss_mask_of(_mask_run(mask_truncated), generated)
  expected = response_mask.copy()
  if mask_truncated:
    expected[[1, 3]] = 0
  np.testing.assert_array_equal(loss_mask, expected)
  assert stats["response/truncated_frac"] == 0.5
  assert stats["loss_mask/truncated_frac"] == (0.5 if mask_truncated else 0.0)
