"""rlscale.paths: one environment variable, RLSCALE_HOME, moves everything rlscale writes outside a
run's workdir (prepared data, the notebooks' run folders); unset, the usual places are kept."""

import glob
import json
import os

import nbformat
import pytest

from rlscale import paths
from rlscale.tasks import local_math

COLAB = os.path.join(os.path.dirname(__file__), "..", "colab")


def test_unset_keeps_the_xdg_cache_and_the_temporary_folder(tmp_path, monkeypatch):
  monkeypatch.delenv(paths.HOME_ENV, raising=False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
  (tmp_path / "tmp").mkdir()
  monkeypatch.setattr(paths.tempfile, "tempdir", None)  # re-read TMPDIR
  assert paths.data_cache_dir() == str(tmp_path / "xdg" / "rlscale" / "tfds")
  scratch = paths.scratch_dir("rlscale_x_")
  assert os.path.dirname(scratch) == str(tmp_path / "tmp") and os.listdir(scratch) == []


def test_rlscale_home_moves_prepared_data_and_scratch_folders(tmp_path, monkeypatch, capsys):
  home = tmp_path / "home"
  monkeypatch.setenv(paths.HOME_ENV, str(home))
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  monkeypatch.setenv("TMPDIR", str(tmp_path))
  monkeypatch.setattr(paths.tempfile, "tempdir", None)
  scratch = paths.scratch_dir("rlscale_colab_")
  assert os.path.dirname(scratch) == str(home / "scratch")
  # Data preparation (task.data_dir unset) lands under $RLSCALE_HOME/tfds, not ~/.cache or XDG.
  data = tmp_path / "g.jsonl"
  data.write_text("\n".join(json.dumps({"question": f"q{i}", "answer": i}) for i in range(8)))
  task = local_math.LocalMathSource(str(data), seed=0, holdout_fraction=0.5)
  assert task.builder.data_dir.startswith(str(home / "tfds") + os.sep)
  assert not (tmp_path / "xdg").exists()
  assert str(home / "tfds") in capsys.readouterr().out  # the preparation line says where


def test_rlscale_home_naming_a_file_is_an_error(tmp_path, monkeypatch):
  (tmp_path / "f").write_text("")
  monkeypatch.setenv(paths.HOME_ENV, str(tmp_path / "f"))
  with pytest.raises(ValueError, match=r"RLSCALE_HOME=.* is a file; it must name a folder"):
    paths.data_cache_dir()


def test_notebooks_make_their_folders_through_rlscale_paths():
  # tempfile.mkdtemp would ignore RLSCALE_HOME.
  for path in sorted(glob.glob(os.path.join(COLAB, "*.ipynb"))):
    source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells
                       if c.cell_type == "code")
    assert "tempfile" not in source and "paths.scratch_dir(" in source, path
