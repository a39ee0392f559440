"""In-flight rollout batches in a checkpoint: what asynchronous rollouts
(`rlscale.runner.async_rollouts`) must keep for a resumed run to continue exactly.

A checkpoint after step t at k = rl.max_off_policy_steps holds batches t .. t + k - 1 (drawn
from policy versions t - k .. t - 1, which the checkpoint does not keep). Each batch
(`async_rollouts.Produced`) is split into host arrays, saved as the checkpoint's "rollouts" item
(`Checkpointer.save(rollouts=...)`, orbax, written atomically with the state), and a JSON-able
record in the checkpoint's metadata under "in_flight" (batch index, version, statistics, the
task-stream counters after it, the rollout side's seconds). `to_checkpoint` and `restore` are
inverse: the restored batches are equal, array for array, to those saved.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlscale.runner.async_rollouts import Produced
from rlscale.runner.rollouts import Generated
from rlscale.sampler.decode import Rollout

META_KEY = "in_flight"
# Generated's per-row fields besides the rollout; bool ones are stored as uint8.
_ROW_FIELDS = ("rewards", "scores", "correct", "filler", "nonfinite")
_BOOL_FIELDS = ("correct", "filler", "nonfinite")


def _arrays(produced: Produced) -> dict[str, np.ndarray]:
  """One batch's arrays by name: rollout_<field> (fields that are None left out), the row fields
  of Generated (None left out, bools as uint8) and versions."""
  generated = produced.generated
  arrays = {f"rollout_{name}": np.asarray(value)
            for name, value in generated.rollout._asdict().items() if value is not None}
  for name in _ROW_FIELDS:
    value = getattr(generated, name)
    if value is not None:
      value = np.asarray(value)
      arrays[name] = value.astype(np.uint8) if name in _BOOL_FIELDS else value
  arrays["versions"] = np.asarray(produced.versions, np.int32)
  return arrays


def _record(produced: Produced) -> dict[str, Any]:
  """One batch's JSON-able fields."""
  return {"batch": produced.batch, "version": produced.version, "stats": produced.stats,
          "counters": produced.counters, "seconds": produced.seconds}


def to_checkpoint(batches: list[Produced]) -> tuple[dict | None, list[dict]]:
  """(arrays, records) of in-flight `batches`: arrays {"<i>": {name: array}} for the
  checkpoint's "rollouts" item (None when there are no batches: the item is not written), and
  records for its metadata's META_KEY."""
  if not batches:
    return None, []
  return ({str(i): _arrays(p) for i, p in enumerate(batches)}, [_record(p) for p in batches])


def _produced(arrays: dict[str, Any], record: dict) -> Produced:
  """The batch of `_arrays` / `_record`."""
  arrays = {name: np.asarray(value) for name, value in arrays.items()}
  rollout = Rollout(**{name: arrays.get(f"rollout_{name}") for name in Rollout._fields})
  rows = {name: arrays.get(name) for name in _ROW_FIELDS}
  for name in _BOOL_FIELDS:
    if rows[name] is not None:
      rows[name] = rows[name].astype(bool)
  return Produced(int(record["batch"]), int(record["version"]), Generated(rollout, **rows),
                  arrays["versions"], dict(record["stats"]), dict(record["counters"]),
                  dict(record["seconds"]))


def restore(arrays: dict | None, records: list[dict]) -> list[Produced]:
  """The in-flight batches of a checkpoint from its "rollouts" item (`arrays`, None when absent)
  and its metadata's records, in batch order.

  Raises: ValueError when the records name batches whose arrays are missing (a damaged
  checkpoint)."""
  if not records:
    return []
  if arrays is None or len(arrays) != len(records):
    raise ValueError(f"the checkpoint's metadata lists {len(records)} in-flight rollout batches "
                     f"but its 'rollouts' item holds {0 if arrays is None else len(arrays)}")
  return [_produced(arrays[str(i)], record) for i, record in enumerate(records)]
