"""Asynchronous rollouts: the next batches are drawn while the trainer updates, from parameters
at most k = rl.max_off_policy_steps updates old (k = 0 is the synchronous `rl_step`, unchanged).

The fixed-lag rule. Policy version v is the parameters after v updates (the warm start is
version 0; after RL step t the state is version t). Batch n (0-based; RL step n + 1 trains on
it) is drawn by version

  version(n) = max(0, n - k)

whatever the threads' timing: its sampling key is the synchronous loop's (`step_keys`: from
fold_in(seed key, n)), its prompts follow batch n - 1's in the task stream, and its parameters
are exactly version n - k's, a snapshot the trainer publishes after update n - k. So a run at k
is reproducible from its seed, and each sample is min(n, k) updates stale when trained on
(`staleness_stats`: the version the update starts from, n, minus the version that drew it;
logged as rollout/staleness_mean and rollout/staleness_max, with rollout/policy_version). As
the field's "fixed lag" implementations do, the sampler never uses a fresher version even when
one is ready, which is what makes the rule deterministic. The update's keys are the synchronous
loop's too, so step 1 of any k equals step 1 of k = 0 with the same correction.

Overlap on one device (rollout.async_overlap):
- "thread" (`ThreadRollouts`): a rollout thread draws batch n + k from version n while the main
  thread runs update n (XLA releases the GIL while it runs; the host's reward work overlaps too).
- "dispatch" (`InlineRollouts`): one thread; update n is dispatched (JAX returns before XLA
  finishes), batch n + k is drawn in the main thread, then the update's metrics are fetched.
Which pays on a 2-core CPU: see the `rollout.async_overlap` comment in
experiments/configs/default.py (measured with benchmarks/async_rollouts.py).

Time: an asynchronous step's time/generation is what the main thread spent on generation that
the update did not hide (the wait for its batch, or "dispatch"'s inline generation), so the
parts still sum to wall/total; the rollout side's own seconds per batch are
rollout/generation_seconds and rollout/reward_seconds, the wait rollout/wait_seconds.

Checkpoints (`inflight`): a checkpoint after step t holds the state (version t) and the in-flight
batches t .. t + k - 1, drawn from versions t - k .. t - 1 (which it does not keep), with their
records and the task-stream counters after them. Batch t + k onwards needs version t or later,
the checkpoint's own state, so a resumed run continues exactly as an uninterrupted one. Writing
the checkpoint waits for those k batches (they are being drawn anyway). A checkpoint without
them (a finished run's last one, extended by raising train.total_steps) resumes with version(n)
= max(t, n - k): the first new batches come from the checkpointed policy.

Ctrl-C (`rlscale.runner.interrupts`): the running step finishes; the checkpoint waits for and
saves the in-flight batches t .. t + k - 1; a batch being drawn from version t is let finish
(the thread is joined: no thread outlives the run) and discarded, and the resumed run draws it
again, identically. A second Ctrl-C stops at once, as always.

Teardown order: the loop closes the rollout side (`close`) as soon as its last step is done,
before it closes the checkpointer and the metrics log or exports the policy, and the thread
decides to start a batch under the lock `close` takes, so once `close` has run no batch is
started: no work of the rollout side (sampler, reward) meets an executor the teardown or the
interpreter's exit has shut down ("cannot schedule new futures after shutdown").

Faults: an exception on the rollout side (sampler, task, reward) is re-raised in the main thread
when the trainer asks for that batch or a checkpoint needs it, so the run stops with that error
(the steps before it are logged); the rollout thread ends with it. An exception in the main
thread stops the rollout thread at its next wait and does not wait for the batch in progress.

One process only: with several, the collectives of two threads would have to be ordered alike
on every process (refused by `hosts.check_rl_config`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Iterator, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from rlscale.runner.rl_step import finish_update, start_update
from rlscale.runner.rollouts import Generated, collect_rollouts
from rlscale.runner.timing import RunClock

OVERLAP_MODES = ("thread", "dispatch")
# Seconds an exception in the main thread waits for the rollout thread to end before it is left
# to finish its batch alone (a daemon thread: the process does not wait for it).
_ABANDON_AFTER_S = 1.0


def generation_version(batch: int, k: int, floor: int = 0) -> int:
  """The policy version that draws batch `batch` (0-based) under the fixed-lag rule:
  max(floor, batch - k). `floor`: 0, or the step a run resumed at without saved in-flight
  batches (module docstring)."""
  return max(floor, batch - k)


def staleness_stats(version_now: int, versions: np.ndarray) -> dict[str, float]:
  """rollout/staleness_mean and rollout/staleness_max of a batch trained from policy version
  `version_now` whose rows were drawn by versions [B] int (each row's staleness: version_now -
  its version, in updates)."""
  stale = version_now - np.asarray(versions, np.int64)
  return {"rollout/staleness_mean": float(stale.mean()), "rollout/staleness_max": int(stale.max())}


def step_keys(base_key: jax.Array, step: int) -> tuple[jax.Array, jax.Array]:
  """(sampling key, update key) of batch / step index `step` (0-based), as `loop` and `rl_step`
  derive them: split(fold_in(base_key, step))."""
  sample_key, update_key = jax.random.split(jax.random.fold_in(base_key, step))
  return sample_key, update_key


class Produced(NamedTuple):
  """One rollout batch drawn ahead of its update.

  Attributes:
    batch: n, its index (0-based; RL step n + 1 trains on it).
    version: the policy version whose parameters drew it (`generation_version`).
    generated: the `rollouts.Generated` batch (host numpy rows).
    versions: [B] int32, the version that drew each row (all `version`).
    stats: `rollouts.collect_rollouts`'s record of it (reward/*, response/*, sampling/*...).
    counters: {"samples", "prompts"}: responses generated and prompts drawn after it.
    seconds: {"generation", "reward"}: seconds the rollout side spent on it (compilation apart).
  """
  batch: int
  version: int
  generated: Generated
  versions: np.ndarray
  stats: dict
  counters: dict
  seconds: dict


class _Policy(NamedTuple):
  """A published version's parameters, as `collect_rollouts` reads a state (`.params`)."""
  params: Any


