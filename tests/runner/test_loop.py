"""End-to-end runner tests on a tiny config: outputs, determinism, resume, validation."""

import json
import os
import shutil
import types

import flax.traverse_util
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from rlscale.model import load_hf_checkpoint
from rlscale.runner import builders
from rlscale.runner import hosts as hosts_lib
from rlscale.runner import loop, rollouts
from rlscale.runner.loop import train_and_evaluate
from rlscale.runner.rl_step import clip_fired
from rlscale.runner.rollouts import group_stats
from rlscale.runner.run_dir import holds_results
from rlscale.runner.metrics_log import read_metrics
from rlscale.runner.timing import RunClock
from rlscale.sampler.decode import Rollout
from rlscale.tasks import arithmetic, base, rewards
from rlscale.tokenizers import CharTokenizer
from tests.runner.runner_configs import comparable, tiny_config


@pytest.fixture(scope="module")
def sft_cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp("sft_cache"))


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, sft_cache):
  workdir = str(tmp_path_factory.mktemp("full"))
  summary = train_and_evaluate(tiny_config(sft__cache_dir=sft_cache), workdir)
  return workdir, summary


def test_group_stats_by_hand():
  rewards = np.array([1, 0, 1, 1, 0, 0], np.float32)  # groups of 2: [1,0] [1,1] [0,0]
  correct = rewards >= 1
  stats = group_stats(rewards, correct, 2)
  assert stats["reward/mean"] == pytest.approx(0.5)
  assert stats["reward/accuracy"] == pytest.approx(0.5)
  assert stats["groups/with_variance"] == pytest.approx(1 / 3)
  assert stats["groups/zero_variance"] == pytest.approx(2 / 3)
  assert stats["groups/all_correct"] == pytest.approx(1 / 3)


def test_all_correct_groups_count_verdicts_not_shaped_rewards():
  # Group 0: both correct, one shaped down to 0.5 by overlong shaping; group 1: a wrong answer
  # lifted to reward 1 by the format reward.
  rewards = np.array([1, 0.5, 1, 1], np.float32)
  correct = np.array([True, True, False, True])
  stats = group_stats(rewards, correct, 2)
  assert stats["groups/all_correct"] == pytest.approx(0.5)
  assert stats["reward/accuracy"] == pytest.approx(0.75)


def test_nonfinite_task_scores_are_counted_per_step(monkeypatch):
  """One prompt x G = 4 responses, one of which a custom scorer scores NaN: the step's record has
  reward/nonfinite_frac = 1/4 and the training rewards are [0, 1, 0, 1], not [nan, 1, 0, 1]."""
  class NaNScorer(arithmetic.ArithmeticSource):
    def score(self, response_text, example):
      if response_text == "nan":
        return base.Score(float("nan"), "broken", None)
      return base.Score(float(response_text == "1"), "", None)

  tokenizer = CharTokenizer()
  responses = ["nan", "1", "0", "1"]

  def sampler(params, tokens, mask, key, samples_per_prompt):
    ids = [tokenizer.encode(r) + [tokenizer.eos_id] for r in responses]
    response = np.array([i + [tokenizer.pad_id] * (4 - len(i)) for i in ids], np.int32)
    response_mask = np.array([[1] * len(i) + [0] * (4 - len(i)) for i in ids], np.int32)
    prompt = np.repeat(tokens, samples_per_prompt, axis=0)
    return Rollout(tokens=np.concatenate([prompt, response], 1),
                   prompt_mask=np.repeat(mask, samples_per_prompt, axis=0),
                   response_mask=response_mask, logp=np.zeros((4, 4), np.float32),
                   lengths=response_mask.sum(1), num_steps=np.full(4, 4, np.int32))

  run = types.SimpleNamespace(
      task=NaNScorer(seed=0), tokenizer=tokenizer, sampler=sampler, prompt_buckets=(16,),
      hosts=hosts_lib.Hosts(),
      rl_config=types.SimpleNamespace(prompts_per_step=1, group_size=4, dynamic_sampling=False,
                                      overlong_buffer_frac=0.0))
  state = types.SimpleNamespace(params=None)
  with pytest.warns(rewards.NonFiniteRewardWarning, match="row 0"):
    generated, stats = rollouts.collect_rollouts(run, state, jax.random.key(0),
                                              {"samples": 0, "prompts": 0}, RunClock())
  np.testing.assert_array_equal(generated.rewards, [0, 1, 0, 1])
  assert stats["reward/nonfinite_frac"] == 0.25 and stats["reward/mean"] == 0.5


