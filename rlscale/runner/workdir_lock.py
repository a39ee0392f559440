"""One run per workdir: an exclusive lock on `<workdir>/.lock` held for the run's life.

Two runs started together in one workdir would overwrite each other's metrics, summary and policy.
`train_and_evaluate` therefore takes this lock (process 0 only: the other processes of a
multi-process run share process 0's workdir) right after the workdir exists, before any slow step;
a second run is refused with `WorkdirInUse` (a ValueError: the command prints one line `error:
workdir ... is in use by another rlscale run (pid P on host H, since T); ...` and exits with status
2, rlscale.cli) and touches nothing in the workdir.

The lock is `fcntl.flock(LOCK_EX | LOCK_NB)` on the file, so the kernel releases it when the
holding process ends in any way: kill -9 leaves the file behind but unlocked, and the next run
takes it (no stale lock to clean up by hand). The file holds the holder's pid, host and start time
(JSON), written after locking, only to name the holder in the refusal; whether a workdir is busy
is always decided by the lock, never by the file's presence or content. A clean release removes
the file (while still holding the lock), so a finished or failed run leaves no trace of it;
an acquirer that locked a file that was removed meanwhile notices (another inode at the path)
and tries again on the new file. flock works across processes of one host and, through the
kernel's emulation with POSIX locks, on NFS.

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


class WorkdirLock:
  """A held lock: the open, flock-ed lock file. `release()` (or leaving a `with` block) unlocks
  it and removes the file; the process ending releases it too.

  Attributes: path (the lock file), info ({"pid", "host", "since"} written into it)."""

  def __init__(self, path: str, fd: int, info: dict):
    self.path = path
    self.info = info
    self._fd: int | None = fd

  def release(self) -> None:
    """Removes the lock file if it is still this lock's (not replaced), then unlocks it by
    closing it. Removing first, while locked, means no other process can lock this file after
    it is gone from the workdir. Idempotent."""
    if self._fd is None:
      return
    with contextlib.suppress(OSError):
      if _same_file(self._fd, self.path):
        os.unlink(self.path)
    os.close(self._fd)
    self._fd = None

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
  Raises: WorkdirInUse naming the holder when another process holds it; OSError when the lock
    file cannot be created (a read-only folder, a missing workdir).
  """
  path = lock_path(workdir)
  busy = 0
  while True:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      os.close(fd)
      if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
        raise
      busy += 1
      if busy >= attempts:
        raise WorkdirInUse(workdir, describe(_read_info(path))) from None
      time.sleep(wait_seconds)
      continue
    if not _same_file(fd, path):  # its holder removed it as we opened it: lock the new file
      os.close(fd)
      continue
    info = {"pid": os.getpid(), "host": socket.gethostname(),
            "since": datetime.datetime.now().isoformat(sep=" ", timespec="seconds")}
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(info).encode("utf-8"))
    return WorkdirLock(path, fd, info)


def holder(workdir: str) -> str | None:
  """Description of the run holding the lock of `workdir` (`describe`), or None when none does
  (no lock file, or one left unlocked by a run that ended, e.g. by kill -9).

  Non-destructive: it creates nothing and probes with a shared lock released at once (an
  `acquire` meeting the probe retries, ACQUIRE_ATTEMPTS)."""
  path = lock_path(workdir)
  try:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
  except (FileNotFoundError, NotADirectoryError):
    return None
  try:
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
  except OSError as e:
    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
      raise
    return describe(_read_info(path))
  finally:
    os.close(fd)  # also unlocks a probe that succeeded
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
