"""In-flight rollout batches survive a checkpoint unchanged, array for array."""

import numpy as np
import pytest

from rlscale.runner import inflight
from rlscale.runner.async_rollouts import Produced
from rlscale.runner.checkpoints import Checkpointer
from rlscale.runner.rollouts import Generated
from rlscale.sampler.decode import Rollout


def _batch(n, version, *, filler=None):
  rng = np.random.default_rng(n)
  rollout = Rollout(tokens=rng.integers(0, 30, (4, 7)).astype(np.int32),
                    prompt_mask=np.ones((4, 3), np.int32),
                    response_mask=np.array([[1, 1, 0, 0]] * 4, np.int32),
                    logp=rng.normal(size=(4, 4)).astype(np.float32),
                    lengths=np.full(4, 2, np.int32), num_steps=np.full(4, 4, np.int32),
                    experts=None)
  generated = Generated(rollout, rewards=rng.normal(size=4).astype(np.float32),
                        scores=np.array([1, 0, 0, 1], np.float32),
                        correct=np.array([True, False, False, True]), filler=filler,
                        nonfinite=np.array([False, True, False, False]))
  return Produced(n, version, generated, np.full(4, version, np.int32),
                  {"reward/mean": 0.5, "sampling/rounds": 1},
                  {"samples": 4 * (n + 1), "prompts": n + 1},
                  {"generation": 0.25, "reward": 0.125})


def _assert_same(a: Produced, b: Produced):
  assert (a.batch, a.version, a.stats, a.counters, a.seconds) == (
      b.batch, b.version, b.stats, b.counters, b.seconds)
  np.testing.assert_array_equal(a.versions, b.versions)
  for x, y in ((a.generated.rollout, b.generated.rollout), (a.generated, b.generated)):
    for name in x._fields:
      if name == "rollout":
        continue
      left, right = getattr(x, name), getattr(y, name)
      assert (left is None) == (right is None), name
      if left is not None:
        assert np.asarray(left).dtype == np.asarray(right).dtype, name
        np.testing.assert_array_equal(left, right, err_msg=name)


def test_in_flight_batches_round_trip_through_a_checkpoint(tmp_path):
  batches = [_batch(3, 1), _batch(4, 2, filler=np.array([False, False, True, True]))]
  arrays, records = inflight.to_checkpoint(batches)
  checkpointer = Checkpointer(str(tmp_path))
  checkpointer.save(3, {"w": np.ones(2, np.float32)},
                    {"step": 3, inflight.META_KEY: records}, rollouts=arrays)
  _, meta = checkpointer.restore(3, {"w": np.zeros(2, np.float32)})
  restored = inflight.restore(checkpointer.restore_rollouts(3), meta[inflight.META_KEY])
  checkpointer.close()
  assert len(restored) == 2
  for saved, back in zip(batches, restored):
    _assert_same(saved, back)


def test_a_checkpoint_without_batches_has_no_rollouts_item(tmp_path):
  assert inflight.to_checkpoint([]) == (None, [])
  checkpointer = Checkpointer(str(tmp_path))
  checkpointer.save(1, {"w": np.ones(2, np.float32)}, {"step": 1})
  assert checkpointer.restore_rollouts(1) is None
  checkpointer.close()
  assert inflight.restore(None, []) == []


def test_records_without_their_arrays_are_refused():
  _, records = inflight.to_checkpoint([_batch(3, 1)])
  with pytest.raises(ValueError, match=r"lists 1 in-flight rollout batches but its 'rollouts' "
                                       r"item holds 0"):
    inflight.restore(None, records)
