"""metrics.jsonl: JSON-safe records, truncation on resume, torn lines skipped."""

import json
import math

import numpy as np
import pytest

from rlscale.runner.metrics_log import (MetricsLogger, metrics_path, read_metrics, series,
                                        truncate_after_step)


def test_write_read_and_truncate(tmp_path):
  logger = MetricsLogger(str(tmp_path), tensorboard=False)
  for step in range(4):
    logger.write({"step": step, "loss": np.float32(step / 2), "nan": math.nan, "n": np.int64(step)})
  logger.close()
  records = read_metrics(str(tmp_path / "metrics.jsonl"))
  assert [r["loss"] for r in records] == [0.0, 0.5, 1.0, 1.5]
  assert all(r["nan"] is None for r in records)  # non-finite -> null, still valid JSON
  with open(tmp_path / "metrics.jsonl", "a") as f:
    f.write('{"step": 4, "loss"')  # a torn last line from a crash
  assert len(read_metrics(str(tmp_path / "metrics.jsonl"))) == 4
  truncate_after_step(str(tmp_path / "metrics.jsonl"), 1)
  assert [r["step"] for r in read_metrics(str(tmp_path / "metrics.jsonl"))] == [0, 1]


def test_a_gzipped_archive_reads_as_the_plain_file(tmp_path):
  import gzip
  lines = '{"step": 0, "x": 1.5}\n{"step": 1, "x": 2.5}\n{"step": 2, "x"'  # torn last line
  plain = tmp_path / "plain"
  plain.mkdir()
  (plain / "metrics.jsonl").write_text(lines)
  archived = tmp_path / "archived"
  archived.mkdir()
  with gzip.open(archived / "metrics.jsonl.gz", "wt") as f:
    f.write(lines)
  assert metrics_path(str(archived)) == str(archived / "metrics.jsonl.gz")
  assert read_metrics(metrics_path(str(archived))) == read_metrics(metrics_path(str(plain))) == [
      {"step": 0, "x": 1.5}, {"step": 1, "x": 2.5}]
  assert metrics_path(str(tmp_path)) is None


def test_resume_keeps_earlier_records_and_fresh_run_starts_over(tmp_path):
  with open(tmp_path / "metrics.jsonl", "w") as f:
    for step in range(3):
      f.write(json.dumps({"step": step}) + "\n")
  MetricsLogger(str(tmp_path), resume_step=1, tensorboard=False).close()
  assert [r["step"] for r in read_metrics(str(tmp_path / "metrics.jsonl"))] == [0, 1]
  MetricsLogger(str(tmp_path), tensorboard=False).close()
  assert read_metrics(str(tmp_path / "metrics.jsonl")) == []


def test_record_needs_step(tmp_path):
  logger = MetricsLogger(str(tmp_path), tensorboard=False)
  with pytest.raises(ValueError, match="step"):
    logger.write({"loss": 1.0})


def test_series_skips_missing():
  xs, ys = series([{"samples": 1, "acc": 0.5}, {"samples": 2}, {"samples": 3, "acc": None},
                   {"samples": 4, "acc": 1.0}], "samples", "acc")
  np.testing.assert_array_equal(xs, [1, 4])
  np.testing.assert_array_equal(ys, [0.5, 1.0])
