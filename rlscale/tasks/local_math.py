"""Local math datasets (GSM8K- or MATH-style JSONL) prepared once into a TFDS array_record dataset.

Input rows, one JSON object per line:
  * GSM8K style: {"question": ..., "answer": "... reasoning ...\\n#### 72"}
  * MATH style:  {"problem": ..., "solution": "... \\\\boxed{\\\\frac{1}{2}} ..."} (an explicit
    "answer" field, when present, takes precedence over the boxed one).
`LocalMathBuilder` (a `tfds.core.GeneratorBasedBuilder`, `file_format="array_record"`) writes
them once under `data_dir/rlscale_local_math/sha<content hash>/` (`data_dir`: `task.data_dir`,
default `$RLSCALE_HOME/tfds`, else the user's cache folder, `$XDG_CACHE_HOME/rlscale/tfds`:
`rlscale.paths`); later runs and sweeps reuse
the prepared files and read them by random access with `builder.as_data_source` (no TensorFlow
needed).
Nothing is downloaded. Held-out rows are chosen by question hash (`rlscale.tasks.holdout`) and
stored with a `held_out` flag; training position i is row `perm_e[i % n]` of the training rows,
where `perm_e` is a seeded permutation for epoch e = i // n.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import math
import os
import tempfile
from typing import Any, Callable, Optional

import numpy as np
import tensorflow_datasets as tfds

from rlscale import inputs
from rlscale import outputs
from rlscale import paths
from rlscale.tasks import base
from rlscale.tasks import extract
from rlscale.tasks import holdout
from rlscale.tasks import verifier

SPLIT = "full"
_FORMATS_HINT = ("GSM8K-style rows {\"question\": ..., \"answer\": \"...\\n#### 72\"} or "
                 "MATH-style rows {\"problem\": ..., \"solution\": \"...\\\\boxed{...}\"}")


def _number_text(value: Any, field: str, where: str) -> Optional[str]:
  """A JSON number in an answer field as reference text ("72", "0.5"); None for a string.

  Raises:
    ValueError: a value that is neither a string nor a finite int/float (bools, lists, null,
      NaN), naming the row and the field.
  """
  if isinstance(value, str):
    return None
  if isinstance(value, int) and not isinstance(value, bool):
    return str(value)
  if isinstance(value, float) and math.isfinite(value):
    return repr(value)  # shortest text that reads back as the same float: 0.1 -> "0.1"
  raise ValueError(f"{where}: field {field!r} must be a string or a number, got "
                   f"{json.dumps(value)[:40]} ({type(value).__name__})")


def parse_row(row: Any, where: str) -> dict[str, str]:
  """One JSONL row -> {"question", "answer" (final answer), "solution" (full text)}.

  An explicit `answer` field wins: a number (int or float) is the reference as written; a string
  is the reference in MATH-style rows and the GSM8K solution (final answer after `####`) in
  GSM8K-style rows. Without an `answer`, a MATH-style row's last `\\boxed{}` is the reference.

  Raises:
    ValueError: the row is neither GSM8K- nor MATH-style, an answer field holds something other
      than a string or a number, or there is no final answer (the message names the row).
  """
  if isinstance(row, dict) and isinstance(row.get("question"), str) and "answer" in row:
    number = _number_text(row["answer"], "answer", where)
    if number is not None:
      return {"question": row["question"], "answer": number, "solution": number}
    final = extract.gsm8k(row["answer"])
    if final is None:
      raise ValueError(f"{where}: GSM8K-style 'answer' has no '#### N' line")
    return {"question": row["question"], "answer": final.strip(), "solution": row["answer"]}
  if isinstance(row, dict) and isinstance(row.get("problem"), str) and isinstance(
      row.get("solution"), str):
    final = row.get("answer")  # null counts as absent (a column exported with gaps)
    if final is not None:
      final = _number_text(final, "answer", where) or final
      if not final.strip():
        raise ValueError(f"{where}: field 'answer' is empty")
    else:
      try:
        final = extract.last_boxed(row["solution"])
      except extract.ExtractionError as e:
        raise ValueError(f"{where}: {e}") from None
    if not final or not final.strip():  # the boxed answer
      raise ValueError(f"{where}: MATH-style 'solution' has no \\boxed{{...}} answer")
    return {"question": row["problem"], "answer": final.strip(), "solution": row["solution"]}
  keys = sorted(row) if isinstance(row, dict) else type(row).__name__
  raise ValueError(f"{where}: expected {_FORMATS_HINT}; got {keys}")


def read_jsonl(path: str) -> list[dict[str, str]]:
  """All rows of a GSM8K/MATH JSONL file, parsed by `parse_row` (blank lines skipped).

  Raises:
    ValueError: bytes that are not UTF-8, invalid JSON or an unrecognised row (the message gives
      path:line; `rlscale.inputs.decode_utf8` for the bytes).
  """
  rows = []
  with open(path, "rb") as f:
    # Decoded whole, not line by line as open() does, so a bad byte is reported at its line.
    # utf-8-sig: a byte-order mark (Windows editors write one) is skipped.
    text = inputs.decode_utf8(f.read(), path, encoding="utf-8-sig")
  # newline=None: CRLF and CR end lines too, as in a file opened as text.
  for number, line in enumerate(io.StringIO(text, newline=None), 1):
    if not line.strip():
      continue
    try:
      row = json.loads(line)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}:{number}: invalid JSON ({e.msg})") from None
    rows.append(parse_row(row, f"{path}:{number}"))
  if not rows:
    raise ValueError(f"{path} has no rows; expected {_FORMATS_HINT}")
  return rows


class LocalMathBuilder(tfds.core.GeneratorBasedBuilder):
  """TFDS builder for one local JSONL file; the builder config name is a content hash.

  Args:
    jsonl_path: the JSONL file.
    holdout_fraction: share of question space flagged `held_out`.
    **kwargs: passed to GeneratorBasedBuilder (data_dir, file_format="array_record").
  """

  name = "rlscale_local_math"
  VERSION = tfds.core.Version("1.1.0")
  RELEASE_NOTES = {
      "1.0.0": "GSM8K/MATH JSONL with a held_out flag.",
      "1.1.0": "Numbers in answer fields are references; an explicit MATH answer wins; BOM."}

  def __init__(self, *, jsonl_path: str, holdout_fraction: float, **kwargs):
    self._jsonl_path = jsonl_path
    self._holdout_fraction = holdout_fraction
    with open(jsonl_path, "rb") as f:
      digest = hashlib.sha256(f.read() + repr(holdout_fraction).encode()).hexdigest()[:16]
    config = tfds.core.BuilderConfig(name=f"sha{digest}",
                                     description=f"{os.path.basename(jsonl_path)}")
    super().__init__(config=config, **kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description="Local GSM8K/MATH-style math problems (rlscale).",
        features=tfds.features.FeaturesDict({
            "question": tfds.features.Text(), "answer": tfds.features.Text(),
            "solution": tfds.features.Text(), "index": np.int64, "held_out": np.bool_}))

  def _log_download_bytes(self) -> None:
    # TFDS would print "Downloading and preparing dataset ..."; nothing is downloaded here and
    # `prepare` says what happens in its own words.
    pass

  def _log_download_done(self) -> None:
    pass

  def _split_generators(self, dl_manager):
    del dl_manager  # nothing is downloaded
    return {SPLIT: self._generate_examples()}

  def _generate_examples(self):
    for index, row in enumerate(read_jsonl(self._jsonl_path)):
      yield index, dict(row, index=index,
                        held_out=holdout.is_held_out(row["question"], self._holdout_fraction))


def default_data_dir() -> str:
  """The cache folder for prepared data when task.data_dir is unset: `$RLSCALE_HOME/tfds`, else
  `$XDG_CACHE_HOME/rlscale/tfds` (`~/.cache/...`); see `rlscale.paths.data_cache_dir`."""
  return paths.data_cache_dir()


class _TfdsChatter(logging.Filter):
  """Drops TFDS's warnings about our by-design choices ("Using custom data configuration",
  "Variant folder ... has no dataset_info.json" before the first build)."""

  def filter(self, record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR or "tensorflow_datasets" not in record.pathname


@contextlib.contextmanager
def _quiet_tfds():
  absl_logger = logging.getLogger("absl")
  chatter = _TfdsChatter()
  absl_logger.addFilter(chatter)
  try:
    yield
  finally:
    absl_logger.removeFilter(chatter)


def prepare(jsonl_path: str, holdout_fraction: float, data_dir: str,
            log: Callable[[str], None] = print) -> LocalMathBuilder:
  """The prepared dataset of `jsonl_path` under `data_dir`, built now unless already there.

  Prepared data lives at `data_dir/rlscale_local_math/sha<content hash>/<version>/`, so every run
  and sweep that reads the same file content reuses it. A build runs in a temporary folder
  inside `data_dir` and is renamed into place only when complete: a failed build (a bad row)
  leaves nothing behind, not even the folders it made, and two runs building at once both end
  with one complete copy.

  Args:
    jsonl_path: absolute path of the JSONL file.
    holdout_fraction: share of question space flagged `held_out` (part of the key).
    data_dir: the cache root (`task.data_dir`, default `default_data_dir()`).
    log: where the one-line "preparing" message goes.

  Raises:
    ValueError: a row the format does not allow (from `read_jsonl`).
    OSError: data_dir cannot be created or written.
  """
  with _quiet_tfds():
    return _prepare(jsonl_path, holdout_fraction, data_dir, log)


def _prepare(jsonl_path: str, holdout_fraction: float, data_dir: str,
             log: Callable[[str], None]) -> LocalMathBuilder:
  kwargs = dict(jsonl_path=jsonl_path, holdout_fraction=holdout_fraction,
                file_format="array_record")
  builder = LocalMathBuilder(data_dir=data_dir, **kwargs)
  if builder.is_prepared():
    return builder
  log(f"Preparing {jsonl_path} once for reading (nothing is downloaded) into {builder.data_dir}")
  created = outputs.make_dirs(data_dir)
  target = builder.data_dir
  try:
    with tempfile.TemporaryDirectory(prefix=".building-", dir=data_dir) as staging:
      staged = LocalMathBuilder(data_dir=staging, **kwargs)
      staged.download_and_prepare()
      created += outputs.make_dirs(os.path.dirname(target))
      try:
        os.rename(staged.data_dir, target)
      except OSError:
        if not os.path.isdir(target):
          raise
        # Another run finished the same build first; its copy is equal to ours.
  except BaseException:
    outputs.remove_empty_dirs(created)
    raise
  return LocalMathBuilder(data_dir=data_dir, **kwargs)


def _text(value: Any) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class LocalMathSource(base.TaskSource):
  """A task source over a prepared local JSONL dataset.

  Args:
    data_path: the JSONL file (GSM8K or MATH style).
    seed: run seed (order of the training stream).
    data_dir: cache root for the prepared dataset (default: `default_data_dir()`, i.e.
      `$RLSCALE_HOME/tfds`, `$XDG_CACHE_HOME/rlscale/tfds` or `~/.cache/rlscale/tfds`); see
      `prepare`.
    holdout_fraction: share of question space held out for evaluation, in (0, 0.5].
    prompt_template, target_template, verifier_config: see `base.TaskSource`.

  Raises:
    ValueError: data_path unset, or the file has unrecognised rows or no training rows.
    FileNotFoundError: data_path does not exist (the message says what to put there).
  """

  def __init__(self, data_path: Optional[str], *, seed: int, data_dir: Optional[str] = None,
               holdout_fraction: float = 0.1, prompt_template: str = "{question}\nAnswer:",
               target_template: str = "{answer}",
               verifier_config: Optional[verifier.VerifierConfig] = None):
    super().__init__(prompt_template=prompt_template, target_template=target_template,
                     verifier_config=verifier_config)
    if not data_path:
      raise ValueError("task.data_path must be set for task.source='local_math' "
                       f"(a JSONL file of {_FORMATS_HINT})")
    data_path = os.path.abspath(os.path.expanduser(data_path))
    if not os.path.isfile(data_path):
      raise FileNotFoundError(
          f"task.data_path={data_path} does not exist. Put a JSONL file there with "
          f"{_FORMATS_HINT}, one per line (e.g. GSM8K's train.jsonl); nothing is downloaded.")
    self.seed = int(seed)
    self.holdout_fraction = holdout.check_fraction(holdout_fraction)
    data_dir = os.path.abspath(os.path.expanduser(data_dir or default_data_dir()))
    tfds.disable_progress_bar()
    self.builder = prepare(data_path, self.holdout_fraction, data_dir)
    self._source = self.builder.as_data_source(SPLIT)
    self._train, self._eval = self._partition()
    if not self._train:
      raise ValueError(f"{data_path}: every row is held out; lower task.holdout_fraction")
    self._permutation: tuple[int, np.ndarray] = (-1, np.zeros(0, np.int64))

  def _partition(self) -> tuple[list[int], list[int]]:
    """Data-source positions of training and held-out rows, each in file order."""
    train, held = [], []
    for position in range(len(self._source)):
      record = self._source[position]
      (held if record["held_out"] else train).append((int(record["index"]), position))
    return [p for _, p in sorted(train)], [p for _, p in sorted(held)]

  def _example(self, position: int) -> base.Example:
    record = self._source[position]
    return base.Example(prompt=_text(record["question"]), answer=_text(record["answer"]),
                        metadata={"solution": _text(record["solution"]),
                                  "index": int(record["index"])})

  def train_example(self, index: int) -> base.Example:
    """Training row at stream position `index` (seeded permutation per epoch)."""
    index = base.check_index(index)
    epoch, offset = divmod(index, len(self._train))
    if self._permutation[0] != epoch:
      rng = np.random.default_rng(holdout.stable_seed(self.seed, "local_math", epoch))
      self._permutation = (epoch, rng.permutation(len(self._train)))
    return self._example(self._train[int(self._permutation[1][offset])])

  def eval_examples(self, n: int) -> list[base.Example]:
    """The first `n` held-out rows in file order.

    Raises:
      ValueError: the file has fewer than `n` held-out rows.
    """
    n = base.check_count(n, "task.eval_size")
    if n > len(self._eval):
      raise ValueError(f"task.eval_size={n} but the file has only {len(self._eval)} held-out "
                       f"rows (task.holdout_fraction={self.holdout_fraction}); lower "
                       "task.eval_size, or leave it unset (None) to take what the file holds")
    return [self._example(p) for p in self._eval[:n]]

  @property
  def num_eval(self) -> int:
    """Number of held-out rows in the file (the most `eval_examples` can return)."""
    return len(self._eval)

  @property
  def num_train(self) -> int:
    """Number of training rows (one epoch of the stream)."""
    return len(self._train)
