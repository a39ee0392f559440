"""Asynchronous rollouts' bookkeeping with a fake rollout side: the fixed-lag rule, staleness,
the published versions each batch is drawn from, both overlap modes, and the fault paths."""

import threading
import time
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from rlscale.runner import async_rollouts
from rlscale.runner.async_rollouts import (InlineRollouts, Produced, ThreadRollouts,
                                           generation_version, staleness_stats)

MODES = {"thread": ThreadRollouts, "dispatch": InlineRollouts}


def test_generation_version_by_hand():
  assert [generation_version(n, 1) for n in range(5)] == [0, 0, 1, 2, 3]
  assert [generation_version(n, 2) for n in range(5)] == [0, 0, 0, 1, 2]
  assert [generation_version(n, 2, floor=3) for n in range(3, 8)] == [3, 3, 3, 4, 5]


def test_staleness_by_hand():
  # Trained from version 5, rows drawn by versions 3, 4, 5, 3: stale by 2, 1, 0, 2.
  assert staleness_stats(5, np.array([3, 4, 5, 3])) == {"rollout/staleness_mean": 1.25,
                                                         "rollout/staleness_max": 2}


class FakeSide:
  """Replaces `async_rollouts.produce`: records (batch, version, the params' value) and checks
  the params handed over are the published version's (params = jnp.array(version)); prompts
  advance by one per batch. `fail_at`: a batch whose drawing raises `error`; `sleep`: seconds
  each batch takes."""

  def __init__(self, fail_at=None, sleep=0.0):
    self.calls, self.fail_at, self.sleep = [], fail_at, sleep
    self.error = RuntimeError("reward service down")
    self.threads = set()

  def __call__(self, run, params, batch, version, counters, base_key, clock):
    del run, base_key, clock
    self.threads.add(threading.current_thread().name)
    self.calls.append((batch, version, int(params)))
    time.sleep(self.sleep)
    if batch == self.fail_at:
      raise self.error
    after = {"samples": counters["samples"] + 4, "prompts": counters["prompts"] + 1}
    return Produced(batch, version, None, np.full(4, version, np.int32), {"reward/mean": batch},
                    after, {"generation": 0.0, "reward": 0.0})


def _ahead(mode, k, end, *, first=0, restored=(), counters=None):
  return MODES[mode](None, k=k, base_key=None, first=first, end=end,
                     params=jnp.array(first), counters=counters or {"samples": 0, "prompts": 0},
                     restored=list(restored), clock=None)


def _train(ahead, first, end):
  """What the loop does with `ahead`, the update faked: takes batch `step`, lets the rollout
  side work, publishes version step + 1; returns the batches taken."""
  taken = []
  for step in range(first, end):
    taken.append(ahead.take(step))
    ahead.overlap()
    ahead.publish(step + 1, jnp.array(step + 1))
  return taken


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_batch_n_is_drawn_by_version_n_minus_k(monkeypatch, mode, k):
  side = FakeSide()
  monkeypatch.setattr(async_rollouts, "produce", side)
  ahead = _ahead(mode, k, end=7)
  taken = _train(ahead, 0, 7)
  ahead.close()
  want = [max(0, n - k) for n in range(7)]
  assert [p.version for p in taken] == want
  # Each batch was drawn, once and in order, from exactly the published parameters of its version.
  assert side.calls == [(n, v, v) for n, v in enumerate(want)]
  assert [p.counters["prompts"] for p in taken] == list(range(1, 8))
  assert [staleness_stats(n, p.versions)["rollout/staleness_max"]
          for n, p in enumerate(taken)] == [min(n, k) for n in range(7)]
  assert not ahead._params  # pylint: disable=protected-access  # every snapshot released
  assert side.threads == ({"rlscale-rollouts"} if mode == "thread" else {"MainThread"})


@pytest.mark.parametrize("mode", MODES)
def test_in_flight_batches_are_the_next_k(monkeypatch, mode):
  monkeypatch.setattr(async_rollouts, "produce", FakeSide())
  ahead = _ahead(mode, 2, end=6)
  _train(ahead, 0, 3)  # three steps done: batches 3 and 4 (versions 1 and 2) are in flight
  assert [(p.batch, p.version) for p in ahead.in_flight(3)] == [(3, 1), (4, 2)]
  assert ahead.take(3).batch == 3  # still there for the trainer
  _train(ahead, 4, 5)
  assert [(p.batch, p.version) for p in ahead.in_flight(5)] == [(5, 3)]  # none past the end
  ahead.close()


