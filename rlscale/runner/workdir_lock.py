"""One run per workdir: an exclusive lock on `<workdir>/.lock` held for the run's life.

Two runs started together in one workdir would overwrite each other's metrics, summary and policy.
`train_and_evaluate` therefore takes this lock (process 0 only: the other processes of a
multi-process run share process 0's workdir) right after the workdir exists, before any slow step;
a second run is refused with `WorkdirInUse` (a ValueError: the command prints one line `error:
workdir ... is in use by another rlscale run (pid P on host H, since T); ...` and exits with status
2, rlscale.cli) and touches nothing in the workdir.

The lock is two `fcntl.flock(LOCK_EX | LOCK_NB)` locks, taken in this order: one on the workdir
directory itself (opened O_RDONLY | O_DIRECTORY) and one on the file. The kernel releases both
when the holding process ends in any way: kill -9 leaves the file behind but unlocked, and the
next run takes it (no stale lock to clean up by hand). A workdir is busy when either is held.
The directory lock is what makes deleting `.lock` by hand (a habit with stale lock files) safe:
the directory of a live run cannot be removed while it holds the run's files, so a second run
still finds it locked, and is refused without creating anything (the holder is then named
"pid unknown", its description having gone with the file). Where flock on a directory is not
supported (some network file systems answer EINVAL, ENOLCK, EOPNOTSUPP or EBADF), the file lock
alone decides, and deleting `.lock` by hand under a live run there lets a second run in.

The file holds the holder's pid, host and start time (JSON), written after locking, only to name
the holder in the refusal; whether a workdir is busy is always decided by the locks, never by
the file's presence or content. A clean release removes the file (while still holding the
locks), so a finished or failed run leaves no trace of it; an acquirer that locked a file that
was removed meanwhile notices (another inode at the path) and tries again on the new file.
A run stopped hard (kill -9, or a second Ctrl-C: exit status 130 without the clean release)
leaves the file behind, unlocked: harmless, the next run takes it as it is. flock works across
processes of one host and, through the kernel's emulation with POSIX locks, on NFS.

A workdir where the lock file cannot be created (a read-only file system, no write permission)
raises WorkdirReadOnly, one line naming the workdir. (`loop.train_and_evaluate` shows a finished
run's results before taking the lock, so a read-only finished workdir still answers.)

`holder(workdir)` tells whether a run holds the lock without taking it for longer than a probe
(the sweep launcher reports such a run as "running elsewhere" instead of starting a second copy).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import socket
import time
from typing import Iterator

from rlscale import outputs

LOCK_FILE = ".lock"
# A refused acquire retries for a moment: `holder` probes the lock with a shared lock for
# microseconds, and a run starting during such a probe must not be refused for it.
ACQUIRE_ATTEMPTS = 10
ACQUIRE_WAIT_SECONDS = 0.05
# flock's errnos for "busy" (held by another open file), and for "not supported on this file
# system" (the directory lock is then skipped: the file lock alone decides).
_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP,
                          errno.EBADF})
# Creating the lock file failed because the workdir cannot be written.
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)
UNKNOWN_HOLDER = "pid unknown: its .lock file was removed"


class WorkdirInUse(ValueError):
  """Another process holds the lock of the workdir (`acquire`).

  A ValueError, so `rlscale.cli.run_cli` prints it as one line `error: <message>` and exits with
  status 2 (EXIT_USER_ERROR: the --workdir given is in use). Attributes: workdir (as given),
  holder (description of the holding run, `describe`)."""

  def __init__(self, workdir: str, holder: str):
    self.workdir = workdir
    self.holder = holder
    super().__init__(f"workdir {workdir} is in use by another rlscale run ({holder}); wait for "
                     "it to finish or use another --workdir")


class WorkdirReadOnly(ValueError):
  """The lock file of the workdir cannot be created: a read-only file system or a folder this
  user may not write (`acquire`). A ValueError: one line `error: workdir W is read-only: ...`,
  exit status 2 (rlscale.cli). Attributes: workdir (as given)."""

  def __init__(self, workdir: str, error: OSError):
    self.workdir = workdir
    super().__init__(f"workdir {workdir} is read-only: cannot take its lock or write results "
                     f"({error.strerror or os.strerror(error.errno)})")


class WorkdirLock:
  """A held lock: the open, flock-ed lock file and workdir directory. `release()` (or leaving a
  `with` block) removes the file and unlocks both; the process ending releases them too.

  Attributes: path (the lock file), info ({"pid", "host", "since"} written into it),
  directory_locked (False where the file system does not support flock on a directory)."""

  def __init__(self, path: str, fd: int, info: dict, dir_fd: int | None = None):
    self.path = path
    self.info = info
    self.directory_locked = dir_fd is not None
    self._fd: int | None = fd
    self._dir_fd = dir_fd

  def release(self) -> None:
    """Removes the lock file if it is still this lock's (not replaced), then unlocks it by
    closing it, then the directory. Removing first, while locked, means no other process can
    lock this file after it is gone from the workdir. Idempotent."""
    if self._fd is None:
      return
    with contextlib.suppress(OSError):
      if _same_file(self._fd, self.path):
        os.unlink(self.path)
    os.close(self._fd)
    self._fd = None
    if self._dir_fd is not None:
      os.close(self._dir_fd)
      self._dir_fd = None

  def __enter__(self) -> "WorkdirLock":
    return self

  def __exit__(self, *exc) -> None:
    self.release()


def lock_path(workdir: str) -> str:
  """The lock file of `workdir`: `<workdir>/.lock`."""
  return os.path.join(workdir, LOCK_FILE)


def describe(info: dict) -> str:
  """The holder of a lock as one phrase from the file's JSON, e.g. "pid 1234 on host h, since
  2026-12-08 10:31:02"; fields missing (a holder that has not written them yet) are said so."""
  if not info.get("pid"):
    return "pid not recorded yet"
  text = f"pid {info['pid']} on host {info.get('host', '?')}"
  return f"{text}, since {info['since']}" if info.get("since") else text