def test_run_writes_outputs(full_run):
  workdir, summary = full_run
  for name in ("metrics.jsonl", "summary.json", "config.json", "curves_vs_samples.png",
               "curves_vs_wall_time.png"):
    assert os.path.exists(os.path.join(workdir, name)), name
  assert os.listdir(os.path.join(workdir, "tensorboard"))
  on_disk = json.load(open(os.path.join(workdir, "summary.json")))
  for key in ("warm_start_accuracy", "final_accuracy", "wall_seconds", "steps", "samples_consumed"):
    assert key in on_disk
  assert on_disk["steps"] == 4
  # Two rates named apart (was one `steps_per_second` over compute time, read against the
  # progress bar's wall-clock rate).
  assert "steps_per_second" not in on_disk
  assert on_disk["steps_per_wall_second"] == pytest.approx(4 / on_disk["wall_seconds"])
  compute = sum(on_disk["phase_seconds"][p] for p in ("generation", "reward", "training"))
  assert on_disk["steps_per_compute_second"] == pytest.approx(4 / compute)
  assert on_disk["samples_consumed"] == 4 * 2 * 2  # steps x P x G
  records = read_metrics(os.path.join(workdir, "metrics.jsonl"))
  assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
  assert [r["samples"] for r in records[1:]] == [4, 8, 12, 16]
  assert [r["prompts"] for r in records[1:]] == [2, 4, 6, 8]
  step = records[1]
  for key in ("reward/mean", "reward/std", "groups/with_variance", "response/length_mean",
              "tokens/generated", "tokens/trained", "wall/generation", "wall/reward",
              "wall/training", "wall/evaluation", "train/learning_rate", "train/loss",
              "train/approx_kl_old", "train/entropy", "train/clip_fraction", "train/grad_norm"):
    assert key in step, key
  # Eval metrics on eval steps (every 2) and at step 0 (the warm start).
  assert {r["step"] for r in records if "eval/greedy_accuracy" in r} == {0, 2, 4}
  assert summary["warm_start_accuracy"] == records[0]["eval/greedy_accuracy"]
  assert summary["final_accuracy"] == records[-1]["eval/greedy_accuracy"]


def test_time_parts_sum_to_wall_total_and_step_one_is_not_compilation(full_run):
  """Issue 13 item 8: every record's wall/* parts (execution per part, compile, other) sum to
  wall/total, time/* (since the previous record) to time/total; step 1's generation holds no
  compilation (it was seconds against milliseconds for later steps)."""
  workdir, summary = full_run
  records = read_metrics(os.path.join(workdir, "metrics.jsonl"))
  parts = ("generation", "reward", "training", "evaluation", "checkpointing", "compile", "other")
  for r in records:
    assert sum(r[f"wall/{p}"] for p in parts) == pytest.approx(r["wall/total"], abs=1e-6)
    assert r["wall/other"] >= -1e-3
  for r in records[1:]:
    assert sum(r[f"time/{p}"] for p in parts) == pytest.approx(r["time/total"], abs=1e-6)
  for previous, r in zip(records, records[1:]):
    assert r["time/total"] == pytest.approx(r["wall/total"] - previous["wall/total"], abs=1e-6)
  assert records[1]["time/compile"] > 0  # the sampler's and update step's first compilation
  generation = [r["time/generation"] for r in records[1:]]
  assert generation[0] <= 10 * float(np.median(generation)) + 0.5
  assert summary["phase_seconds"]["compile"] >= records[-1]["wall/compile"]
  assert sum(summary["phase_seconds"][p] for p in parts) == pytest.approx(
      summary["wall_seconds"], abs=1e-6)


def test_clipping_is_logged_per_step_and_as_a_fraction(full_run):
  workdir, summary = full_run
  threshold = tiny_config().optim.grad_clip_norm
  records = read_metrics(os.path.join(workdir, "metrics.jsonl"))[1:]
  assert [r["optim/clipped"] for r in records] == [
      float(r["train/grad_norm"] > threshold) for r in records]
  assert summary["clipped_fraction"] == pytest.approx(np.mean([r["optim/clipped"] for r in records]))
  assert clip_fired(2.0, 1.0) == 1.0 and clip_fired(0.5, 1.0) == 0.0
  assert clip_fired(1.0, 1.0) == 0.0  # optax scales by threshold / max(norm, threshold): no change
  assert clip_fired(1e9, None) == 0.0  # clipping off