def test_the_thread_draws_ahead_without_being_asked(monkeypatch):
  side = FakeSide()
  monkeypatch.setattr(async_rollouts, "produce", side)
  ahead = _ahead("thread", 1, end=5)
  ahead.take(0)
  ahead.publish(1, jnp.array(1))
  deadline = time.monotonic() + 10
  while len(side.calls) < 3 and time.monotonic() < deadline:
    time.sleep(0.01)
  # Batches 0, 1 (version 0) and 2 (version 1) are drawn; batch 3 waits for version 2.
  assert side.calls == [(0, 0, 0), (1, 0, 0), (2, 1, 1)]
  ahead.close()
  assert not ahead._thread.is_alive()  # pylint: disable=protected-access


@pytest.mark.parametrize("mode", MODES)
def test_resume_with_saved_batches_continues_the_rule(monkeypatch, mode):
  """A run resumed at step 3 with k = 2 and the saved batches 3 and 4 draws batch 5 from
  version 3 (its state) and goes on as an uninterrupted run."""
  side = FakeSide()
  monkeypatch.setattr(async_rollouts, "produce", side)
  saved = [Produced(n, n - 2, None, np.full(4, n - 2, np.int32), {}, {"samples": 4 * (n + 1),
                                                                      "prompts": n + 1}, {})
           for n in (3, 4)]
  state = types.SimpleNamespace(params=jnp.array(3))
  # The trainer's counters are after batch 2; the task stream continues after batch 4.
  with async_rollouts.ahead_of_training(_run(2), mode, first=3, end=7, state=state, base_key=None,
                                        counters={"samples": 12, "prompts": 3}, restored=saved,
                                        clock=None) as ahead:
    taken = _train(ahead, 3, 7)
  assert [p.version for p in taken] == [1, 2, 3, 4]
  assert side.calls == [(5, 3, 3), (6, 4, 4)]
  assert taken[2].counters == {"samples": 24, "prompts": 6}  # after the saved batches'


@pytest.mark.parametrize("mode", MODES)
def test_resume_without_saved_batches_draws_from_the_checkpoint(monkeypatch, mode):
  side = FakeSide()
  monkeypatch.setattr(async_rollouts, "produce", side)
  ahead = _ahead(mode, 2, end=7, first=3)
  assert ahead.floor == 3
  taken = _train(ahead, 3, 7)
  ahead.close()
  assert [p.version for p in taken] == [3, 3, 3, 4]  # max(3, n - 2)


def _within(seconds, fn):
  """fn() in a daemon thread: its result, or its exception re-raised; fails if it takes longer
  than `seconds` (a hang)."""
  out = {}

  def call():
    try:
      out["value"] = fn()
    except BaseException as e:  # pylint: disable=broad-exception-caught
      out["error"] = e
  thread = threading.Thread(target=call, daemon=True)
  thread.start()
  thread.join(seconds)
  assert not thread.is_alive(), f"still waiting after {seconds} s"
  if "error" in out:
    raise out["error"]
  return out["value"]


@pytest.mark.parametrize("mode", MODES)
def test_a_rollout_error_stops_the_trainer_with_that_error(monkeypatch, mode):
  side = FakeSide(fail_at=2)
  monkeypatch.setattr(async_rollouts, "produce", side)
  ahead = _ahead(mode, 1, end=6)
  taken = _within(10, lambda: _train(ahead, 0, 2))  # batches 0 and 1 are fine
  assert [p.batch for p in taken] == [0, 1]
  with pytest.raises(RuntimeError) as raised:
    _within(10, lambda: ahead.take(2))
  assert raised.value is side.error
  with pytest.raises(RuntimeError):  # a checkpoint needing it too
    _within(10, lambda: ahead.in_flight(2))
  _within(10, ahead.close)
  if mode == "thread":
    assert not ahead._thread.is_alive()  # pylint: disable=protected-access
  assert [c[0] for c in side.calls] == [0, 1, 2]  # nothing drawn after the failure


