"""Atomic, topology-free checkpoints with orbax.

The state's global arrays on the mesh (`layout.MeshLayout`) are saved as they are, sharded: orbax
writes each shard (no gather to one host), and restoring into ShapeDtypeStructs that carry
another mesh's shardings reads each device's part straight into place, so a run saved on
{data: 4} resumes on {fsdp: 2, tensor: 2}. Arrays on one device are saved as host numpy; the
replicated device-axis layout of rlscale before the mesh (up to commit 48e92f9) saved host arrays
too, and they restore the same way (tests/runner/test_old_checkpoints.py). Orbax writes each step
into a temporary directory and renames it when complete, so a crash mid-write leaves the previous
checkpoint as the latest good one.

Several processes (orbax's multi-process convention): every process constructs the Checkpointer
on the same directory (a file system all of them see) and calls `save` and `restore` at the same
steps; orbax synchronises them, writes the host arrays and metadata from process 0 (the primary
host), and every process reads them back on restore. The runner's metadata holds global counters.

A save the storage refuses (a full disk, a file-size limit, a quota, an I/O error) raises one
OSError naming the file (`storage_error`); the previous checkpoint stays the latest
(`latest_step_in` reads it without opening a manager), and the failed step's temporary folder is
removed when the next Checkpointer opens the folder (the rerun).
orbax reports such a failure twice more on its way: each of its background threads logs the
exception with its traceback before the main thread re-raises it, and the event loops it runs the
writes on close at the first failed write while the other writes of the step are still in flight,
whose completions then find the loop closed (tensorstore prints "RuntimeError: Event loop is
closed" for each, ~300 lines). `_one_report_of_failures` keeps both out of the terminal during a
save: orbax's error records are held back and shown only if the save succeeds anyway (a failed
save is reported once, by its exception), and the loops created during the save drop a callback
that arrives after they closed (nothing awaits it any more).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any, Iterator

import jax
import numpy as np
import orbax.checkpoint as ocp

from rlscale import cli


def _spans_devices(x) -> bool:
  """Whether x is a jax.Array laid out over more than one device (a mesh's global array)."""
  return isinstance(x, jax.Array) and len(x.sharding.device_set) > 1


def savable(tree: Any) -> Any:
  """What `Checkpointer.save` writes of `tree`: global arrays spanning several devices as they
  are (orbax saves them sharded), every other leaf as host numpy (`to_host`)."""
  return jax.tree.map(lambda x: x if _spans_devices(x) else to_host(x), tree)


def to_host(tree: Any) -> Any:
  """Device pytree -> numpy pytree (typed PRNG keys become their uint32 key data)."""
  def convert(x):
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      x = jax.random.key_data(x)
    return np.asarray(jax.device_get(x))
  return jax.tree.map(convert, tree)


def _restore_target(target: Any) -> Any:
  """ShapeDtypeStruct leaves (with their shardings) kept, anything else as host numpy."""
  return jax.tree.map(lambda x: x if isinstance(x, jax.ShapeDtypeStruct) else to_host(x), target)


def storage_error(exc: BaseException, directory: str) -> OSError | None:
  """The OSError(errno, strerror, file) behind a failed save into `directory`, or None when
  `exc` (or its chain) holds no operating-system error (`rlscale.cli.os_error_in`: tensorstore
  reports a failed write as ValueError("... Failed writing: \"<file>\" ... [os_error_code='27']")).
  The file is the one the write failed on, else `directory` itself."""
  error = cli.os_error_in(exc, under=directory)
  if error is None or error.filename is not None:
    return error
  return OSError(error.errno, error.strerror, directory)


class _ClosedTolerantLoop(asyncio.SelectorEventLoop):
  """An event loop that drops a callback handed to it from another thread after it closed,
  instead of raising RuntimeError("Event loop is closed") into the caller (tensorstore's
  completion callback, which prints it): only a write whose save already failed arrives then."""

  def call_soon_threadsafe(self, callback, *args, context=None):
    try:
      return super().call_soon_threadsafe(callback, *args, context=context)
    except RuntimeError:
      if self.is_closed():
        return None
      raise


class _ClosedTolerantPolicy(asyncio.DefaultEventLoopPolicy):
  """Creates `_ClosedTolerantLoop`s (`asyncio.new_event_loop`, which orbax calls per save)."""
  _loop_factory = _ClosedTolerantLoop


class _HeldOrbaxErrors(logging.Filter):
  """Holds back orbax's ERROR records (its background threads log each exception they re-raise
  in the main thread), to be shown by `release` or dropped."""

  def __init__(self):
    super().__init__()
    self.held = []

  def filter(self, record: logging.LogRecord) -> bool:
    if record.levelno >= logging.ERROR and f"{os.sep}orbax{os.sep}" in record.pathname:
      self.held.append(record)
      return False
    return True

  def release(self, logger: logging.Logger) -> None:
    for record in self.held:
      logger.handle(record)


@contextlib.contextmanager
def _one_report_of_failures() -> Iterator[None]:
  """For the duration of a save: orbax's error log records held back (shown after the block
  only if it ends without an exception) and event loops that tolerate late callbacks (see the
  module docstring). Not thread-safe: the event-loop policy is process-wide, and the save
  happens in the main thread."""
  absl_logger = logging.getLogger("absl")  # orbax logs with absl.logging
  held = _HeldOrbaxErrors()
  policy = asyncio.get_event_loop_policy()
  absl_logger.addFilter(held)
  asyncio.set_event_loop_policy(_ClosedTolerantPolicy())
  try:
    yield
  except BaseException:
    held.held.clear()  # the exception reports the failure
    raise
  finally:
    asyncio.set_event_loop_policy(policy)
    absl_logger.removeFilter(held)
    held.release(absl_logger)


def latest_step_in(directory: str) -> int | None:
  """Step of the newest complete (finalized) checkpoint under `directory`, or None when it has
  none or does not exist. Reads the folder only (no manager is opened), so it also works on a
  full disk, e.g. to name the checkpoint a failed run resumes from."""
  if not os.path.isdir(directory):
    return None
  return max(ocp.path.step.checkpoint_steps(directory), default=None)


class Checkpointer:
  """Keeps the last `keep` checkpoints of (train state, JSON metadata) under `directory`.

  Args:
    directory: where step folders live (created if missing).
    keep: how many checkpoints to keep (older ones are deleted after a successful save).
  """

  def __init__(self, directory: str, *, keep: int = 2):
    if keep < 1:
      raise ValueError(f"train.keep_checkpoints must be >= 1, got {keep}")
    self.directory = os.path.abspath(directory)
    self._manager = ocp.CheckpointManager(
        self.directory,
        # cleanup_tmp_directories: a save that failed or crashed left its temporary folder.
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                             enable_async_checkpointing=False,
                                             cleanup_tmp_directories=True),
        # "rollouts": the in-flight batches of asynchronous rollouts (`inflight`), only in
        # checkpoints that have them.
        item_names=("state", "meta", "rollouts"))

  def latest_step(self) -> int | None:
    """Step of the newest complete checkpoint, or None."""
    return self._manager.latest_step()

  def save(self, step: int, state: Any, meta: dict, rollouts: dict | None = None) -> None:
    """Writes `state` and `meta` (JSON-able) for `step`. state: a host or single-device pytree
    (written as numpy), or a mesh's global arrays (written sharded, see `savable`). rollouts:
    a tree of host arrays (asynchronous rollouts' in-flight batches, `inflight.to_checkpoint`)
    written as the "rollouts" item in the same atomic step, or None for none.

    Raises: OSError(errno, strerror, file) when the storage refuses the write (`storage_error`:
    ENOSPC, EFBIG, EDQUOT, EIO, EACCES...); `latest_step()` is then still the previous step.
    The step's temporary folder stays until the next Checkpointer on the folder removes it
    (writes of the failed save may still be finishing when this returns)."""
    try:
      with _one_report_of_failures():
        items = {"state": ocp.args.StandardSave(savable(state)), "meta": ocp.args.JsonSave(meta)}
        if rollouts is not None:
          items["rollouts"] = ocp.args.StandardSave(rollouts)
        self._manager.save(step, args=ocp.args.Composite(**items), force=True)
        self._manager.wait_until_finished()
    except Exception as exc:  # pylint: disable=broad-exception-caught
      error = storage_error(exc, self.directory)
      if error is None:
        raise
      raise error from exc

  def restore(self, step: int, target: Any) -> tuple[Any, dict]:
    """Reads checkpoint `step` into the structure of `target`: a host pytree (returns numpy
    arrays), or `jax.ShapeDtypeStruct`s with shardings (returns global arrays so placed, whatever
    layout saved the checkpoint).

    Raises FileNotFoundError when no such step exists."""
    if step not in self._manager.all_steps():
      raise FileNotFoundError(f"no checkpoint for step {step} in {self.directory} "
                              f"(have {sorted(self._manager.all_steps())})")
    restored = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(_restore_target(target)), meta=ocp.args.JsonRestore()))
    # Placed where the target's shardings asked; a host target's leaves as numpy.
    state = jax.tree.map(lambda x: x if isinstance(x, jax.Array) else np.asarray(x),
                         restored["state"])
    return state, dict(restored["meta"])

  def restore_rollouts(self, step: int) -> dict | None:
    """The "rollouts" item of checkpoint `step` as host numpy arrays (the tree `save` wrote), or
    None when that checkpoint has none (synchronous runs, or no batch in flight)."""
    if not os.path.isdir(os.path.join(self.directory, str(step), "rollouts")):
      return None
    restored = self._manager.restore(step, args=ocp.args.Composite(
        rollouts=ocp.args.StandardRestore()))
    return jax.tree.map(np.asarray, restored["rollouts"])

  def close(self) -> None:
    self._manager.close()
