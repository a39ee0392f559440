"""Local GSM8K/MATH JSONL -> TFDS array_record (GeneratorBasedBuilder) -> data source, round trip."""

import json
import os
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
def source(jsonl):
  return local_math.LocalMathSource(jsonl, seed=0, holdout_fraction=FRACTION)


def _question(row):
  return row.get("question", row.get("problem"))


def _split():
  """(training row indices, held-out row indices), from the question hashes."""
  held = [i for i, r in enumerate(ROWS) if holdout.is_held_out(_question(r), FRACTION)]
  return [i for i in range(len(ROWS)) if i not in held], held


def test_round_trip(source, jsonl):
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
  # The prepared dataset is array_record files under data_dir, and TensorFlow was not needed.
  prepared = source.builder.data_dir
  assert prepared.startswith(os.path.join(os.path.dirname(jsonl), "tfds", "rlscale_local_math"))
  assert any(".array_record" in f for f in os.listdir(prepared))
  assert "tensorflow" not in sys.modules


def test_stream_determinism_and_reuse(source, jsonl):
  again = local_math.LocalMathSource(jsonl, seed=0, holdout_fraction=FRACTION)
  assert again.builder.data_dir == source.builder.data_dir  # prepared once, reused
  assert [again.train_example(i) for i in range(9)] == [source.train_example(i) for i in range(9)]
  other = local_math.LocalMathSource(jsonl, seed=1, holdout_fraction=FRACTION)
  n = source.num_train
  for task in (source, other):
    for epoch in range(3):  # every epoch is a permutation of the training rows
      rows = [task.train_example(epoch * n + j).metadata["index"] for j in range(n)]
      assert sorted(rows) == _split()[0]


def test_errors(tmp_path, source):
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