def test_close_does_not_wait_for_versions_never_published(monkeypatch):
  monkeypatch.setattr(async_rollouts, "produce", FakeSide())
  ahead = _ahead("thread", 1, end=5)
  ahead.take(0)
  ahead.take(1)  # batch 2 waits for version 1, which never comes (the run stops here)
  _within(10, ahead.close)
  assert not ahead._thread.is_alive()  # pylint: disable=protected-access


def test_a_close_as_the_next_version_is_published_starts_no_batch(monkeypatch):
  """The thread decides to start a batch under the lock that `close` takes: a close landing in
  the same instant as the publication of the next batch's version (both under one hold of the
  lock here, the thread waiting for it) leaves that batch undrawn, so nothing of the rollout
  side runs once the run has begun tearing down."""
  side = FakeSide()
  monkeypatch.setattr(async_rollouts, "produce", side)
  ahead = _ahead("thread", 1, end=5)
  ahead.take(0)
  ahead.take(1)  # batch 2 waits for version 1
  with ahead._cond:  # pylint: disable=protected-access
    ahead.publish(1, jnp.array(1))
    async_rollouts._Ahead.close(ahead)  # pylint: disable=protected-access  # closed, not joined
  _within(10, ahead.close)
  assert not ahead._thread.is_alive()  # pylint: disable=protected-access
  assert side.calls == [(0, 0, 0), (1, 0, 0)]


@pytest.mark.parametrize("mode", MODES)
def test_a_closed_side_draws_nothing_and_closes_again_at_once(monkeypatch, mode):
  side = FakeSide()
  monkeypatch.setattr(async_rollouts, "produce", side)
  ahead = _ahead(mode, 1, end=5)
  ahead.take(0)
  ahead.take(1)
  ahead.close()
  ahead.publish(1, jnp.array(1))
  ahead.overlap()
  t0 = time.monotonic()
  ahead.close(failed=True)  # the loop closes it, then `ahead_of_training` again
  ahead.close()
  assert time.monotonic() - t0 < 0.5
  assert [c[0] for c in side.calls] == [0, 1]


def _run(k):
  return types.SimpleNamespace(rl_config=ml_collections.ConfigDict({"max_off_policy_steps": k}))


def test_k0_has_no_rollout_side():
  with async_rollouts.ahead_of_training(_run(0), "thread", first=0, end=4, state=None,
                                        base_key=None, counters={}, restored=[],
                                        clock=None) as ahead:
    assert ahead is None


def test_a_failing_trainer_does_not_wait_for_the_batch_in_progress(monkeypatch):
  """The main thread raising (a diverged step, Ctrl-C's second signal) leaves the context at
  once: the rollout thread, 5 s into a batch, is abandoned after at most a second."""
  monkeypatch.setattr(async_rollouts, "produce", FakeSide(sleep=5.0))
  state = types.SimpleNamespace(params=jnp.array(0))

  def fail():
    with async_rollouts.ahead_of_training(_run(1), "thread", first=0, end=4, state=state,
                                          base_key=None, counters={"samples": 0, "prompts": 0},
                                          restored=[], clock=None):
      time.sleep(0.2)  # the thread is drawing batch 0
      raise ValueError("diverged")

  t0 = time.monotonic()
  with pytest.raises(ValueError, match="diverged"):
    _within(10, fail)
  assert time.monotonic() - t0 < 3


def test_an_unknown_overlap_mode_is_refused():
  with pytest.raises(ValueError, match=r"rollout.async_overlap='process' is not one of "
                                       r"\['thread', 'dispatch'\]"):
    with async_rollouts.ahead_of_training(_run(1), "process", first=0, end=4, state=None,
                                          base_key=None, counters={}, restored=[], clock=None):
      pass


def test_step_keys_are_the_synchronous_loops():
  base = jax.random.key(0)
  sample, update = async_rollouts.step_keys(base, 3)
  want = jax.random.split(jax.random.fold_in(base, 3))
  np.testing.assert_array_equal(jax.random.key_data(sample), jax.random.key_data(want[0]))
  np.testing.assert_array_equal(jax.random.key_data(update), jax.random.key_data(want[1]))