def produce(run, params, batch: int, version: int, counters: dict, base_key: jax.Array,
            clock: RunClock) -> Produced:
  """Draws and scores batch `batch` with `params` (version `version`): `collect_rollouts` with
  the batch's synchronous sampling key, from the task-stream position `counters` (not changed:
  the Produced holds the counters after it); generation and reward timed on `clock`."""
  counters = dict(counters)
  before = clock.totals
  generated, stats = collect_rollouts(run, _Policy(params), step_keys(base_key, batch)[0],
                                      counters, clock)
  after = clock.totals
  rows = len(generated.rewards)
  return Produced(batch, version, generated, np.full(rows, version, np.int32), stats, counters,
                  {part: after[part] - before[part] for part in ("generation", "reward")})


def snapshot(params) -> Any:
  """A copy of `params` on their devices, which the next update cannot donate away."""
  copy = jax.tree.map(jnp.copy, params)
  return jax.block_until_ready(copy)


class _Ahead:
  """Bookkeeping shared by the overlap modes: published parameter versions, batches drawn and
  not yet trained on, the rollout side's error.

  Args:
    run: `roles.Run`. k: rl.max_off_policy_steps >= 1. base_key: the run's seed key.
    first: the next batch to train on (the step the run is at). end: total steps (no batch n >=
      end is drawn). params: the current state's params (version `first`). counters: the task
      stream position after the last batch drawn (after `restored`'s last, when any).
    restored: in-flight batches first .. first + len - 1 from a checkpoint (`inflight`).
    clock: the RunClock the rollout side times itself on.
  """

  def __init__(self, run, *, k: int, base_key, first: int, end: int, params, counters: dict,
               restored: list[Produced], clock: RunClock):
    self.run, self.k, self.base_key, self.end = run, k, base_key, end
    self._clock = clock
    self._counters = dict(counters)
    self._done = {p.batch: p for p in restored}
    self._next = first + len(restored)  # the next batch to draw
    # Saved in-flight batches keep the rule exact; without them (see the module docstring) the
    # batches still to draw from older versions come from this one.
    self.floor = 0 if len(restored) == min(k, end - first) else first
    self._params: dict[int, Any] = {}
    self._error: Optional[BaseException] = None
    self._cond = threading.Condition()
    # Set (under _cond) by `close`: from then on no batch is started, so nothing of the rollout
    # side (the sampler, its host thread pool, the reward) is called once the run tears down.
    self._closed = False
    if self._next < end:
      self._params[generation_version(self._next, k, self.floor)] = snapshot(params)

  def needed(self, version: int) -> bool:
    """Whether a batch still to draw is drawn by `version`."""
    last = self.end - 1
    return self._next <= last and generation_version(last, self.k, self.floor) >= version >= \
        generation_version(self._next, self.k, self.floor)

  def publish(self, version: int, params) -> None:
    """Hands the parameters of `version` (after update `version`) to the rollout side, as a
    snapshot, when a batch still to draw needs them."""
    with self._cond:
      needed = self.needed(version)
    if needed:
      copy = snapshot(params)
      with self._cond:
        self._params[version] = copy
        self._cond.notify_all()

  def _claim(self) -> Optional[tuple[int, int, Any]]:
    """(batch, version, params) of the next batch to draw, or None when the side is closed, no
    batch is left or its version is not published. Called with _cond held: the decision to
    start a batch and `close` are ordered by the lock, so a closed side never starts one."""
    n = self._next
    if self._closed or n >= self.end:
      return None
    version = generation_version(n, self.k, self.floor)
    params = self._params.get(version)
    return None if params is None else (n, version, params)

  def _draw_batch(self, n: int, version: int, params) -> None:
    """Draws and records batch n (claimed by `_claim`). Called by one thread only (the rollout
    thread, or the main thread inline)."""
    produced = produce(self.run, params, n, version, self._counters, self.base_key, self._clock)
    with self._cond:
      self._counters = produced.counters
      self._done[n] = produced
      self._next = n + 1
      # Versions no batch still to draw needs are dropped (their memory freed).
      for old in [v for v in self._params if v < generation_version(n + 1, self.k, self.floor)]:
        del self._params[old]
      self._cond.notify_all()

  def _draw_next(self) -> bool:
    """Draws the next batch if its version is published; False when it is not (or none is
    left, or the side is closed)."""
    with self._cond:
      claimed = self._claim()
    if claimed is None:
      return False
    self._draw_batch(*claimed)
    return True

  def _wait_for(self, batches: range) -> None:
    """Blocks until every batch of `batches` is drawn; raises the rollout side's error first."""
    with self._cond:
      while not all(n in self._done for n in batches):
        if self._error is not None:
          raise self._error
        self._cond.wait()

  def take(self, n: int) -> Produced:
    """Batch n, removed from the in-flight ones (waits for it)."""
    self._wait_for(range(n, n + 1))
    with self._cond:
      return self._done.pop(n)

  def in_flight(self, step: int) -> list[Produced]:
    """The batches a checkpoint after `step` steps keeps: step .. step + k - 1 (fewer at the
    end), waited for; the rollout side's error raised instead."""
    batches = range(step, min(step + self.k, self.end))
    self._wait_for(batches)
    with self._cond:
      return [self._done[n] for n in batches]

  def overlap(self) -> None:
    """Work to do while an update runs (`InlineRollouts`); nothing by default."""

  def close(self, failed: bool = False) -> None:  # pylint: disable=unused-argument
    """Stops the rollout side (`failed`: the main thread is raising): no batch is started after
    it. Idempotent (the loop closes it before its teardown, `ahead_of_training` again)."""
    with self._cond:
      self._closed = True
      self._cond.notify_all()


