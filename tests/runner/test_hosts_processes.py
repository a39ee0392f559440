"""Two processes on localhost (jax.distributed, CPU) train like one process on the union batch.

One module fixture: a one-process run takes RL step 1 and checkpoints; two processes resume it in
the same workdir and take step 2, each saving the stream offsets and rollouts it drew
(tests/runner/hosts_worker.py); one process resumes a copy of the step-1 workdir and takes step 2
too (the main job on 1 process against 2 on the same prompts).
"""

import json
import os
import shutil
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from rlscale.runner import builders
from rlscale.runner import loop, rollouts
from rlscale.runner import rl_step as rl_step_lib
from rlscale.runner.batching import encode_prompts
from rlscale.runner.checkpoints import Checkpointer
from rlscale.runner.metrics_log import read_metrics
from rlscale.runner.timing import RunClock
from rlscale.sampler.decode import Rollout
from tests.runner.hosts_worker import record_stream
from tests.runner.runner_configs import comparable, multihost_config
from tests.timeouts import hang_timeout

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
P, G = 4, 2


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _two_processes(workdir, sft_cache, total_steps, outs):
  port = _free_port()
  procs = []
  for index, out in enumerate(outs):
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=1",
               JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2",
               JAX_PROCESS_ID=str(index),
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "tests.runner.hosts_worker", str(workdir), str(sft_cache),
         str(total_steps), str(out)], cwd=REPO, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True))
  logs = [p.communicate(timeout=hang_timeout(60))[0] for p in procs]
  assert all(p.returncode == 0 for p in procs), "\n".join(log[-3000:] for log in logs)
  return logs


