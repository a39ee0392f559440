"""End-to-end runs with asynchronous rollouts on a tiny config: k = 0 is the synchronous loop,
a run at k = 1 is reproducible whatever the overlap, and the fault paths (Ctrl-C then resume, a
failing reward) behave as `rlscale.runner.async_rollouts` documents.

The config is the multi-process tests' (`multihost_config`, one process here): REINFORCE++
with the KL in the reward, so every step has a gradient and the policy moves enough for stale
batches to differ from fresh ones; 3 steps, a checkpoint after each."""

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from rlscale.runner import async_rollouts, checkpoints, rollouts
from rlscale.runner.loop import train_and_evaluate
from rlscale.runner.metrics_log import read_metrics
from tests.runner.runner_configs import comparable, multihost_config, signal_self_on
from tests.timeouts import hang_timeout

STEPS = 3
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config(sft_cache, k):
  config = multihost_config(sft_cache, STEPS)
  config.rl.max_off_policy_steps = k
  return config


def _records(workdir):
  return read_metrics(os.path.join(workdir, "metrics.jsonl"))


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
  """finished(k): the workdir of an uninterrupted run at k, run on first use (once per module);
  finished.sft_cache: the warm-start cache every run of the module shares."""
  done = {}

  def workdir(k):
    if k not in done:
      done[k] = str(tmp_path_factory.mktemp(f"k{k}"))
      train_and_evaluate(_config(workdir.sft_cache, k), done[k])
    return done[k]
  workdir.sft_cache = str(tmp_path_factory.mktemp("sft_cache"))
  return workdir


def test_k0_is_the_synchronous_loop(finished, tmp_path, monkeypatch):
  """At k = 0 nothing of the asynchronous machinery runs and nothing of it is written: the
  records carry no rollout/* field, the checkpoints no in-flight batches, and a config written
  before the fields existed gives the same metrics."""
  def refuse(*args, **kwargs):
    raise AssertionError("asynchronous rollouts constructed at k = 0")
  for cls in (async_rollouts.ThreadRollouts, async_rollouts.InlineRollouts):
    monkeypatch.setattr(cls, "__init__", refuse)
  k0_run = finished(0)
  old = _config(finished.sft_cache, 0)
  for field in ("max_off_policy_steps", "off_policy_correction", "tis_cap",
                "decoupled_weight_cap"):
    del old.rl[field]
  del old.rollout["async_overlap"]
  train_and_evaluate(old, str(tmp_path))
  records = _records(k0_run)
  assert not [k for r in records for k in r if k.startswith("rollout/")]
  assert comparable(_records(str(tmp_path))) == comparable(records)
  for step in os.listdir(os.path.join(k0_run, "checkpoints")):
    assert "rollouts" not in os.listdir(os.path.join(k0_run, "checkpoints", step))


def test_k1_staleness_and_first_step(finished):
  records = _records(finished(1))[1:]
  assert [r["rollout/policy_version"] for r in records] == [0, 0, 1]
  assert [r["rollout/staleness_mean"] for r in records] == [0.0, 1.0, 1.0]
  assert [r["rollout/staleness_max"] for r in records] == [0, 1, 1]
  assert [r["samples"] for r in records] == [8, 16, 24]  # responses consumed, as at k = 0
  # Batch 0 is drawn by the same policy with the same key at every k; its update differs only by
  # the correction's weights (1 up to float rounding: pi_prox = pi_behav).
  sync = _records(finished(0))[1]
  rollout_side = [k for k in sync if k.startswith(("reward/", "response/", "tokens/", "groups/"))]
  assert {k: records[0][k] for k in rollout_side} == {k: sync[k] for k in rollout_side}
  assert records[0]["train/is_weight"] == pytest.approx(1.0, abs=1e-5)
  # The stale batches are trained with the decoupled weights (the policy moved: not all 1).
  assert any(abs(r["train/is_weight"] - 1.0) > 1e-4 for r in records[1:])


def test_k1_reproducible_whatever_the_overlap(finished, tmp_path):
  """The same seed gives the same metrics and final parameters with the rollout thread and
  with asynchronous dispatch (one thread): what a batch is drawn from never depends on
  timing."""
  k1_run = finished(1)
  config = _config(finished.sft_cache, 1)
  config.rollout.async_overlap = "dispatch"
  train_and_evaluate(config, str(tmp_path))
  assert comparable(_records(str(tmp_path))) == comparable(_records(k1_run))
  summary = json.load(open(os.path.join(k1_run, "summary.json")))
  again = json.load(open(tmp_path / "summary.json"))
  assert again["final_accuracy"] == summary["final_accuracy"]