class ThreadRollouts(_Ahead):
  """`_Ahead` with a daemon rollout thread drawing the batches in order, each as soon as its
  version is published. The thread times itself on a RunClock of its own (the main thread's
  parts must not overlap)."""

  def __init__(self, run, **kwargs):
    kwargs["clock"] = RunClock()
    super().__init__(run, **kwargs)
    self._thread = threading.Thread(target=self._work, daemon=True, name="rlscale-rollouts")
    self._thread.start()

  def _work(self) -> None:
    try:
      while True:
        with self._cond:
          # Waits for the next batch's version; the batch is claimed under the same hold of the
          # lock that saw the side open, so once `close` has run no batch is started.
          while (claimed := self._claim()) is None and not self._closed and (
              self._next < self.end):
            self._cond.wait()
          if claimed is None:
            return
        self._draw_batch(*claimed)
    except BaseException as error:  # pylint: disable=broad-exception-caught
      with self._cond:
        self._error = error
        self._cond.notify_all()

  def close(self, failed: bool = False) -> None:
    """Asks the thread to stop and joins it: after its batch in progress (discarded) when the
    run ends normally, at most _ABANDON_AFTER_S seconds when `failed` (once: a second close,
    `ahead_of_training`'s after the loop's, does not wait for an abandoned thread again)."""
    with self._cond:
      again = self._closed
    super().close(failed)
    self._thread.join((0 if again else _ABANDON_AFTER_S) if failed else None)