def _drawn(path):
  """(offsets, [Generated per sampling round]) of one worker's .npz."""
  saved = np.load(path)
  count = len({k.split("/")[0] for k in saved.files if "/" in k})
  return saved["offsets"].tolist(), [
      rollouts.Generated(Rollout(**{f: saved[f"{r}/rollout/{f}"] for f in Rollout._fields
                                    if f"{r}/rollout/{f}" in saved.files}),
                     saved[f"{r}/rewards"], saved[f"{r}/scores"], saved[f"{r}/correct"])
      for r in range(count)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  root = tmp_path_factory.mktemp("hosts")
  workdir, cache = root / "run", root / "sft"
  mp = pytest.MonkeyPatch()
  try:
    first, _ = record_stream(mp.setattr)
    out = loop.train_and_evaluate(multihost_config(str(cache), 2), str(workdir), stop_after_steps=1)
    assert out == {"interrupted": True, "steps": 1}
    one_process = read_metrics(str(workdir / "metrics.jsonl"))
    mp.undo()
    shutil.copytree(workdir, root / "one_process")
    _, one_process_rounds = record_stream(mp.setattr)
    loop.train_and_evaluate(multihost_config(str(cache), 2), str(root / "one_process"))
    mp.undo()
    outs = [root / f"process{i}.npz" for i in range(2)]
    logs = _two_processes(workdir, cache, 2, outs)
  finally:
    mp.undo()
  return {"workdir": workdir, "cache": cache, "first": first, "logs": logs,
          "processes": [_drawn(o) for o in outs], "one_process": one_process,
          "one_process_step2": (one_process_rounds,
                                read_metrics(str(root / "one_process" / "metrics.jsonl")))}


@pytest.mark.slow
def test_processes_draw_disjoint_shares_whose_union_is_the_one_process_batch(runs):
  offsets0, (generated0,) = runs["processes"][0]
  offsets1, (generated1,) = runs["processes"][1]
  # Step 2 starts at the global position 4 (one-process step 1 read 0..3).
  assert runs["first"] == [0, 1, 2, 3]
  assert offsets0 == [4, 5] and offsets1 == [6, 7]
  # Their prompts, in process order, are the one-process batch's: offsets 4..7, G rows each.
  config = multihost_config(str(runs["cache"]), 2)
  run = builders.build_run(config, str(runs["workdir"]), log=lambda _: None)
  texts = [run.task.format_prompt(run.task.train_example(i)) for i in range(4, 8)]
  tokens, mask = encode_prompts(run.tokenizer, texts, run.prompt_buckets)
  union = np.concatenate([generated0.rollout.prompt_mask, generated1.rollout.prompt_mask])
  np.testing.assert_array_equal(union, np.repeat(mask, G, axis=0))
  width = tokens.shape[1]
  union_tokens = np.concatenate([generated0.rollout.tokens, generated1.rollout.tokens])[:, :width]
  np.testing.assert_array_equal(union_tokens, np.repeat(tokens, G, axis=0))
  # Different rows of the one global batch: the two processes sample different responses.
  assert not np.array_equal(generated0.rollout.logp, generated1.rollout.logp)


@pytest.mark.slow
def test_two_processes_run_the_main_job_as_one_process_on_the_same_prompts(runs):
  """Step 2 on two processes and on one, from the same step-1 checkpoint: the same responses (the
  sampler draws a row's noise by its place in the global batch from one key) and the same
  logged step, up to float rounding."""
  (_, (generated0,)), (_, (generated1,)) = runs["processes"]
  (one,), one_records = runs["one_process_step2"]
  union = rollouts.concat_generated([generated0, generated1])
  np.testing.assert_array_equal(union.rollout.tokens, one.rollout.tokens)
  np.testing.assert_array_equal(union.rollout.response_mask, one.rollout.response_mask)
  np.testing.assert_allclose(union.rollout.logp, one.rollout.logp, atol=1e-5)
  np.testing.assert_array_equal(union.rewards, one.rewards)
  two = read_metrics(str(runs["workdir"] / "metrics.jsonl"))[-1]
  single = one_records[-1]
  assert two["step"] == single["step"] == 2 and set(two) == set(single)
  for key, value in single.items():
    if not key.startswith(("time/", "wall/")):
      np.testing.assert_allclose(two[key], value, rtol=1e-5, atol=1e-4, err_msg=key)


@pytest.mark.slow
def test_two_process_step_equals_one_process_step_on_the_union(runs, monkeypatch):
  """The one-process runner step (advantages, masks, update, metrics) on the union of the two
  processes' rollouts, from the step-1 checkpoint, gives the parameters the two processes
  checkpointed at step 2 and the metrics process 0 logged."""
  (_, (generated0,)), (_, (generated1,)) = runs["processes"]
  union = rollouts.concat_generated([generated0, generated1])
  assert len(union.rewards) == P * G  # each process drew half the batch
  assert np.ptp(union.rewards) > 0  # rewards vary, so the advantages carry a signal
  config = multihost_config(str(runs["cache"]), 2)
  run = builders.build_run(config, str(runs["workdir"]), log=lambda _: None)
  checkpoints = Checkpointer(str(runs["workdir"] / "checkpoints"), keep=5)
  template = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), run.state)
  step1, _ = checkpoints.restore(1, template)
  step2, meta = checkpoints.restore(2, template)
  checkpoints.close()
  assert meta["counters"] == {"prompts": 2 * P, "samples": 2 * P * G}

  def collect(run, state, key, counters, clock):  # the union as this step's rollouts
    counters["prompts"] += P
    counters["samples"] += P * G
    return union, rollouts.generation_stats([union], G)

  monkeypatch.setattr(rl_step_lib, "collect_rollouts", collect)
  counters = {"prompts": P, "samples": P * G}
  record, state = rl_step_lib.rl_step(run, run.layout.place_state(step1),
                                       jax.random.fold_in(jax.random.key(config.seed), 1), counters,
                                       RunClock())
  params = jax.device_get(state.params)
  moved = max(float(np.max(np.abs(a - b))) for a, b in
              zip(jax.tree.leaves(params), jax.tree.leaves(step1.params)))
  assert moved > 1e-4  # the step changed the policy, so the comparison below means something
  for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(step2.params)):
    np.testing.assert_allclose(got, want, atol=1e-6)
  logged = read_metrics(str(runs["workdir"] / "metrics.jsonl"))[-1]
  assert logged["step"] == 2
  # Every metric but the clocks. atol: the policy loss is a sum of O(1) terms that cancel
  # (whitened advantages) to ~1e-5.
  for key, value in record.items():
    if not key.startswith(("time/", "wall/")):
      np.testing.assert_allclose(logged[key], value, rtol=1e-5, atol=1e-4, err_msg=key)
  assert logged["samples"] == 2 * P * G and logged["prompts"] == 2 * P


@pytest.mark.slow
def test_two_processes_resume_a_one_process_checkpoint_at_the_global_position(runs):
  """The two processes continue the stream where the one-process run stopped (step 2 reads
  offsets 4..7, as the test above checks), keep the one-process records, and log and checkpoint
  global counters; only process 0 reports and writes the run's files."""
  (offsets0, _), (offsets1, _) = runs["processes"]
  assert sorted(offsets0 + offsets1) == [4, 5, 6, 7]  # each offset once, from the global position
  records = read_metrics(str(runs["workdir"] / "metrics.jsonl"))
  assert [r["step"] for r in records] == [0, 1, 2]
  assert comparable(records[:2]) == comparable(runs["one_process"])
  assert [r["samples"] for r in records[1:]] == [P * G, 2 * P * G]
  assert [r["prompts"] for r in records[1:]] == [P, 2 * P]
  assert "eval/greedy_accuracy" in records[2]  # the final step is evaluated (by process 0)
  summary = json.loads((runs["workdir"] / "summary.json").read_text())
  assert summary["steps"] == 2 and summary["prompts_consumed"] == 2 * P
  assert summary["samples_consumed"] == 2 * P * G
  assert (runs["workdir"] / "policy" / "model.safetensors").exists()
  assert "resumed from checkpoint at step 1" in runs["logs"][0]
  assert "resumed" not in runs["logs"][1] and "done:" not in runs["logs"][1]
