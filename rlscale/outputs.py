"""Outputs that are whole or absent: a failed command leaves nothing half-made behind.

A command that fails (bad input, an exception during setup, Ctrl-C) must leave no output that a
later run or a reader could mistake for a result, and must never remove data it did not make:

  * `write_atomic` / `write_json` write a file through a temporary file renamed over the target,
    so a reader sees the old version or the new one, never a torn file, and a failure (a value
    json cannot serialize, a full disk) keeps the old version and creates no folder;
  * `make_dirs` / `remove_empty_dirs` create folders and, after a failure, remove exactly the ones
    that were created and are still empty;
  * `removed_on_failure` wraps a command writing into a folder: on any exception it removes what
    the command added to the folder, and the folder itself (with the parents it created) when the
    command created it, unless `keep(folder)` says the folder now holds something worth keeping
    (a run's checkpoints or metrics: a run never loses data);
  * `staged_files` writes a set of files (a report) into a temporary folder and moves them into
    place only when all were written, so a failure halfway keeps the previous set whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from typing import Any, Callable, Iterator


def write_atomic(path: str, data: str | bytes) -> None:
  """Writes `data` (text as UTF-8) to `path` atomically: into `<path>.<pid>.tmp` (created with the
  user's umask, as open() does), then renamed over `path`; the folder is created when missing.
  The temporary name is per process, so processes writing the same file at once (the hosts of a
  multi-host run sharing a warm-start cache, runs of a sweep) never interleave their bytes.
  On failure the temporary file and the folders created are removed, `path` keeps its previous
  content, and the exception propagates; an OSError without a file name (a write the disk
  refused: ENOSPC, EFBIG) is raised again as OSError(errno, strerror, path)."""
  tmp = f"{path}.{os.getpid()}.tmp"
  created = make_dirs(os.path.dirname(os.path.abspath(path)))
  try:
    with open(tmp, "wb") as f:
      f.write(data.encode("utf-8") if isinstance(data, str) else data)
    os.replace(tmp, path)
  except OSError as e:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    remove_empty_dirs(created)
    if e.filename is not None:
      raise
    # A write refused by the disk (ENOSPC, EFBIG) carries no file name; name the target.
    raise OSError(e.errno, e.strerror, path) from e
  except BaseException:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    remove_empty_dirs(created)
    raise


def write_json(path: str, value: Any, **dump_kwargs) -> None:
  """`json.dump(value, f, **dump_kwargs)` into `path`, atomically (`write_atomic`): the value is
  serialized before anything is written, so a TypeError for an unserializable value leaves
  `path` as it was."""
  write_atomic(path, json.dumps(value, **dump_kwargs))


def make_dirs(path: str) -> list[str]:
  """`os.makedirs(path, exist_ok=True)`; returns the folders it created, outermost first (empty
  when `path` existed)."""
  missing = []
  path = os.path.abspath(path)
  while path and not os.path.isdir(path):
    missing.append(path)
    parent = os.path.dirname(path)
    if parent == path:
      break
    path = parent
  for folder in reversed(missing):
    os.makedirs(folder, exist_ok=True)
  return missing[::-1]


def remove_empty_dirs(created: list[str]) -> None:
  """Removes the folders `make_dirs` created, innermost first, while they are empty (a folder
  another process has written into since stays, and so do its parents)."""
  for folder in reversed(created):
    try:
      os.rmdir(folder)
    except FileNotFoundError:
      continue
    except OSError:
      return  # not empty: in use by someone else


def _remove(path: str) -> None:
  if os.path.isdir(path) and not os.path.islink(path):
    shutil.rmtree(path, ignore_errors=True)
  else:
    with contextlib.suppress(OSError):
      os.remove(path)


def _never(path: str) -> bool:
  del path
  return False


@contextlib.contextmanager
def removed_on_failure(path: str, keep: Callable[[str], bool] = _never) -> Iterator[str]:
  """Creates folder `path` (and missing parents) for the block; if the block raises (any
  exception, KeyboardInterrupt included) and `keep(path)` is False, removes the entries the block
  added to `path`, then `path` and the parents this call created. Entries that were there before
  stay, so a folder that existed before the block is left as it was (an entry the block
  overwrote keeps its new content). The exception propagates.

  Args:
    path: the command's output folder (e.g. a run's workdir).
    keep: called after a failure; True when the folder holds something worth keeping (then
      nothing is removed).

  Yields: `path`, absolute.

  Raises: FileExistsError/NotADirectoryError when `path` (or a parent) is a file.
  """
  path = os.path.abspath(path)
  before = set(os.listdir(path)) if os.path.isdir(path) else set()
  created = make_dirs(path)
  try:
    yield path
  except BaseException:
    if os.path.isdir(path) and not keep(path):
      for name in sorted(set(os.listdir(path)) - before):
        _remove(os.path.join(path, name))
      remove_empty_dirs(created)
    raise


@contextlib.contextmanager
def staged_files(out_dir: str) -> Iterator[str]:
  """Yields a temporary folder inside `out_dir` (created if missing) to write files into; when
  the block succeeds, each file written there is moved into `out_dir` (os.replace: an older file
  of the same name is replaced), else `out_dir` is left as it was (and removed when this call
  created it). Only the files at the top of the temporary folder are moved."""
  with removed_on_failure(out_dir) as out:
    with tempfile.TemporaryDirectory(prefix=".staging-", dir=out) as staging:
      yield staging
      for name in sorted(os.listdir(staging)):
        os.replace(os.path.join(staging, name), os.path.join(out, name))
