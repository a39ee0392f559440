"""Checkpointer: keeps the last k, restores host arrays exactly, ignores a half-written step."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlscale.runner.checkpoints import Checkpointer


def _state(scale):
  params = {"w": jnp.full((3, 2), scale, jnp.float32), "b": jnp.arange(2, dtype=jnp.float32)}
  return {"params": params, "opt": optax.adam(1e-3).init(params), "step": jnp.int32(scale)}


def test_keeps_last_k_and_restores_exactly(tmp_path):
  ckpt = Checkpointer(str(tmp_path), keep=2)
  for step in (1, 2, 3):
    ckpt.save(step, _state(step), {"step": step, "counters": {"samples": 10 * step}})
  assert ckpt.latest_step() == 3
  assert sorted(p.name for p in tmp_path.iterdir()) == ["2", "3"]
  restored, meta = ckpt.restore(3, _state(0))
  assert meta == {"step": 3, "counters": {"samples": 30}}
  expected = jax.tree.map(np.asarray, _state(3))
  assert jax.tree.structure(restored) == jax.tree.structure(expected)
  for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(expected)):
    np.testing.assert_array_equal(got, want)


def test_half_written_checkpoint_is_ignored(tmp_path):
  ckpt = Checkpointer(str(tmp_path), keep=2)
  ckpt.save(1, _state(1), {"step": 1})
  ckpt.close()
  # A crash mid-write leaves orbax's temporary folder; it must not count as a checkpoint.
  (tmp_path / "2.orbax-checkpoint-tmp").mkdir()
  reopened = Checkpointer(str(tmp_path), keep=2)
  assert reopened.latest_step() == 1
  with pytest.raises(FileNotFoundError, match="step 2"):
    reopened.restore(2, _state(0))


def test_keep_must_be_positive(tmp_path):
  with pytest.raises(ValueError, match="train.keep_checkpoints"):
    Checkpointer(str(tmp_path), keep=0)
