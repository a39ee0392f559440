"""Local GSM8K/MATH JSONL -> TFDS array_record (GeneratorBasedBuilder) -> data source, round trip."""

import hashlib
import json
import logging
import os
import shutil
import sys

import pytest

from rlscale.tasks import holdout
from rlscale.tasks import local_math

ROWS = [
    {"question": "Ann has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"},
    {"question": "Tom earns $1,200 a month. Yearly?", "answer": "1200 * 12 = 14400\n#### 14,400"},
    {"question": "Half of 10?", "answer": "10 / 2 = 5\n#### 5"},
    {"problem": "What is $1/2 + 0$?", "solution": r"It is $\boxed{\frac{1}{2}}$."},
    {"problem": "Solve $x^2 = 4$, $x > 0$.", "solution": r"So $x = \boxed{2}$.", "answer": "2"},
]
FINAL = ["7", "14,400", "5", r"\frac{1}{2}", "2"]
FRACTION = 0.5


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory):
  path = tmp_path_factory.mktemp("math") / "five.jsonl"
  path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n\n")
  return str(path)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  """XDG_CACHE_HOME for this module's sources: the prepared data never goes to ~/.cache."""
  root = tmp_path_factory.mktemp("xdg_cache")
  with pytest.MonkeyPatch.context() as patch:
    patch.setenv("XDG_CACHE_HOME", str(root))
    yield root


@pytest.fixture(scope="module")
def source(jsonl, cache):
  del cache
  return local_math.LocalMathSource(jsonl, seed=0, holdout_fraction=FRACTION)


def _question(row):
  return row.get("question", row.get("problem"))


def _split():
  """(training row indices, held-out row indices), from the question hashes."""
  held = [i for i, r in enumerate(ROWS) if holdout.is_held_out(_question(r), FRACTION)]
  return [i for i in range(len(ROWS)) if i not in held], held


def test_round_trip(source, jsonl, cache):
  train, held = _split()
  assert held and train  # these five questions split both ways at 0.5
  assert source.num_train == len(train)
  # One epoch of the stream is a permutation of the training rows.
  epoch = [source.train_example(i) for i in range(len(train))]
  assert sorted(e.metadata["index"] for e in epoch) == train
  for e in epoch:
    i = e.metadata["index"]
    assert (e.prompt, e.answer) == (_question(ROWS[i]), FINAL[i])
    assert e.metadata["solution"] == ROWS[i].get("answer" if "question" in ROWS[i] else
                                                 "solution")
    assert source.score(source.format_target(e), e).reward == 1.0
  evals = source.eval_examples(len(held))
  assert [e.metadata["index"] for e in evals] == held
  assert [e.answer for e in evals] == [FINAL[i] for i in held]
  # The prepared dataset is array_record files in the user's cache folder, keyed by the file's
  # content hash, nothing next to the data file, and TensorFlow was not needed.
  prepared = source.builder.data_dir
  with open(jsonl, "rb") as f:
    digest = hashlib.sha256(f.read() + repr(FRACTION).encode()).hexdigest()[:16]
  assert prepared == os.path.join(str(cache), "rlscale", "tfds", "rlscale_local_math",
                                  f"sha{digest}", "1.1.0")
  assert any(".array_record" in f for f in os.listdir(prepared))
  assert os.listdir(os.path.dirname(jsonl)) == ["five.jsonl"]
  assert "tensorflow" not in sys.modules


def test_stream_determinism_and_reuse(source, jsonl, capsys):
  copy = os.path.join(os.path.dirname(os.path.dirname(jsonl)), "copy.jsonl")
  shutil.copy(jsonl, copy)  # the same content under another name: the same prepared data
  again = local_math.LocalMathSource(copy, seed=0, holdout_fraction=FRACTION)
  assert again.builder.data_dir == source.builder.data_dir  # prepared once, reused
  assert "Preparing" not in capsys.readouterr().out
  assert [again.train_example(i) for i in range(9)] == [source.train_example(i) for i in range(9)]
  other = local_math.LocalMathSource(jsonl, seed=1, holdout_fraction=FRACTION)
  n = source.num_train
  for task in (source, other):
    for epoch in range(3):  # every epoch is a permutation of the training rows
      rows = [task.train_example(epoch * n + j).metadata["index"] for j in range(n)]
      assert sorted(rows) == _split()[0]