def test_final_policy_is_exported_as_a_hf_checkpoint_of_the_last_state(full_run):
  workdir, summary = full_run
  assert summary["policy"] == os.path.join(workdir, "policy")
  assert not os.path.exists(summary["policy"] + ".tmp")
  model_config, params = load_hf_checkpoint(summary["policy"])
  # The last orbax checkpoint (step 4 = the end of the run) read back without a target.
  manager = ocp.CheckpointManager(os.path.join(workdir, "checkpoints"), item_names=("state", "meta"))
  saved = manager.restore(manager.latest_step(),
                          args=ocp.args.Composite(state=ocp.args.StandardRestore()))["state"]
  assert manager.latest_step() == 4
  flat_saved = flax.traverse_util.flatten_dict(saved["params"])
  flat_policy = flax.traverse_util.flatten_dict(params)
  assert set(flat_policy) == set(flat_saved)
  for key, value in flat_policy.items():
    np.testing.assert_array_equal(value, flat_saved[key])
  assert model_config.vocab_size == flat_saved[("embed_tokens", "embedding")].shape[0]


def test_same_seed_same_metrics(full_run, tmp_path, sft_cache, capsys):
  workdir, _ = full_run
  train_and_evaluate(tiny_config(sft__cache_dir=sft_cache), str(tmp_path))
  # A smoke variant's last line says it checks the pipeline, not learning.
  last = capsys.readouterr().out.strip().splitlines()[-1]
  assert last.startswith("smoke run: it checks the pipeline"), last
  assert "for 4 held-out prompts" in last
  first = comparable(read_metrics(os.path.join(workdir, "metrics.jsonl")))
  again = comparable(read_metrics(os.path.join(tmp_path, "metrics.jsonl")))
  assert first == again


def test_interrupted_then_resumed_equals_uninterrupted(full_run, tmp_path, sft_cache):
  """Stop after 3 steps (checkpoints at 2 and 3), then lose checkpoint 3 as if the process died
  after logging step 3 but before saving it: the resumed run restarts from step 2, drops the
  orphaned step-3 record, and logs exactly the metrics of the uninterrupted run."""
  workdir, _ = full_run
  config = tiny_config(sft__cache_dir=sft_cache)
  partial = train_and_evaluate(config, str(tmp_path), stop_after_steps=3)
  assert partial == {"interrupted": True, "steps": 3}
  first_segment = json.load(open(os.path.join(tmp_path, "warm_start_seconds.json")))["seconds"]
  assert first_segment > 0
  checkpoints = os.path.join(tmp_path, "checkpoints")
  assert sorted(os.listdir(checkpoints)) == ["2", "3"]
  shutil.rmtree(os.path.join(checkpoints, "3"))
  summary = train_and_evaluate(config, str(tmp_path))
  assert summary["steps"] == 4
  # The warm start is reported as the first segment measured it (the resume's setup differs).
  assert summary["phase_seconds"]["warm_start"] == first_segment
  records = read_metrics(os.path.join(tmp_path, "metrics.jsonl"))
  assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
  uninterrupted = comparable(read_metrics(os.path.join(workdir, "metrics.jsonl")))
  assert comparable(records) == uninterrupted


def test_resume_with_another_config_is_refused(full_run, tmp_path, sft_cache):
  workdir = str(tmp_path / "copy")
  shutil.copytree(full_run[0], workdir)
  changed = tiny_config(sft__cache_dir=sft_cache, optim__learning_rate=1e-3)
  with pytest.raises(ValueError, match=r"optim\.learning_rate: 0\.0001 -> 0\.001"):
    train_and_evaluate(changed, workdir)
  # A finished run asked for again returns its summary without running anything.
  again = train_and_evaluate(tiny_config(sft__cache_dir=sft_cache), workdir)
  assert again == json.load(open(os.path.join(full_run[0], "summary.json")))


def test_finished_run_without_a_policy_exports_it_when_asked_again(full_run, tmp_path, sft_cache):
  # A run finished before the export existed (no policy/, no "policy" in summary.json) returned
  # its old summary and never wrote the policy.
  workdir = str(tmp_path / "copy")
  shutil.copytree(full_run[0], workdir)
  shutil.rmtree(os.path.join(workdir, "policy"))
  summary_path = os.path.join(workdir, "summary.json")
  old = json.load(open(summary_path))
  del old["policy"]
  json.dump(old, open(summary_path, "w"))
  again = train_and_evaluate(tiny_config(sft__cache_dir=sft_cache), workdir)
  assert again == {**old, "policy": os.path.join(workdir, "policy")}
  assert json.load(open(summary_path)) == again
  _, params = load_hf_checkpoint(again["policy"])
  _, expected = load_hf_checkpoint(full_run[1]["policy"])
  flat = flax.traverse_util.flatten_dict(expected)
  for key, value in flax.traverse_util.flatten_dict(params).items():
    np.testing.assert_array_equal(value, flat[key])