def test_ctrl_c_saves_the_in_flight_batch_and_resume_equals_uninterrupted(
    finished, tmp_path, monkeypatch, capfd):
  """Ctrl-C during step 2: the step finishes, the checkpoint at step 2 holds batch 2 (drawn by
  version 1, in flight), and the rerun continues exactly as the uninterrupted run."""
  config = _config(finished.sft_cache, 1)
  signal_self_on(monkeypatch, async_rollouts, "async_step", 2)
  assert train_and_evaluate(config, str(tmp_path)) == {"interrupted": True, "steps": 2}
  assert "interrupt received: finishing step 2" in capfd.readouterr().err
  checkpoint = tmp_path / "checkpoints" / "2"
  assert "rollouts" in os.listdir(checkpoint)
  meta = json.load(open(checkpoint / "meta" / "metadata"))
  assert [(b["batch"], b["version"]) for b in meta["in_flight"]] == [(2, 1)]
  monkeypatch.undo()
  summary = train_and_evaluate(config, str(tmp_path))
  assert summary["steps"] == STEPS
  assert comparable(_records(str(tmp_path))) == comparable(_records(finished(1)))


def test_the_rollout_thread_is_stopped_before_the_run_tears_down(finished, tmp_path,
                                                                 monkeypatch):
  """A run stopping at a checkpoint (stop_after_steps; Ctrl-C takes the same path) while the
  rollout thread draws the next batch: the thread is stopped and joined before the run closes
  anything (checkpointer, metrics log, export), so no work of it reaches an executor the
  teardown has shut down. The interleaving is forced: batch 2 (version 1, drawn while the run
  checkpoints step 1 and stops) starts before the checkpoint is written and blocks until the
  teardown begins (the rollout side closed, or the checkpointer closed), then submits work to a
  pool that the checkpointer's close shuts down (as orbax's close shuts down its executors).
  With the teardown first the submit raised "cannot schedule new futures after shutdown"."""
  pool = concurrent.futures.ThreadPoolExecutor(1)
  drawing, teardown = threading.Event(), threading.Event()
  events, errors = [], []
  real_produce = async_rollouts.produce

  def produce(run, params, batch, *args):
    if batch == 2:
      events.append("draw started")
      drawing.set()
      teardown.wait(hang_timeout(60))
      try:
        pool.submit(lambda: None).result()
      except RuntimeError as error:
        errors.append(error)
      events.append("draw ended")
    return real_produce(run, params, batch, *args)

  real_close = async_rollouts.ThreadRollouts.close

  def close_rollouts(self, failed=False):
    events.append("rollouts closed")
    teardown.set()
    real_close(self, failed)

  real_save, real_checkpointer_close = checkpoints.Checkpointer.save, checkpoints.Checkpointer.close

  def save(self, step, *args, **kwargs):
    assert drawing.wait(hang_timeout(60)), "batch 2 was never drawn"  # in flight while we stop
    real_save(self, step, *args, **kwargs)

  def close_checkpointer(self):
    threads = [t.name for t in threading.enumerate()]
    events.append(("checkpointer closed", "rlscale-rollouts" in threads))
    pool.shutdown()
    teardown.set()
    real_checkpointer_close(self)

  monkeypatch.setattr(async_rollouts, "produce", produce)
  monkeypatch.setattr(async_rollouts.ThreadRollouts, "close", close_rollouts)
  monkeypatch.setattr(checkpoints.Checkpointer, "save", save)
  monkeypatch.setattr(checkpoints.Checkpointer, "close", close_checkpointer)
  summary = train_and_evaluate(_config(finished.sft_cache, 1), str(tmp_path), stop_after_steps=1)
  assert summary == {"interrupted": True, "steps": 1}
  assert errors == []
  # The rollout side was closed (its batch finished, the thread joined) before the checkpointer.
  assert events[:4] == ["draw started", "rollouts closed", "draw ended",
                        ("checkpointer closed", False)]


def test_a_failing_reward_stops_the_run_with_its_error(finished, tmp_path, monkeypatch):
  """The reward of batch 2 (scored on the rollout thread during step 2) raises: the run stops
  with that error, with steps 1 and 2 logged and no checkpoint of step 2 (it could not hold its
  in-flight batch)."""
  original = rollouts.score_batch
  calls = []

  def failing(*args, **kwargs):
    calls.append(1)
    if len(calls) == 3:
      raise ConnectionError("reward service unreachable")
    return original(*args, **kwargs)
  monkeypatch.setattr(rollouts, "score_batch", failing)
  t0 = time.monotonic()
  with pytest.raises(ConnectionError, match="reward service unreachable"):
    train_and_evaluate(_config(finished.sft_cache, 1), str(tmp_path))
  assert time.monotonic() - t0 < 600  # no hang
  assert [r["step"] for r in _records(str(tmp_path))] == [0, 1, 2]
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["1"]


@pytest.mark.slow
def test_k2_on_two_devices_resumes_exactly(tmp_path):
  """k = 2 on the mesh {data: 2} (2 simulated devices, in a subprocess: the device count must be
  set before JAX starts): the fixed lag holds, a checkpoint at step 2 holds batches 2 and 3,
  and the resumed run equals the uninterrupted one."""
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
             JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, "-m", "tests.runner.async_mesh_worker",
                        str(tmp_path / "sft"), str(tmp_path / "runs")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=hang_timeout(300), check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  result = json.loads(out.stdout.strip().splitlines()[-1])
  assert result == {"devices": 2, "policy_version": [0, 0, 0, 1],
                    "staleness_max": [0, 1, 2, 2], "in_flight_at_2": [[2, 0], [3, 1]],
                    "resumed_equal": True}
