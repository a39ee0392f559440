"""rlscale.outputs: atomic writes, and folders that a failed command leaves as they were."""

import errno
import json
import os

import pytest

from rlscale import outputs


def _tree(root):
  return sorted(os.path.relpath(os.path.join(d, n), root)
                for d, dirs, files in os.walk(root) for n in dirs + files)


def test_write_json_is_atomic_and_keeps_the_old_file_on_failure(tmp_path):
  path = tmp_path / "new" / "r.json"
  outputs.write_json(str(path), {"a": 1}, indent=2)
  assert json.loads(path.read_text()) == {"a": 1}
  with pytest.raises(TypeError):
    outputs.write_json(str(path), {"a": object()})  # not serializable: nothing is written
  assert json.loads(path.read_text()) == {"a": 1}
  assert _tree(tmp_path) == ["new", "new/r.json"]  # no temporary file left
  with pytest.raises(TypeError):
    outputs.write_json(str(tmp_path / "other" / "deeper" / "x.json"), {1, 2})
  assert _tree(tmp_path) == ["new", "new/r.json"]  # nor the folders it would have created


def test_make_dirs_returns_what_it_created_and_remove_empty_dirs_undoes_it(tmp_path):
  created = outputs.make_dirs(str(tmp_path / "a" / "b" / "c"))
  a = tmp_path / "a"
  assert created == [str(a), str(a / "b"), str(a / "b" / "c")]
  assert outputs.make_dirs(str(tmp_path / "a" / "b")) == []
  (tmp_path / "a" / "keep.txt").write_text("x")  # someone else's file in a created folder
  outputs.remove_empty_dirs(created)
  assert _tree(tmp_path) == ["a", "a/keep.txt"]


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_removed_on_failure_removes_a_folder_it_created(tmp_path, exc):
  work = tmp_path / "runs" / "one"
  with pytest.raises(type(exc)):
    with outputs.removed_on_failure(str(work)) as path:
      assert path == str(work) and work.is_dir()
      (work / "config.json").write_text("{}")
      (work / "tb").mkdir()
      (work / "tb" / "events").write_text("header")
      raise exc
  assert _tree(tmp_path) == []  # runs/ too: the call created it


def test_removed_on_failure_leaves_an_existing_folder_as_it_was(tmp_path):
  (tmp_path / "notes.txt").write_text("mine")
  (tmp_path / "data").mkdir()
  with pytest.raises(ValueError):
    with outputs.removed_on_failure(str(tmp_path)):
      (tmp_path / "config.json").write_text("{}")
      (tmp_path / "data" / "added.txt").write_text("inside an old folder: stays")
      raise ValueError("bad input")
  assert _tree(tmp_path) == ["data", "data/added.txt", "notes.txt"]
  assert (tmp_path / "notes.txt").read_text() == "mine"


def test_removed_on_failure_keeps_everything_when_keep_says_so(tmp_path):
  work = tmp_path / "w"
  with pytest.raises(RuntimeError):
    with outputs.removed_on_failure(str(work), keep=lambda p: os.path.exists(
        os.path.join(p, "checkpoint"))):
      (work / "checkpoint").write_text("state")
      (work / "config.json").write_text("{}")
      raise RuntimeError("crash after a checkpoint")
  assert _tree(tmp_path) == ["w", "w/checkpoint", "w/config.json"]
  with outputs.removed_on_failure(str(tmp_path / "ok")):  # no failure: nothing removed
    (tmp_path / "ok" / "f").write_text("")
  assert (tmp_path / "ok" / "f").exists()


def test_staged_files_are_all_moved_in_or_none(tmp_path):
  out = tmp_path / "report"
  with outputs.staged_files(str(out)) as staging:
    for name in ("a.md", "b.png"):
      with open(os.path.join(staging, name), "w") as f:
        f.write("v1")
  assert _tree(out) == ["a.md", "b.png"]
  with pytest.raises(RuntimeError):
    with outputs.staged_files(str(out)) as staging:
      with open(os.path.join(staging, "a.md"), "w") as f:
        f.write("v2")
      raise RuntimeError("figure failed")
  assert _tree(out) == ["a.md", "b.png"] and (out / "a.md").read_text() == "v1"
  with pytest.raises(RuntimeError):
    with outputs.staged_files(str(tmp_path / "fresh")):
      raise RuntimeError("figure failed")
  assert not (tmp_path / "fresh").exists()


class _FullDisk:
  """A file object whose writes fail as on a full disk: OSError without a file name."""

  def __init__(self, *unused_args, **unused_kwargs):
    pass

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return False

  def write(self, data):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_refused_write_names_the_target_and_keeps_the_old_file(tmp_path, monkeypatch):
  path = tmp_path / "summary.json"
  path.write_text("old")
  monkeypatch.setattr(outputs, "open", _FullDisk, raising=False)  # what write_atomic opens
  with pytest.raises(OSError) as e:
    outputs.write_atomic(str(path), "new")
  assert (e.value.errno, e.value.filename) == (errno.ENOSPC, str(path))
  assert str(e.value) == f"[Errno 28] No space left on device: '{path}'"
  assert path.read_text() == "old" and _tree(tmp_path) == ["summary.json"]