def test_errors(tmp_path, source, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  with pytest.raises(FileNotFoundError, match="Put a JSONL file there .*nothing is downloaded"):
    local_math.LocalMathSource(str(tmp_path / "missing.jsonl"), seed=0)
  with pytest.raises(ValueError, match="task.data_path must be set"):
    local_math.LocalMathSource(None, seed=0)
  bad = tmp_path / "bad.jsonl"
  bad.write_text(json.dumps({"q": 1}) + "\n")
  with pytest.raises(ValueError, match=r"bad.jsonl:1: expected GSM8K-style"):
    local_math.LocalMathSource(str(bad), seed=0)
  bad.write_text(json.dumps({"question": "a", "answer": "no marker"}) + "\n")
  with pytest.raises(ValueError, match="no '#### N' line"):
    local_math.read_jsonl(str(bad))
  bad.write_text("{not json\n")
  with pytest.raises(ValueError, match="bad.jsonl:1: invalid JSON"):
    local_math.read_jsonl(str(bad))
  with pytest.raises(ValueError, match="task.eval_size=5 but the file has only"):
    source.eval_examples(5)


def _load(tmp_path, monkeypatch, text: bytes, name="rows.jsonl"):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  path = tmp_path / name
  path.write_bytes(text)
  return [r["answer"] for r in local_math.read_jsonl(str(path))]


def test_explicit_and_numeric_answers_are_references(tmp_path, monkeypatch):
  rows = [
      {"problem": "p", "solution": r"so \boxed{4}", "answer": 3},  # explicit answer wins: 3
      {"question": "q", "answer": 72},  # a GSM8K-style number is the reference
      {"question": "q", "answer": 2.5},
      {"problem": "p", "solution": r"\boxed{4}", "answer": "5"},
      {"problem": "p", "solution": r"\boxed{4}", "answer": None},  # null: the boxed answer
      {"problem": "p", "solution": r"\boxed{4}", "answer": -0.125},
  ]
  text = "\n".join(json.dumps(r) for r in rows).encode()
  assert _load(tmp_path, monkeypatch, text) == ["3", "72", "2.5", "5", "4", "-0.125"]


@pytest.mark.parametrize("row, field_type", [
    ({"question": "q", "answer": True}, "true (bool)"),
    ({"question": "q", "answer": [72]}, "[72] (list)"),
    ({"question": "q", "answer": None}, "null (NoneType)"),
    ({"problem": "p", "solution": r"\boxed{4}", "answer": {"v": 3}}, '{"v": 3} (dict)'),
    ({"problem": "p", "solution": r"\boxed{4}", "answer": float("nan")}, "NaN (float)"),
])
def test_other_answer_types_name_the_row_and_field(tmp_path, monkeypatch, row, field_type):
  good = json.dumps({"question": "q", "answer": 1}).encode()
  with pytest.raises(ValueError) as e:
    _load(tmp_path, monkeypatch, good + b"\n" + json.dumps(row).encode())
  assert str(e.value) == (f"{tmp_path / 'rows.jsonl'}:2: field 'answer' must be a string or a "
                          f"number, got {field_type}")


def test_byte_order_mark_and_crlf_load(tmp_path, monkeypatch):
  rows = [{"question": "a", "answer": "x\n#### 72"}, {"question": "b", "answer": "#### 5"}]
  lines = [json.dumps(r).encode() for r in rows]
  assert _load(tmp_path, monkeypatch, b"\xef\xbb\xbf" + b"\n".join(lines)) == ["72", "5"]
  assert _load(tmp_path, monkeypatch, b"\r\n".join(lines) + b"\r\n") == ["72", "5"]
  assert _load(tmp_path, monkeypatch, b"\xef\xbb\xbf" + b"\r\n".join(lines)) == ["72", "5"]


@pytest.mark.parametrize("text, line, column", [
    # "café" in Latin-1 on line 2: `{"question": "caf` is 17 characters, the 0xe9 the 18th
    (b'{"question": "a", "answer": "#### 1"}\n{"question": "caf\xe9", "answer": "#### 2"}\n', 2, 18),
    # after a byte-order mark (no column) and a two-byte "é" (one column): 15 before the 0xff
    (b'\xef\xbb\xbf{"question": "\xc3\xa9\xff"}\n', 1, 16),
    (b'{"question": "a", "answer": "#### 1"}\r\n\r\n\x80\r\n', 3, 1),  # CRLF lines count
])
def test_bytes_that_are_not_utf8_are_named_by_line_and_column(tmp_path, monkeypatch, text, line,
                                                              column):
  with pytest.raises(ValueError) as e:
    _load(tmp_path, monkeypatch, text)
  bad = next(b for b in text if b in (0xe9, 0xff, 0x80))
  assert str(e.value) == (f"{tmp_path / 'rows.jsonl'}:{line}: not valid UTF-8 (byte 0x{bad:02x} "
                          f"at column {column}); convert the file to UTF-8 (e.g. iconv -f <its "
                          "encoding> -t utf-8)")


def _tree(root):
  return sorted(os.path.relpath(os.path.join(d, n), root)
                for d, dirs, files in os.walk(root) for n in dirs + files)


def test_cache_folder_message_and_override(tmp_path, monkeypatch, capsys, caplog):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  data = tmp_path / "data"
  data.mkdir()
  path = data / "g.jsonl"
  path.write_text("\n".join(json.dumps({"question": f"q{i}", "answer": i}) for i in range(8)))
  data.chmod(0o555)  # a read-only data folder is fine: nothing is written next to the file
  try:
    task = local_math.LocalMathSource(str(path), seed=0, holdout_fraction=0.5)
  finally:
    data.chmod(0o755)
  out = capsys.readouterr().out
  assert "Downloading and preparing" not in out and "Subsequent calls" not in out
  assert not [r for r in caplog.records if r.levelno < logging.ERROR and "custom" in r.message]
  assert out == (f"Preparing {path} once for reading (nothing is downloaded) into "
                 f"{task.builder.data_dir}\n")
  assert task.builder.data_dir.startswith(str(tmp_path / "xdg" / "rlscale" / "tfds") + os.sep)
  assert not [f for f in _tree(tmp_path / "xdg") if ".building-" in f]  # the staging is gone
  # A second run reuses it silently; task.data_dir overrides the cache folder.
  local_math.LocalMathSource(str(path), seed=1, holdout_fraction=0.5)
  assert capsys.readouterr().out == ""
  other = local_math.LocalMathSource(str(path), seed=0, holdout_fraction=0.5,
                                     data_dir=str(tmp_path / "mine"))
  assert other.builder.data_dir.startswith(str(tmp_path / "mine") + os.sep)
  assert [e.answer for e in other.eval_examples(2)] == [e.answer for e in task.eval_examples(2)]


def test_failed_build_leaves_nothing_behind(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  path = tmp_path / "bad.jsonl"
  path.write_text(json.dumps({"question": "q", "answer": 1}) + "\n" + json.dumps({"q": 1}))
  with pytest.raises(ValueError, match=r"bad.jsonl:2: expected GSM8K-style"):
    local_math.LocalMathSource(str(path), seed=0)
  assert not (tmp_path / "xdg").exists()  # not even the cache folders it created
  existing = tmp_path / "mine"
  existing.mkdir()
  with pytest.raises(ValueError, match=r"bad.jsonl:2"):
    local_math.LocalMathSource(str(path), seed=0, data_dir=str(existing))
  assert os.listdir(existing) == []  # a folder the user made stays, and stays empty
  assert sorted(os.listdir(tmp_path)) == ["bad.jsonl", "mine"]


@pytest.mark.parametrize("exc", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_an_interrupted_build_leaves_nothing_and_the_next_run_rebuilds(tmp_path, monkeypatch,
                                                                       capsys, exc):
  """A preparation that stops halfway (an exception or Ctrl-C while rows are being written)
  leaves no folder a later run could take for a finished build; the next run builds it."""
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  path = tmp_path / "g.jsonl"
  path.write_text("\n".join(json.dumps({"question": f"q{i}", "answer": i}) for i in range(8)))
  generate = local_math.LocalMathBuilder._generate_examples

  def stops_after_three_rows(self):
    for i, example in enumerate(generate(self)):
      if i == 3:
        raise exc
      yield example
  monkeypatch.setattr(local_math.LocalMathBuilder, "_generate_examples", stops_after_three_rows)
  with pytest.raises(type(exc)):
    local_math.LocalMathSource(str(path), seed=0, holdout_fraction=0.5)
  assert not (tmp_path / "xdg").exists()
  mine = tmp_path / "mine"  # a cache folder the user made stays, empty
  mine.mkdir()
  with pytest.raises(type(exc)):
    local_math.LocalMathSource(str(path), seed=0, holdout_fraction=0.5, data_dir=str(mine))
  assert os.listdir(mine) == []
  capsys.readouterr()
  monkeypatch.setattr(local_math.LocalMathBuilder, "_generate_examples", generate)
  task = local_math.LocalMathSource(str(path), seed=0, holdout_fraction=0.5, data_dir=str(mine))
  assert capsys.readouterr().out.startswith(f"Preparing {path} once")
  assert task.num_train + task.num_eval == 8
  assert [f for f in _tree(mine) if ".building-" in f] == []
