"""Checkpointer: keeps the last k, restores host arrays exactly, ignores a half-written step, and
reports a save the storage refuses as one OSError naming the file."""

import errno
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlscale.runner.checkpoints import Checkpointer, latest_step_in, storage_error
from tests.timeouts import hang_timeout

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


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


# A save the storage refuses: one OSError naming the file, nothing else on stderr. In a child
# process, since the file-size limit (RLIMIT_FSIZE) applies to the whole process; Python ignores
# SIGXFSZ, so the write raises EFBIG.
REFUSED_SAVE = """
import resource, sys
import numpy as np
from rlscale.runner.checkpoints import Checkpointer, latest_step_in
ckpt = Checkpointer(sys.argv[1], keep=2)
ckpt.save(1, {"w": np.ones(4, np.float32)}, {"step": 1})
resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, resource.RLIM_INFINITY))
# 40 arrays of 256 KiB of random bits (orbax compresses): many writes in flight when one fails
rng = np.random.default_rng(0)
state = {f"w{i}": rng.random((256, 256), np.float32) for i in range(40)}
try:
  ckpt.save(2, state, {"step": 2})
except OSError as e:
  print(e.errno, e.filename, ckpt.latest_step(), latest_step_in(sys.argv[1]), sep="|")
"""


def test_a_refused_save_raises_one_oserror_naming_the_file_and_prints_nothing(tmp_path):
  directory = tmp_path / "checkpoints"
  result = subprocess.run([sys.executable, "-c", REFUSED_SAVE, str(directory)], cwd=REPO,
                          capture_output=True, text=True, timeout=hang_timeout(20),
                          env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert result.returncode == 0, result.stderr
  number, filename, latest, latest_in = result.stdout.strip().split("|")
  assert int(number) == errno.EFBIG
  assert filename.startswith(str(directory / "2.orbax-checkpoint-tmp") + os.sep), filename
  assert (latest, latest_in) == ("1", "1")  # the previous checkpoint is still the latest
  # Without the fix: orbax's logged thread exceptions and ~70 "Event loop is closed" tracebacks.
  assert result.stderr == ""
  # The next Checkpointer on the folder (the rerun) removes the failed step's temporary folder
  # and saves that step again.
  rerun = Checkpointer(str(directory), keep=2)
  rerun.save(2, _state(2), {"step": 2})
  assert sorted(os.listdir(directory)) == ["1", "2"]


def test_storage_error_reads_tensorstores_message(tmp_path):
  exc = ValueError('OUT_OF_RANGE: Error writing "opt/0" in OCDBT database at local file "/c/": '
                   'Failed writing: "/c/2.tmp/d/ab": Failed to write 9 bytes to file 20: File too '
                   "large [os_error_code='27']")
  error = storage_error(exc, "/c")
  assert (error.errno, error.strerror, error.filename) == (errno.EFBIG, "File too large",
                                                           "/c/2.tmp/d/ab")
  bare = storage_error(OSError(errno.ENOSPC, "No space left on device"), "/c")
  assert (bare.errno, bare.filename) == (errno.ENOSPC, "/c")  # no file known: the folder
  assert storage_error(ValueError("shape mismatch"), "/c") is None  # not a storage failure


def test_latest_step_in(tmp_path):
  assert latest_step_in(str(tmp_path / "none")) is None
  ckpt = Checkpointer(str(tmp_path), keep=3)
  assert latest_step_in(str(tmp_path)) is None
  for step in (2, 5):
    ckpt.save(step, _state(step), {"step": step})
  (tmp_path / "7.orbax-checkpoint-tmp").mkdir()  # unfinished: not a checkpoint
  assert latest_step_in(str(tmp_path)) == 5
