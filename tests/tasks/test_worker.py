"""The worker process's sandbox: empty temporary directory, cleared environment, resource limits."""

import errno
import json
import os
import subprocess
import sys
import tempfile

import pytest

from rlscale.tasks import worker


@pytest.fixture
def client():
  c = worker.WorkerClient()  # its own child, so the process-wide one is left alone
  yield c
  c.close()


def _report(client):
  response, failure = client.call({"op": "sandbox"}, timeout_s=60.0)
  assert failure == "", failure
  return response


def test_child_runs_isolated_in_an_empty_temporary_directory(client):
  report = _report(client)
  workdir = client.workdir
  assert report["cwd"] == os.path.realpath(workdir)
  assert os.path.dirname(workdir) == tempfile.gettempdir()
  assert os.path.basename(workdir).startswith("rlscale-worker-")
  assert report["entries"] == []
  assert report["isolated"] is True
  assert report["env"] == {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
                           "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "1",
                           "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
  assert report["limits"] == {"RLIMIT_AS": 2 << 30, "RLIMIT_FSIZE": 0, "RLIMIT_CORE": 0,
                              "RLIMIT_NOFILE": 64, "RLIMIT_NPROC": 0}


def test_directory_is_removed_when_the_child_ends(client):
  first = _report(client)["cwd"]
  assert os.path.isdir(first)
  response, reason = client.call({"op": "sleep", "seconds": 30}, timeout_s=0.3)
  assert response is None and reason == "timeout after 0.3 s"
  assert not os.path.exists(first)  # killed child: its directory is gone
  second = _report(client)["cwd"]
  assert second != first and os.path.isdir(second)
  client.close()
  assert not os.path.exists(second) and client.workdir is None


def test_compare_still_works_in_the_sandbox(client):
  response, failure = client.call(
      {"op": "compare", "answer": "(x+1)^2", "reference": "x^2+2x+1", "rel_tol": 1e-9,
       "percent": "strip"}, timeout_s=60.0)
  assert failure == "" and response["equal"] is True


_LIMITS_SCRIPT = r"""
import json, os, sys, threading
from rlscale.tasks import worker
worker.limit_resources()
result = {}
try:
  open("created", "w").close()
  result["create"] = "ok"
except OSError as e:
  result["create"] = type(e).__name__
try:
  with open("written", "w") as f:
    f.write("x")
  result["write"] = "ok"
except OSError as e:
  result["write"] = e.errno
try:
  pid = os.fork()
  if pid == 0:
    os._exit(0)
  os.waitpid(pid, 0)
  result["fork"] = "ok"
except OSError as e:
  result["fork"] = type(e).__name__
try:
  t = threading.Thread(target=lambda: None)
  t.start()
  t.join()
  result["thread"] = "ok"
except RuntimeError:
  result["thread"] = "RuntimeError"
sys.stdout.write(json.dumps(result))
"""


def test_limits_stop_writes_and_for_unprivileged_users_fork(tmp_path):
  # stdout must be a pipe: under RLIMIT_FSIZE 0 even printing to a file fails.
  out = subprocess.run([sys.executable, "-c", _LIMITS_SCRIPT], cwd=tmp_path, timeout=120,
                       check=True, stdout=subprocess.PIPE).stdout
  result = json.loads(out)
  # What the limits cannot stop (documented): creating an empty file.
  assert result["create"] == "ok" and os.path.getsize(tmp_path / "created") == 0
  assert result["write"] == errno.EFBIG and os.path.getsize(tmp_path / "written") == 0
  if os.geteuid() == 0:
    # The kernel does not enforce RLIMIT_NPROC for root (documented in worker.py).
    assert result["fork"] == "ok"
  else:
    assert result["fork"] == "BlockingIOError" and result["thread"] == "RuntimeError"


def test_a_scorer_printing_leaves_the_replies_in_step():
  """reasoning-gym's tower_of_hanoi prints a line for a move to a peg that does not exist; before
  replies had their own channel that line took the reply's place and killed the worker."""
  from rlscale.tasks.reasoning_gym_source import ReasoningGymSource  # pylint: disable=g-import-not-at-top
  source = ReasoningGymSource("tower_of_hanoi", {}, seed=0, scorer="native")
  example = next(e for e in map(source.train_example, range(50)) if len(e.answer) < 400)
  restarts = worker.client().restarts
  score = source.score("<answer>Move disk 1 from Peg 9 to Peg 2</answer>", example)
  assert score.reward == 0.0 and score.reason.startswith("native tower_of_hanoi"), score
  assert source.score(f"<answer>{example.answer}</answer>", example).reward == 1.0
  assert worker.client().restarts == restarts


def test_a_reply_out_of_step_kills_the_child(client):
  """A line in the reply channel that is not the reply to the request sent (a stray JSON value a
  library printed) is never taken as the answer: the child is killed and the call fails."""
  assert client.call({"op": "sandbox"}, timeout_s=60.0)[1] == ""
  client._buffer = b'0.5\n' + client._buffer  # pylint: disable=protected-access
  response, failure = client.call({"op": "sandbox"}, timeout_s=60.0)
  assert response is None and "ValueError" in failure and client.restarts == 1
  assert client.call({"op": "sandbox"}, timeout_s=60.0)[1] == ""
