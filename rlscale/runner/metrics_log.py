"""Run logging: one JSON line per record in `metrics.jsonl`, mirrored to TensorBoard.

Every record carries the step and the axes the batch-size study indexes by (responses consumed,
wall seconds); the study's readers (`rlscale.runner.plots`, later the scaling reports) read the JSONL.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from typing import Any, Iterable, Mapping

import numpy as np

from rlscale import inputs

METRICS_FILE = "metrics.jsonl"
# Committed study logs are stored gzipped (a 1,024-step run's log is ~1.7 MB of text); readers
# take either form.
ARCHIVED_SUFFIX = ".gz"


def _to_python(value: Any) -> Any:
  """numpy / jax scalars -> float/int; non-finite floats -> None (valid JSON)."""
  if isinstance(value, (np.generic, np.ndarray)) or hasattr(value, "__array__"):
    value = np.asarray(value)
    value = value.item() if value.size == 1 else value.tolist()
  if isinstance(value, float) and not math.isfinite(value):
    return None
  return value


class MetricsLogger:
  """Appends records to `<workdir>/metrics.jsonl` and to TensorBoard event files.

  Args:
    workdir: run directory (created if missing).
    resume_step: when resuming from a checkpoint at this step, records with a larger `step` are
      dropped from the JSONL first, so an interrupted and resumed run logs each step exactly once.
    tensorboard: also write TensorBoard events under `<workdir>/tensorboard` (tensorboardX).
  """

  def __init__(self, workdir: str, *, resume_step: int | None = None, tensorboard: bool = True):
    os.makedirs(workdir, exist_ok=True)
    self.path = os.path.join(workdir, METRICS_FILE)
    if resume_step is not None:
      truncate_after_step(self.path, resume_step)
    elif os.path.exists(self.path):
      os.remove(self.path)
    # Unbuffered: a record is on disk when write returns, and a write the disk refuses leaves no
    # buffered bytes for the interpreter to retry (and report again) at exit.
    self._file = open(self.path, "ab", buffering=0)
    self._tb = None
    if tensorboard:
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
      # purge_step makes TensorBoard drop events past the checkpoint that an earlier attempt
      # wrote, as the JSONL truncation does.
      purge_step = None if resume_step is None else resume_step + 1
      self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"), purge_step=purge_step)

  def write(self, record: Mapping[str, Any]) -> None:
    """Writes one record; it must hold an integer `step`. On disk when it returns (crash-safe).

    Raises: ValueError for a record without `step`; OSError naming metrics.jsonl when the write
    fails (a full disk: rlscale.cli reports it on one line)."""
    if "step" not in record:
      raise ValueError(f"metrics record needs a 'step' field, got keys {sorted(record)}")
    clean = {k: _to_python(v) for k, v in record.items()}
    data = (json.dumps(clean, sort_keys=True) + "\n").encode("utf-8")
    try:
      while data:  # an unbuffered write may take part of the bytes
        data = data[self._file.write(data):]
    except OSError as e:
      raise OSError(e.errno, e.strerror, self.path) from e
    if self._tb is not None:
      for key, value in clean.items():
        if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
          self._tb.add_scalar(key, value, clean["step"])

  def close(self) -> None:
    self._file.close()
    if self._tb is not None:
      self._tb.close()


def metrics_path(run_dir: str) -> str | None:
  """<run_dir>/metrics.jsonl, else its gzipped archive metrics.jsonl.gz, else None."""
  for name in (METRICS_FILE, METRICS_FILE + ARCHIVED_SUFFIX):
    if os.path.isfile(os.path.join(run_dir, name)):
      return os.path.join(run_dir, name)
  return None


def read_metrics(path: str) -> list[dict]:
  """All records of a metrics.jsonl file, or of a gzipped one when `path` ends in .gz (a torn
  last line from a crash is skipped); [] when the file does not exist.

  Raises: ValueError `<path>:<line>: not valid UTF-8 ...` for bytes that are not UTF-8 (a file
  damaged on disk; `rlscale.inputs.decode_utf8`)."""
  records = []
  if not os.path.exists(path):
    return records
  opener = gzip.open if path.endswith(ARCHIVED_SUFFIX) else open
  with opener(path, "rb") as f:
    # Decoded whole, so a bad byte is reported at its line; JSON lines end with "\n" only.
    text = inputs.decode_utf8(f.read(), path)
  for line in text.split("\n"):
    if not line.strip():
      continue
    try:
      records.append(json.loads(line))
    except json.JSONDecodeError:
      continue
  return records


def truncate_after_step(path: str, step: int) -> None:
  """Rewrites `path` keeping only records with record['step'] <= step (atomic replace)."""
  kept = [r for r in read_metrics(path) if r.get("step", 0) <= step]
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    for record in kept:
      f.write(json.dumps(record, sort_keys=True) + "\n")
  os.replace(tmp, path)


def series(records: Iterable[Mapping[str, Any]], x: str, y: str) -> tuple[np.ndarray, np.ndarray]:
  """(x values, y values) over the records that hold a finite `y`."""
  xs, ys = [], []
  for r in records:
    if r.get(y) is not None and r.get(x) is not None:
      xs.append(r[x])
      ys.append(r[y])
  return np.asarray(xs, float), np.asarray(ys, float)