def acquire(workdir: str, *, attempts: int = ACQUIRE_ATTEMPTS,
            wait_seconds: float = ACQUIRE_WAIT_SECONDS) -> WorkdirLock:
  """Takes the exclusive lock of `workdir` (which must exist) and records this process in it.

  Args: workdir (an existing folder), attempts and wait_seconds (a busy lock is tried `attempts`
    times, `wait_seconds` apart, before refusing: see ACQUIRE_ATTEMPTS).
  Returns: the held WorkdirLock.
  Raises: WorkdirInUse naming the holder when another process holds it (the directory or the
    file); WorkdirReadOnly when the lock file cannot be created for want of write access;
    OSError otherwise (a missing workdir).
  """
  path = lock_path(workdir)
  busy = 0
  while True:
    # The directory first: refused there, this run creates nothing (not even a new .lock).
    dir_fd = _lock_directory(workdir)
    if dir_fd is not _HELD_ELSEWHERE:
      try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
      except OSError as e:
        _close(dir_fd)
        if e.errno in _READ_ONLY:
          raise WorkdirReadOnly(workdir, e) from e
        raise
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except OSError as e:
        os.close(fd)
        _close(dir_fd)
        if e.errno not in _BUSY:
          raise
      else:
        if not _same_file(fd, path):  # its holder removed it as we opened it: lock the new file
          os.close(fd)
          _close(dir_fd)
          continue
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "since": datetime.datetime.now().isoformat(sep=" ", timespec="seconds")}
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(info).encode("utf-8"))
        return WorkdirLock(path, fd, info, dir_fd)
    busy += 1
    if busy >= attempts:
      raise WorkdirInUse(workdir, _describe_holder(path))
    time.sleep(wait_seconds)