class InlineRollouts(_Ahead):
  """`_Ahead` drawing in the main thread: `overlap` (called while an update runs, dispatched but
  not fetched) draws every batch whose version is published, and a batch the trainer or a
  checkpoint asks for is drawn then if still missing. An exception while drawing is kept and
  raised when that batch is asked for, as the rollout thread's is (the step running finishes)."""

  def _draw(self, until: Optional[int] = None) -> None:
    """Draws the published batches in order (up to batch `until` when given), keeping the first
    exception (KeyboardInterrupt and other BaseExceptions propagate at once)."""
    try:  # (a closed side draws nothing: `_draw_next` is then False)
      while self._error is None and (until is None or until not in self._done) and (
          self._draw_next()):
        pass
    except Exception as error:  # pylint: disable=broad-exception-caught
      self._error = error

  def _ready(self, batches: range) -> None:
    """Raises instead of waiting (no other thread would wake it) when a batch of `batches` was
    not drawn for want of its version: a caller out of the loop's order."""
    missing = [n for n in batches if n not in self._done]
    if missing and self._error is None:
      raise RuntimeError(f"rollout batches {missing} wait for a policy version not published "
                         f"yet (published: {sorted(self._params)})")

  def take(self, n: int) -> Produced:
    self._draw(until=n)
    self._ready(range(n, n + 1))
    return super().take(n)

  def in_flight(self, step: int) -> list[Produced]:
    self._draw()
    self._ready(range(step, min(step + self.k, self.end)))
    return super().in_flight(step)

  def overlap(self) -> None:
    self._draw()


def async_step(ahead: _Ahead, state, step: int, counters: dict, clock: RunClock
               ) -> tuple[dict, Any]:
  """RL step `step` + 1 on batch `step` drawn ahead (`rl_step`'s asynchronous twin).

  Waits for the batch (time/generation), builds its update batch and dispatches the update
  (training), lets `ahead` draw while the update runs (`overlap`), fetches the metrics
  (training), publishes the new version (`step` + 1) to the rollout side, and sets `counters`
  to the task-stream position after the batch.
  Returns (metrics record of Python numbers, new state)."""
  run = ahead.run
  t0 = time.perf_counter()
  with clock.measure("generation"):
    produced = ahead.take(step)
  waited = time.perf_counter() - t0
  update_key = step_keys(ahead.base_key, step)[1]
  with clock.measure("training"):
    pending = start_update(run, state, produced.generated, update_key)
  ahead.overlap()
  with clock.measure("training"):
    train_record, state = finish_update(*pending)
  ahead.publish(step + 1, state.params)
  counters.update(produced.counters)
  return {**produced.stats, **train_record, **staleness_stats(step, produced.versions),
          "rollout/policy_version": produced.version, "rollout/wait_seconds": waited,
          **{f"rollout/{part}_seconds": s for part, s in produced.seconds.items()}}, state


@contextlib.contextmanager
def ahead_of_training(run, overlap: str, *, first: int, end: int, state, base_key,
                      counters: dict, restored: list[Produced], clock: RunClock
                      ) -> Iterator[Optional[_Ahead]]:
  """The rollout side of a run at k = run.rl_config.max_off_policy_steps, for the loop's step
  (`async_step`) and checkpoints (`in_flight`); None at k = 0 (the synchronous loop). Stopped
  on exit (`close`; the loop closes it earlier, before its own teardown: closing twice is
  fine).

  Args: run (`roles.Run`), overlap (rollout.async_overlap: "thread" or "dispatch"), first (the
    step the run is at), end (total steps), state (version `first`), base_key (the seed key),
    counters (the trainer's task-stream position), restored (the checkpoint's in-flight
    batches, `inflight.restore`), clock (the run's RunClock; "dispatch" times on it).
  Raises: ValueError for an unknown overlap mode."""
  k = run.rl_config.get("max_off_policy_steps") or 0
  if not k:
    yield None
    return
  if overlap not in OVERLAP_MODES:
    raise ValueError(f"rollout.async_overlap={overlap!r} is not one of {list(OVERLAP_MODES)}")
  position = restored[-1].counters if restored else counters
  kwargs = dict(k=k, base_key=base_key, first=first, end=end, params=state.params,
                counters=position, restored=restored)
  ahead = (ThreadRollouts(run, **kwargs) if overlap == "thread"
           else InlineRollouts(run, clock=clock, **kwargs))
  try:
    yield ahead
  except BaseException:
    ahead.close(failed=True)
    raise
  ahead.close()


def overlap_mode(config) -> str:
  """config.rollout.async_overlap, "thread" for a config without the field."""
  return config.rollout.get("async_overlap") or "thread"