@pytest.mark.parametrize("algorithm, extra", [
    # DAPO with prompts of varying length: every sampling round must share one prompt width.
    # With overlong filtering on (4-token responses: most are truncated).
    ("dapo", {"task__kwargs": {"min_terms": 2, "max_terms": 5, "min_digits": 1, "max_digits": 2},
              "rollout__max_prompt_tokens": 32, "rl__mask_truncated": True,
              "rl__old_logp": "recompute"}),
    ("ppo", {}),
])
def test_other_algorithms_run_end_to_end(tmp_path, sft_cache, algorithm, extra):
  config = tiny_config(sft__cache_dir=sft_cache, train__total_steps=2, **extra)
  config.rl.algorithm = algorithm
  if algorithm == "ppo":
    config.rl.group_size = 1
    config.rl.prompts_per_step = 4
  summary = train_and_evaluate(config, str(tmp_path))
  assert summary["steps"] == 2
  records = read_metrics(os.path.join(tmp_path, "metrics.jsonl"))
  if algorithm == "dapo":
    # Rounds of 2 prompts x 2 samples until 2 groups with signal (or 4 rounds) per step.
    rounds = [r["sampling/rounds"] for r in records[1:]]
    assert [r["samples"] for r in records[1:]] == list(np.cumsum([4 * n for n in rounds]))
    for r in records[1:]:
      assert r["loss_mask/truncated_frac"] == r["response/truncated_frac"]
      assert 0 <= r["loss_mask/filler_frac"] <= 1
  else:
    assert "train/value_loss" in records[1] and "train/critic_grad_norm" in records[1]
  # float32: the sampler's and the trainer's log-probs agree (recomputed for DAPO, from the
  # update's first pass for PPO).
  assert all(0 <= r["train/sampler_trainer_k3"] < 1e-5 for r in records[1:])


def _tree(root):
  return sorted(os.path.relpath(os.path.join(d, n), root)
                for d, dirs, files in os.walk(root) for n in dirs + files)


def _failing_warm_start_evaluation(monkeypatch, exc):
  """build_run as usual, but the warm start's evaluation (after config.json, checkpoints/,
  metrics.jsonl and tensorboard/ exist) raises `exc`."""
  build_run = builders.build_run

  def build(*args, **kwargs):
    run = build_run(*args, **kwargs)
    def evaluator(*unused):
      raise exc
    run.evaluator = evaluator
    return run
  monkeypatch.setattr(builders, "build_run", build)


@pytest.mark.parametrize("exc", [RuntimeError("evaluation crashed"), KeyboardInterrupt()])
def test_a_run_failing_before_results_leaves_nothing_it_made(tmp_path, sft_cache, monkeypatch,
                                                             exc):
  _failing_warm_start_evaluation(monkeypatch, exc)
  config = tiny_config(sft__cache_dir=sft_cache)
  with pytest.raises(type(exc)):
    train_and_evaluate(config, str(tmp_path / "runs" / "new"))
  assert os.listdir(tmp_path) == []  # neither the workdir nor runs/ it created
  mine = tmp_path / "mine"  # a workdir that existed keeps what it held, and only that
  mine.mkdir()
  (mine / "notes.txt").write_text("my notes")
  with pytest.raises(type(exc)):
    train_and_evaluate(config, str(mine))
  assert _tree(mine) == ["notes.txt"]


@pytest.mark.parametrize("index, removed", [(0, True), (1, False)])
def test_only_process_0_removes_a_failed_runs_files(tmp_path, monkeypatch, index, removed):
  # In a shared workdir, process 1 sees process 0's files as added by the run: it must not remove
  # them (nor the workdir); process 0 cleans up as a one-process run does.
  monkeypatch.setattr(hosts_lib, "joined", lambda: hosts_lib.Hosts(index, 2))
  def fail(config, workdir, stop_after_steps, checked):
    del config, stop_after_steps, checked
    (tmp_path / "run" / "config.json").write_text("{}")  # e.g. written by process 0
    raise RuntimeError("process failed")
  monkeypatch.setattr(loop, "_train_and_evaluate", fail)
  with pytest.raises(RuntimeError, match="process failed"):
    train_and_evaluate(tiny_config(), str(tmp_path / "run"))
  assert _tree(tmp_path) == ([] if removed else ["run", "run/config.json"])