def holder(workdir: str) -> str | None:
  """Description of the run holding the lock of `workdir` (`describe`), or None when none does
  (no lock file, or one left unlocked by a run that ended, e.g. by kill -9).

  Non-destructive: it creates nothing and probes the directory, then the file, each with a
  shared lock released at once (an `acquire` meeting the probe retries, ACQUIRE_ATTEMPTS). A
  holder whose .lock file was removed by hand is still found (by the directory) and described
  as UNKNOWN_HOLDER."""
  path = lock_path(workdir)
  try:
    if _probe(workdir, os.O_DIRECTORY):
      return _describe_holder(path)
  except (FileNotFoundError, NotADirectoryError):
    return None
  try:
    return _describe_holder(path) if _probe(path, 0) else None
  except (FileNotFoundError, NotADirectoryError):
    return None


@contextlib.contextmanager
def held(workdir: str) -> Iterator[WorkdirLock]:
  """Creates `workdir` (and missing parents) and holds its lock for the block.

  On leaving the block the lock is released (`WorkdirLock.release`); when the block raised,
  the folders this call created are then removed if they are empty (a run that failed before
  writing results, whose files `outputs.removed_on_failure` inside the block removed, leaves no
  workdir behind). A refused lock raises WorkdirInUse and changes nothing, not even a folder
  this call created: the run holding the lock is working in it.

  Raises: WorkdirInUse, OSError (as `acquire`; FileExistsError when `workdir` is a file)."""
  created = outputs.make_dirs(workdir)
  lock = acquire(workdir)
  try:
    yield lock
  except BaseException:
    lock.release()
    outputs.remove_empty_dirs(created)
    raise
  finally:
    lock.release()


_HELD_ELSEWHERE = object()  # `_lock_directory`'s answer when another open file holds it


def _lock_directory(workdir: str):
  """Takes flock(LOCK_EX | LOCK_NB) on the directory `workdir`: its open fd, _HELD_ELSEWHERE
  when busy, or None when this file system does not support flock on a directory (_UNSUPPORTED;
  the file lock alone decides then). Raises OSError when the directory cannot be opened."""
  dir_fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
  try:
    fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError as e:
    os.close(dir_fd)
    if e.errno in _BUSY:
      return _HELD_ELSEWHERE
    if e.errno in _UNSUPPORTED:
      return None
    raise
  return dir_fd


def _probe(path: str, flags: int) -> bool:
  """Whether another open file holds a flock on `path` (opened read-only with `flags`): a shared
  lock taken and released at once. False where flock is not supported there (_UNSUPPORTED).
  Raises FileNotFoundError or NotADirectoryError when `path` is absent."""
  fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | flags)
  try:
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
  except OSError as e:
    if e.errno in _BUSY:
      return True
    if e.errno in _UNSUPPORTED:
      return False
    raise
  finally:
    os.close(fd)  # also unlocks a probe that succeeded
  return False


def _describe_holder(path: str) -> str:
  """The holder named in lock file `path` (`describe`), or UNKNOWN_HOLDER when the file is gone
  (removed by hand while its run holds the workdir's directory lock)."""
  if not os.path.exists(path):
    return UNKNOWN_HOLDER
  return describe(_read_info(path))


def _close(fd: int | None) -> None:
  if fd is not None:
    os.close(fd)


def _read_info(path: str) -> dict:
  """The JSON a holder wrote into lock file `path`, or {} when absent, empty or partly written."""
  try:
    with open(path, encoding="utf-8") as f:
      info = json.loads(f.read() or "{}")
  except (OSError, ValueError):
    return {}
  return info if isinstance(info, dict) else {}


def _same_file(fd: int, path: str) -> bool:
  """Whether open file `fd` is the file now at `path` (same device and inode)."""
  try:
    here = os.stat(path)
  except FileNotFoundError:
    return False
  mine = os.fstat(fd)
  return (mine.st_dev, mine.st_ino) == (here.st_dev, here.st_ino)
