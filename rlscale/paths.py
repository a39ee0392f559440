"""Where rlscale writes outside a run's workdir, and the one setting that moves all of it.

A run writes into its `--workdir`; two things live elsewhere, because they outlast or precede a
run: the prepared local datasets (TFDS array_record files, shared by runs and sweeps) and the
folders the notebooks create for their runs. Without a setting they follow the usual places: the
XDG cache (`$XDG_CACHE_HOME/rlscale/tfds`, else `~/.cache/rlscale/tfds`) and the system temporary
folder (`$TMPDIR`, else /tmp). With the environment variable RLSCALE_HOME set to a folder, both go
under it (`$RLSCALE_HOME/tfds`, `$RLSCALE_HOME/scratch`), e.g. onto a large scratch disk or a
mounted drive in Colab; `task.data_dir` still overrides the data folder for one run.
"""

from __future__ import annotations

import os
import tempfile

HOME_ENV = "RLSCALE_HOME"
DATA_SUBDIR = "tfds"
SCRATCH_SUBDIR = "scratch"


def rlscale_home() -> str | None:
  """The absolute folder named by RLSCALE_HOME (`~` expanded), or None when it is unset or empty.

  Raises ValueError when it names an existing file (not a folder)."""
  value = os.environ.get(HOME_ENV, "").strip()
  if not value:
    return None
  home = os.path.abspath(os.path.expanduser(value))
  if os.path.isfile(home):
    raise ValueError(f"environment variable {HOME_ENV}={value!r} is a file; it must name a folder "
                     "(created when missing) for rlscale's data cache and scratch folders")
  return home


def data_cache_dir() -> str:
  """The folder for prepared datasets: `$RLSCALE_HOME/tfds`, else `$XDG_CACHE_HOME/rlscale/tfds`
  (a relative XDG_CACHE_HOME is ignored, as the XDG base-directory spec asks), else
  `~/.cache/rlscale/tfds`."""
  home = rlscale_home()
  if home is not None:
    return os.path.join(home, DATA_SUBDIR)
  root = os.environ.get("XDG_CACHE_HOME", "")
  if not os.path.isabs(root):
    root = os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(root, "rlscale", DATA_SUBDIR)


def scratch_dir(prefix: str) -> str:
  """A new empty folder named `<prefix><random>` for a notebook's run (as `tempfile.mkdtemp`):
  under `$RLSCALE_HOME/scratch` (created when missing), else in the system temporary folder.
  Returns its absolute path; the caller owns it (nothing removes it)."""
  home = rlscale_home()
  parent = None if home is None else os.path.join(home, SCRATCH_SUBDIR)
  if parent is not None:
    os.makedirs(parent, exist_ok=True)
  return tempfile.mkdtemp(prefix=prefix, dir=parent)