def test_a_run_failing_after_a_checkpoint_keeps_it_and_resumes(full_run, tmp_path, sft_cache,
                                                               monkeypatch):
  workdir = str(tmp_path / "run")
  rl_step = loop.rl_step
  calls = []

  def crash_at_step_3(*args):
    calls.append(1)
    if len(calls) == 3:
      raise RuntimeError("crash in step 3")
    return rl_step(*args)
  monkeypatch.setattr(loop, "rl_step", crash_at_step_3)
  config = tiny_config(sft__cache_dir=sft_cache)  # checkpoint every 2 steps
  with pytest.raises(RuntimeError, match="crash in step 3"):
    train_and_evaluate(config, workdir)
  assert os.listdir(os.path.join(workdir, "checkpoints")) == ["2"]
  assert [r["step"] for r in read_metrics(os.path.join(workdir, "metrics.jsonl"))] == [0, 1, 2]
  monkeypatch.setattr(loop, "rl_step", rl_step)
  assert train_and_evaluate(config, workdir)["steps"] == 4  # resumed from step 2
  assert (comparable(read_metrics(os.path.join(workdir, "metrics.jsonl"))) ==
          comparable(read_metrics(os.path.join(full_run[0], "metrics.jsonl"))))


def test_holds_results(tmp_path):
  def holds(*files):
    work = tmp_path / str(len(list(tmp_path.iterdir())))
    for name, content in files:
      os.makedirs(os.path.dirname(work / name), exist_ok=True)
      if content is None:
        (work / name).mkdir()
      else:
        (work / name).write_text(content)
    return holds_results(str(work))
  # What a run writes before its first result is not worth keeping ...
  assert not holds(("config.json", "{}"), ("metrics.jsonl", ""), ("checkpoints", None),
                   ("tensorboard/events.out", "header"), ("sft/warm_start_x.msgpack.tmp", "part"))
  # ... a checkpoint, a metrics record, a summary, the policy or a trained warm start is.
  assert holds(("checkpoints/2/state", "x"))
  assert holds(("metrics.jsonl", '{"step": 0}\n'))
  assert holds(("summary.json", "{}"))
  assert holds(("policy/config.json", "{}"))
  assert holds(("sft/warm_start_x.msgpack", "params"))


def test_the_summary_reports_the_runs_own_last_evaluation(tmp_path, monkeypatch):
  """Issue 39: the final accuracy comes from the run's memory (`final_eval`), not from the last
  evaluation in metrics.jsonl, which a second run in the workdir once overwrote."""
  from rlscale.runner import run_dir  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(run_dir, "export_policy", lambda workdir, *a: os.path.join(workdir, "p"))
  monkeypatch.setattr(run_dir, "plot_curves",
                      lambda *a, **k: {"vs_samples": "s.png", "vs_wall_time": "w.png"})
  (tmp_path / "metrics.jsonl").write_text('{"step": 0, "eval/greedy_accuracy": 0.25}\n'
                                          '{"step": 4, "eval/greedy_accuracy": 0.75}\n')
  logged = []
  run = types.SimpleNamespace(
      export_config=None, tokenizer=None, title="t", rl_config=types.SimpleNamespace(group_size=2),
      evaluator=types.SimpleNamespace(pass_k=2, examples=[None] * 4), warm_start_seconds=1.0,
      num_devices=1, starting_point="warm start", smoke=True, log=logged.append)
  own = {"eval/greedy_accuracy": 0.5, "eval/pass_at_k": 0.75, "eval/mean_reward": 0.5}
  summary = run_dir.finish(str(tmp_path), run, {}, {"eval/greedy_accuracy": 0.25}, 4,
                           {"samples": 16, "prompts": 8}, RunClock(), final_eval=own)
  assert (summary["final_accuracy"], summary["final_pass_at_k"]) == (0.5, 0.75)
  assert "0.250 (warm start) -> 0.500 (after 4 RL steps, 16 responses)" in logged[0]
  # Without one (a rerun that evaluated nothing) the log's last evaluation, the run's own.
  again = run_dir.finish(str(tmp_path), run, {}, {"eval/greedy_accuracy": 0.25}, 4,
                         {"samples": 16, "prompts": 8}, RunClock())
  assert again["final_accuracy"] == 0.75
