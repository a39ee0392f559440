"""DAPO dynamic sampling in the loop: keep groups with signal, refill, count every sample."""

import types

import numpy as np

from rlscale.runner import loop
from rlscale.sampler.sampler import Rollout


def _generated(scores, round_index, correct=None):
  """A fake round: 2 prompts x 2 samples whose tokens hold the round index (to trace rows);
  verdicts are scores == 1 unless given."""
  b = len(scores)
  rollout = Rollout(tokens=np.full((b, 3), round_index, np.int32), prompt_mask=np.ones((b, 1), np.int32),
                    response_mask=np.ones((b, 2), np.int32), logp=np.zeros((b, 2), np.float32),
                    lengths=np.full((b,), 2, np.int32), num_steps=np.full((b,), 2, np.int32))
  scores = np.asarray(scores, np.float32)
  correct = scores >= 1 if correct is None else np.asarray(correct, bool)
  return loop.Generated(rollout, scores, scores, correct)


def _run(monkeypatch, rounds, dynamic=True):
  calls = iter(rounds)
  monkeypatch.setattr(loop, "_generate_groups",
                      lambda run, state, key, position, phase_totals: next(calls))
  run = types.SimpleNamespace(rl_config=types.SimpleNamespace(
      prompts_per_step=2, group_size=2, dynamic_sampling=dynamic))
  counters = {"samples": 0, "prompts": 0}
  import jax  # pylint: disable=g-import-not-at-top
  generated, stats = loop._collect_rollouts(run, None, jax.random.key(0), counters, {})
  return generated, stats, counters


def test_keeps_groups_with_signal_until_full(monkeypatch):
  rounds = [_generated([1, 1, 0, 1], 0),  # group 0 all correct (dropped), group 1 kept
            _generated([0, 1, 0, 0], 1)]  # group 0 kept -> batch full after 2 rounds
  generated, stats, counters = _run(monkeypatch, rounds)
  np.testing.assert_array_equal(generated.scores, [0, 1, 0, 1])
  np.testing.assert_array_equal(generated.rollout.tokens[:, 0], [0, 0, 1, 1])
  assert counters == {"samples": 8, "prompts": 4}
  assert stats["sampling/rounds"] == 2 and stats["sampling/kept_groups_with_signal"] == 2
  # Statistics cover all 8 generated responses, before the filter.
  assert stats["reward/mean"] == 0.5  # (1+1+0+1 + 0+1+0+0) / 8
  assert stats["groups/with_variance"] == 0.5
  assert stats["tokens/generated"] == 16


def test_refills_with_zero_signal_groups_after_the_last_round(monkeypatch):
  rounds = [_generated([0, 0, 1, 1], r) for r in range(loop.MAX_SAMPLING_ROUNDS)]
  generated, stats, counters = _run(monkeypatch, rounds)
  assert generated.scores.shape == (4,)  # still P x G rows
  assert counters["samples"] == 4 * loop.MAX_SAMPLING_ROUNDS
  assert stats["sampling/kept_groups_with_signal"] == 0


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
