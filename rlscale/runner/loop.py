"""The RL loop: config -> trained policy, metrics.jsonl, checkpoints, curves and summary.json.

One step: P prompts from the task stream -> G samples each (pmapped sampler) -> rewards (host
verifier) -> advantages (jitted) -> update step (pmapped) -> one metrics record indexed by step,
responses consumed and seconds per part (`rlscale.runner.timing`: generation / reward / training /
evaluation / checkpointing execution, JAX compilation apart, and the rest as other; `time/*` since
the previous record, `wall/*` cumulative, parts summing to `wall/total`). Every
`train.checkpoint_every` steps the train state, the task-stream position and the cumulative wall
time are saved; running the same command again resumes from there and reproduces the metrics of an
uninterrupted run, because every step's randomness is `fold_in(seed key, step)`.

Evaluation schedule: every `train.eval_every` steps, or, when `train.eval_every_samples` = E is set,
at every step where the responses consumed cross a multiple of E (the first step whose count is
>= k * E; with a fixed budget and B dividing E, every batch size evaluates at the same counts, and
otherwise each record's `samples` holds the exact count). The warm start (0 samples) and the final
step are always evaluated. Every evaluation uses the same key (`evaluate.evaluation_key`).

Several processes (multi-host, `rlscale.runner.hosts`): each process samples its own share of the
global P prompts (stream offsets and keys by process index); the batch statistics, advantages and
the prompt and response widths are computed on the union of all processes' rows, the update step
psums over every process's devices, so a step equals the one-process step on the union batch.
Process 0 evaluates the whole held-out set (the others receive its metrics) and alone writes
config.json, metrics.jsonl, TensorBoard, plots, summary.json and the policy; every process takes
part in orbax's checkpoint save (orbax writes the host arrays from process 0). The workdir must be
on a file system every process sees.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, NamedTuple

import jax
import numpy as np
import tqdm

from rlscale import outputs
from rlscale.model import save_hf_checkpoint
from rlscale.rl import dapo, masks
from rlscale.rl.kl import kl_divergence
from rlscale.runner import builders
from rlscale.runner import hosts as hosts_lib
from rlscale.runner import progress
from rlscale.runner.batching import (decode_responses, encode_prompts, longest_prompt, train_widths,
                                     trim_rollout)
from rlscale.runner.checkpoints import Checkpointer
from rlscale.runner.config_files import flatten_config
from rlscale.runner.evaluate import METRIC_NAMES, accuracy_change_note, evaluation_key
from rlscale.runner.interrupts import StopFlag
from rlscale.runner.metrics_log import MetricsLogger, read_metrics
from rlscale.runner.plots import plot_curves
from rlscale.runner.sft import effective_sft_seed
from rlscale.runner.timing import RunClock
from rlscale.tasks.rewards import score_batch
from rlscale.train import update as update_lib
from rlscale.train.optimizer import clipping_threshold

CONFIG_FILE = "config.json"
POLICY_DIR = "policy"  # the final policy as a HF checkpoint
SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_DIR = "checkpoints"
WARM_START_FILE = "warm_start_seconds.json"  # written once by the first segment of a run
# Fields that may change when resuming a run; any other change means a different experiment.
RESUMABLE_FIELDS = ("train.total_steps", "train.total_samples", "train.eval_every",
                    "train.eval_every_samples", "train.checkpoint_every",
                    "train.keep_checkpoints", "sft.cache_dir", "distributed")
# Fields added after runs were checkpointed, with the value their absence meant: a config.json
# written before a field existed resumes while the field keeps that value.
ADDED_FIELD_DEFAULTS = {"optim.schedule_unit": "steps", "optim.warmup_samples": 0,
                        "train.measure_noise_scale": False}
# DAPO dynamic sampling: at most this many rounds of P prompts per step (verl's max_num_gen_batches).
MAX_SAMPLING_ROUNDS = 4


def check_resume_config(workdir: str, config) -> None:
  """Refuses to resume a checkpointed run with a different config.

  Raises ValueError naming the changed fields unless only RESUMABLE_FIELDS differ from the
  workdir's config.json (written by the run that made the checkpoints; a field it lacks counts
  as ADDED_FIELD_DEFAULTS gives)."""
  path = os.path.join(workdir, CONFIG_FILE)
  checkpoints = os.path.join(workdir, CHECKPOINTS_DIR)
  if not (os.path.exists(path) and os.path.isdir(checkpoints) and os.listdir(checkpoints)):
    return
  with open(path, encoding="utf-8") as f:
    saved = {**ADDED_FIELD_DEFAULTS, **flatten_config(json.load(f)["config"])}
  current = flatten_config(json.loads(json.dumps(config.to_dict(), default=str)))
  changed = sorted(k for k in set(saved) | set(current)
                   if saved.get(k) != current.get(k) and k not in RESUMABLE_FIELDS)
  if changed:
    details = ", ".join(f"{k}: {saved.get(k)!r} -> {current.get(k)!r}" for k in changed[:8])
    raise ValueError(f"workdir {workdir!r} holds checkpoints of a run with another config "
                     f"({details}); use a new --workdir, or change only {list(RESUMABLE_FIELDS)} "
                     "when resuming")


def group_stats(rewards: np.ndarray, correct: np.ndarray, group_size: int) -> dict[str, float]:
  """Statistics of P groups of G responses, groups adjacent.

  Args:
    rewards: [P * G] float reward: mean, std and the fraction of groups whose rewards vary (only
      those carry a group-relative learning signal).
    correct: [P * G] bool verifier verdicts: the fraction correct and of all-correct groups.
  """
  groups = rewards.reshape(-1, group_size)
  varied = groups.max(axis=1) - groups.min(axis=1) > 1e-6
  correct = np.asarray(correct, bool)
  return {"reward/mean": float(rewards.mean()), "reward/std": float(rewards.std()),
          "reward/accuracy": float(correct.mean()),
          "groups/with_variance": float(varied.mean()),
          "groups/zero_variance": float(1.0 - varied.mean()),
          "groups/all_correct": float(correct.reshape(-1, group_size).all(axis=1).mean())}


def clip_fired(grad_norm: float, threshold: float | None) -> float:
  """`optim/clipped`: 1.0 when global-norm clipping changed the step's update (pre-clip norm
  `train/grad_norm` > threshold), else 0.0 (always 0 with clipping off, threshold None). With
  several optimizer updates per step (epochs x minibatches) grad_norm is their mean, so this says
  whether the mean norm exceeded the threshold."""
  return float(threshold is not None and grad_norm > threshold)


def evaluation_due(*, step: int, total_steps: int, samples_before: int, samples_after: int,
                   eval_every: int, eval_every_samples: int | None) -> bool:
  """Whether the step that took the run from `samples_before` to `samples_after` responses
  consumed (and ended at RL step `step`, 1-based) is followed by a held-out evaluation.

  With `eval_every_samples` = E: when the count crosses a multiple of E,
  floor(after / E) > floor(before / E) (one evaluation even if a step crosses several); otherwise
  every `eval_every` steps. The last step (`step == total_steps`) always evaluates."""
  if step == total_steps:
    return True
  if eval_every_samples is not None:
    return samples_after // eval_every_samples > samples_before // eval_every_samples
  return step % eval_every == 0


def train_and_evaluate(config, workdir: str, *, stop_after_steps: int | None = None) -> dict[str, Any]:
  """Runs (or resumes) the experiment `config` in `workdir` and returns the summary dict.

  Args:
    config: a ConfigDict as from experiments/configs/*.py.
    workdir: run directory; an existing checkpoint there is resumed.
    stop_after_steps: checkpoint and return after this many RL steps in this call (for jobs with a
      time limit, and for resume tests); the next call continues. None runs to train.total_steps.

  Writes into workdir: config.json (resolved), metrics.jsonl, tensorboard/, checkpoints/,
  curves_vs_samples.png, curves_vs_wall_time.png, summary.json and policy/ (the final policy as a
  HF checkpoint, see `export_policy`).
  A run that fails (an exception or Ctrl-C) before it has written results leaves no half-made
  workdir: unless `holds_results(workdir)`, what the run added is removed, and the workdir itself
  when the run created it (`rlscale.outputs.removed_on_failure`); a workdir that existed before
  keeps what it held. With several processes only process 0 removes anything: the workdir is
  shared, and what another process would see as added may be process 0's.

  Raises: ValueError for an invalid config (naming the field and the allowed values),
  FileNotFoundError for a missing checkpoint or data path.
  """
  builders.maybe_initialize_distributed(config.get("distributed", "auto"))
  if not hosts_lib.joined().writer:
    outputs.make_dirs(workdir)
    return _train_and_evaluate(config, workdir, stop_after_steps)
  with outputs.removed_on_failure(workdir, keep=holds_results):
    return _train_and_evaluate(config, workdir, stop_after_steps)


def holds_results(workdir: str) -> bool:
  """Whether a run directory holds something a failed run must not delete: a checkpoint, a
  metrics record, summary.json, the exported policy, or a trained warm start in `<workdir>/sft`
  (the SFT cache when sft.cache_dir is unset). config.json, an empty metrics.jsonl and
  TensorBoard's event-file header are not results."""
  def non_empty(*parts):
    path = os.path.join(workdir, *parts)
    return (os.path.isdir(path) and bool(os.listdir(path))) or (
        os.path.isfile(path) and os.path.getsize(path) > 0)
  sft = os.path.join(workdir, builders.SFT_DIR)
  warm_starts = os.path.isdir(sft) and any(n.endswith(".msgpack") for n in os.listdir(sft))
  return warm_starts or any(non_empty(p) for p in (CHECKPOINTS_DIR, METRICS_FILE, SUMMARY_FILE,
                                                   POLICY_DIR))


def completed_summary(config, workdir: str) -> dict[str, Any] | None:
  """summary.json of a finished run of `config` in `workdir`, or None when there is more to do.

  Finished: the latest checkpoint and summary.json are at train.total_steps (or the steps of the
  train.total_samples budget) and the final policy is exported. Read before the model is built,
  so asking again for a finished run answers at once (a run whose summary predates the policy
  export, whose total_steps was raised or whose last checkpoint is gone goes on to build the
  run)."""
  path = os.path.join(workdir, SUMMARY_FILE)
  if not (os.path.isfile(path) and os.path.isdir(os.path.join(workdir, POLICY_DIR))):
    return None
  total_steps = builders.resolve_total_steps(
      config.train, config.rl.prompts_per_step * config.rl.group_size)
  checkpointer = Checkpointer(os.path.join(workdir, CHECKPOINTS_DIR),
                              keep=config.train.keep_checkpoints)
  latest = checkpointer.latest_step()
  checkpointer.close()
  summary = _read_json(path)
  done = latest is not None and min(latest, summary.get("steps", -1)) >= total_steps
  return summary if done else None


def _train_and_evaluate(config, workdir: str, stop_after_steps: int | None) -> dict[str, Any]:
  check_resume_config(workdir, config)
  hosts = hosts_lib.current()
  finished = completed_summary(config, workdir)
  if finished is not None:
    if hosts.writer:
      print(f"run already complete ({finished['steps']} steps); results: "
            f"{os.path.join(workdir, SUMMARY_FILE)}")
    return finished
  run = builders.build_run(config, workdir, log=print if hosts.writer else _quiet)
  # Wall time counts from here: the (cached, shared) warm start is reported apart, so runs of a
  # sweep are comparable whether or not they trained the warm start themselves.
  clock = RunClock()
  rl = run.rl_config
  if hosts.writer:
    outputs.write_json(os.path.join(workdir, CONFIG_FILE),
                       {"config": config.to_dict(), "rl_resolved": rl.to_dict(),
                        "sft_seed": effective_sft_seed(config)},
                       indent=2, sort_keys=True, default=str)

  checkpointer = Checkpointer(os.path.join(workdir, CHECKPOINTS_DIR),
                              keep=config.train.keep_checkpoints)
  state = run.state
  step = 0
  counters = {"samples": 0, "prompts": 0}  # responses generated, prompts drawn from the stream
  latest = checkpointer.latest_step()
  if latest is not None:
    host_state, meta = checkpointer.restore(latest, update_lib.unreplicate(state))
    state = update_lib.replicate(host_state)
    step, counters = int(meta["step"]), dict(meta["counters"])
    clock.resume(meta["phase_seconds"], meta["wall_seconds"])
    run.log(f"resumed from checkpoint at step {step} ({counters['prompts']} prompts consumed)")
    summary_path = os.path.join(workdir, SUMMARY_FILE)
    if step >= run.total_steps and os.path.exists(summary_path):
      checkpointer.close()
      run.log(f"run already complete ({step} steps); results: {summary_path}")
      with open(summary_path, encoding="utf-8") as f:
        summary = json.load(f)
      if hosts.writer and not os.path.isdir(os.path.join(workdir, POLICY_DIR)):
        # finished before the export existed
        summary["policy"] = export_policy(workdir, run.export_config, host_state.params,
                                          run.tokenizer)
        outputs.write_json(summary_path, summary, indent=2)
      return summary
  logger = (MetricsLogger(workdir, resume_step=step if latest is not None else None)
            if hosts.writer else _NullLogger())

  base_key = jax.random.key(config.seed)
  eval_key = evaluation_key(config.task.get("eval_seed", 1234))
  if latest is None:
    with clock.measure("evaluation"):
      warm_eval = held_out_metrics(run, state.params, eval_key, hosts)
    logger.write({"step": 0, "samples": 0, **warm_eval, **clock.record(interval=False)})
    run.log(f"{run.starting_point}: held-out greedy accuracy "
            f"{warm_eval['eval/greedy_accuracy']:.3f}, "
            f"pass@{config.eval.pass_k} {warm_eval['eval/pass_at_k']:.3f}")
    if hosts.writer:
      _save_warm_eval(workdir, warm_eval)
      outputs.write_json(os.path.join(workdir, WARM_START_FILE),
                         {"seconds": run.warm_start_seconds})
    shown_accuracy = warm_eval["eval/greedy_accuracy"]  # on the bar until the next evaluation
  else:
    warm_eval = _load_warm_eval(workdir)
    shown_accuracy = _last_accuracy(workdir, step) if hosts.writer else None
  # The first segment's model load + warm start seconds, whatever a resume's setup took.
  run.warm_start_seconds = _read_json(os.path.join(workdir, WARM_START_FILE)).get(
      "seconds", run.warm_start_seconds)

  total_steps = run.total_steps
  clip_threshold = clipping_threshold(config.optim)
  first_step = step
  last_eval = None
  warned_out_of_rounds = False
  bar = progress.StepBar(total=total_steps, initial=step, desc="RL", unit="step",
                         dynamic_ncols=True, disable=not hosts.writer)
  bar.set_postfix(reward="-", acc=progress.accuracy_postfix(shown_accuracy))
  shapes = _ShapeLog(evaluated=latest is None)  # the warm start's evaluation compiled it
  stopping = False
  running = step + 1  # the step the loop is on (1-based); None once every step is done
  with StopFlag(lambda: running) as stop:
    while step < total_steps and not stopping:
      running = step + 1
      step_key = jax.random.fold_in(base_key, step)
      samples_before = counters["samples"]
      record, state = _rl_step(run, state, step_key, counters, clock)
      record["optim/clipped"] = clip_fired(record["train/grad_norm"], clip_threshold)
      if record.get("sampling/out_of_rounds") and not warned_out_of_rounds and hosts.writer:
        warned_out_of_rounds = True
        tqdm.tqdm.write(_out_of_rounds_warning(run, record, step + 1))
      step += 1
      record.update(step=step, **counters)
      if stop_after_steps is not None and step - first_step >= stop_after_steps:
        stop.stop = True
      if evaluation_due(step=step, total_steps=total_steps, samples_before=samples_before,
                        samples_after=counters["samples"], eval_every=config.train.eval_every,
                        eval_every_samples=config.train.get("eval_every_samples")):
        with clock.measure("evaluation"):
          last_eval = held_out_metrics(run, state.params, eval_key, hosts)
        record.update(last_eval)
        shown_accuracy = last_eval["eval/greedy_accuracy"]
      # time/* covers everything since the previous record (the previous step's checkpoint too).
      record.update(clock.record())
      logger.write(record)
      new_shapes = shapes.new(record)
      if (step > first_step + 1 and record["time/compile"] >= progress.COMPILE_NOTICE_SECONDS
          and hosts.writer):
        tqdm.tqdm.write(progress.compile_notice(step, record["time/compile"], new_shapes))
      bar.set_postfix(reward=f"{record['reward/mean']:.3f}",
                      acc=progress.accuracy_postfix(shown_accuracy), refresh=False)
      bar.step_done(record)
      # The stop flag is read once per step (its watcher thread can set it at any moment); with
      # several processes it counts when set on any (a signal reaches one), so all checkpoint and
      # stop at the same step.
      stopping = hosts_lib.any_process(stop.stop, hosts)
      if step % config.train.checkpoint_every == 0 or step == total_steps or stopping:
        with clock.measure("checkpointing"):
          checkpointer.save(step, update_lib.unreplicate(state), {
              "step": step, "counters": counters,
              "wall_seconds": clock.wall_seconds(), "phase_seconds": clock.totals})
    running = None
    bar.close()
    logger.close()
    checkpointer.close()
    if stopping and step < total_steps:
      run.log(f"interrupted: checkpoint written at step {step}; run the same command to resume")
      return {"interrupted": True, "steps": step}
    if not hosts.writer:
      return {"steps": step, "samples_consumed": counters["samples"],
              "prompts_consumed": counters["prompts"], "process_index": hosts.index,
              "final_accuracy": (last_eval or {}).get("eval/greedy_accuracy")}
    # Still under the stop flag: a signal now is acknowledged (the export and summary finish);
    # a second one stops at once, and a rerun writes them from the last checkpoint.
    return _finish(workdir, run, update_lib.unreplicate(state.params), warm_eval, step,
                   counters, clock)


class _ShapeLog:
  """What a step ran for the first time in this process, which is what JAX compiles: the sampler
  at a prompt bucket (`batch/prompt_bucket`), the update step at trained widths
  (`batch/prompt_width` x `batch/response_width`), the held-out evaluation."""

  def __init__(self, *, evaluated: bool = False):
    """`evaluated`: the held-out evaluation already ran in this process."""
    self._seen = {("evaluation",)} if evaluated else set()

  def new(self, record: dict) -> list[str]:
    """Descriptions of the parts of the step `record` describes that had not run before."""
    parts = {
        ("bucket", record["batch/prompt_bucket"]):
            f"sampler at the {record['batch/prompt_bucket']}-token prompt bucket",
        ("update", record["batch/prompt_width"], record["batch/response_width"]):
            f"update step at prompt {record['batch/prompt_width']} x response "
            f"{record['batch/response_width']} tokens, a batch shape first met"}
    if "eval/greedy_accuracy" in record:
      parts[("evaluation",)] = "first held-out evaluation in this process"
    new = [text for key, text in parts.items() if key not in self._seen]
    self._seen.update(parts)
    return new


def _last_accuracy(workdir: str, step: int) -> float | None:
  """Held-out greedy accuracy of the last evaluation at or before `step` in the workdir's
  metrics.jsonl (the warm start's at step 0), or None when none is recorded."""
  records = read_metrics(os.path.join(workdir, METRICS_FILE))
  evaluated = [r for r in records if r.get("step", 0) <= step and "eval/greedy_accuracy" in r]
  return evaluated[-1]["eval/greedy_accuracy"] if evaluated else None


def _quiet(message: str) -> None:  # pylint: disable=unused-argument
  """The log of processes other than 0: they print nothing (process 0 reports the run)."""


class _NullLogger:
  """MetricsLogger's interface for processes other than 0, which write no metrics."""

  def write(self, record) -> None:  # pylint: disable=unused-argument
    pass

  def close(self) -> None:
    pass


def held_out_metrics(run, params, key, hosts: hosts_lib.Hosts) -> dict[str, float]:
  """Held-out metrics (`run.evaluator`) on the whole held-out set: with several processes process 0
  evaluates every prompt, exactly as a one-process run with as many local devices would, and the
  other processes receive its metrics (float32-rounded; they only show them)."""
  if hosts.count == 1:
    return run.evaluator(params, key)
  result = run.evaluator(params, key) if hosts.writer else {name: 0.0 for name in METRIC_NAMES}
  shared = hosts_lib.from_writer({k: np.float32(result[k]) for k in METRIC_NAMES}, hosts)
  return result if hosts.writer else {k: float(v) for k, v in shared.items()}


class Generated(NamedTuple):
  """One round of sampling: P prompts x G responses, groups adjacent (B = P * G rows).

  Attributes:
    rollout: the sampler's Rollout of numpy arrays (tokens [B, Tp + Tr] int32, prompt_mask
      [B, Tp], response_mask [B, Tr], logp [B, Tr] float32, lengths [B] int32).
    rewards: [B] float32 training reward: the task reward plus DAPO's overlong penalty when on.
    scores: [B] float32 reward from `score_batch` (task score plus the task's format and
      overlong terms), before the update-side DAPO overlong penalty.
    correct: [B] bool verifier verdicts (what "correct" means in every metric and filter).
    filler: [B] bool, True for the rows of zero-signal groups that only fill a DAPO batch when
      the sampling rounds run out (masked out of the loss); None = no filler rows.
    nonfinite: [B] bool, True where the task score was non-finite and scored 0 (`score_batch`'s
      infos["nonfinite"]); None = none.
  """
  rollout: Any
  rewards: np.ndarray
  scores: np.ndarray
  correct: np.ndarray
  filler: Any = None
  nonfinite: Any = None


def _row_flags(generated: Generated, field: str) -> np.ndarray:
  """[B] bool: the [B] bool field `field` of generated (filler, nonfinite), all False when None."""
  rows = getattr(generated, field)
  if rows is None:
    return np.zeros(len(generated.rewards), bool)
  return np.asarray(rows, bool)


def _generate_groups(run, state, key, offsets, clock) -> Generated:
  """Samples G responses for each prompt at the task-stream `offsets` (this process's share of a
  round, `hosts.stream_offsets`) and scores them.

  With dynamic sampling every round pads its prompts to the largest bucket, so rounds can be mixed
  in one batch; with several processes all pad to the bucket of the longest prompt of any process,
  so their batches share one shape. Times drawing, encoding and sampling as generation, decoding
  and scoring as reward (`clock`, a RunClock)."""
  rl = run.rl_config
  G = rl.group_size
  hosts = hosts_lib.current()
  with clock.measure("generation"):
    examples = [run.task.train_example(i) for i in offsets]
    texts = [run.task.format_prompt(e) for e in examples]
    buckets = run.prompt_buckets[-1:] if rl.dynamic_sampling else run.prompt_buckets
    longest = None
    if hosts.count > 1:
      longest = hosts_lib.global_max(longest_prompt(run.tokenizer, texts), hosts)
    prompt_tokens, prompt_mask = encode_prompts(run.tokenizer, texts, buckets, longest=longest)
    # The G responses of a prompt share its prefill (rows p * G + g, groups adjacent).
    rollout = run.sampler(state.params, prompt_tokens, prompt_mask, key, params_replicated=True,
                          samples_per_prompt=G)
  with clock.measure("reward"):
    t_r = rollout.response_mask.shape[1]
    texts = decode_responses(run.tokenizer, rollout.tokens[:, -t_r:], rollout.response_mask)
    group_examples = [e for e in examples for _ in range(G)]
    scores, correct, infos = score_batch(run.task, texts, group_examples,
                                         response_lengths=rollout.lengths)
    scores = np.asarray(scores, np.float32)
    rewards = scores
    if rl.overlong_buffer_frac > 0:
      buffer = dapo.overlong_buffer_tokens(rl.overlong_buffer_frac, t_r)
      rewards = scores + np.asarray(dapo.overlong_penalty(
          rollout.lengths, max_len=t_r, buffer_len=buffer,
          penalty_factor=rl.overlong_penalty_factor))
  return Generated(rollout, np.asarray(rewards, np.float32), scores, correct,
                   nonfinite=infos["nonfinite"])


def _select_groups(generated: Generated, keep: np.ndarray, group_size: int) -> Generated:
  """The rows of the groups where keep [P] bool is True."""
  rows = np.repeat(keep, group_size)
  rollout = type(generated.rollout)(*[np.asarray(x)[rows] for x in generated.rollout])
  return Generated(rollout, generated.rewards[rows], generated.scores[rows],
                   generated.correct[rows], _row_flags(generated, "filler")[rows],
                   _row_flags(generated, "nonfinite")[rows])


def _concat(parts: list[Generated]) -> Generated:
  rollout_type = type(parts[0].rollout)
  return Generated(rollout_type(*[np.concatenate(xs) for xs in zip(*[p.rollout for p in parts])]),
                   np.concatenate([p.rewards for p in parts]),
                   np.concatenate([p.scores for p in parts]),
                   np.concatenate([p.correct for p in parts]),
                   np.concatenate([_row_flags(p, "filler") for p in parts]),
                   np.concatenate([_row_flags(p, "nonfinite") for p in parts]))


def _gather(generated: Generated, hosts: hosts_lib.Hosts) -> Generated:
  """Every process's rows of `generated`, concatenated in process order (the one-process batch);
  `generated` itself with one process."""
  if hosts.count == 1:
    return generated
  rollout, rest = hosts_lib.gather_rows(
      (tuple(generated.rollout), (generated.rewards, generated.scores, generated.correct,
                                  _row_flags(generated, "filler"),
                                  _row_flags(generated, "nonfinite"))), hosts)
  return Generated(type(generated.rollout)(*rollout), *rest)


def _generation_stats(rounds: list[Generated], group_size: int) -> dict[str, float]:
  """Reward and length statistics over every response generated this step by every process
  (before any DAPO filtering), so the training-reward curve is not biased by the filter."""
  everything = _gather(_concat(rounds), hosts_lib.current())
  stats = group_stats(everything.scores, everything.correct, group_size)
  lengths = np.asarray(everything.rollout.lengths)
  stats.update({
      "reward/shaped_mean": float(everything.rewards.mean()),
      # Task scores that were NaN, infinite or None, scored 0 (rewards.score_batch).
      "reward/nonfinite_frac": float(_row_flags(everything, "nonfinite").mean()),
      "response/length_mean": float(lengths.mean()),
      "tokens/generated": int(np.asarray(everything.rollout.response_mask).sum()),
      "sampling/rounds": len(rounds),
      # The sampler's prompt width (a bucket of rollout.max_prompt_tokens): one compile each.
      "batch/prompt_bucket": int(everything.rollout.prompt_mask.shape[1]),
  })
  return stats


def _collect_rollouts(run, state, key, counters, clock) -> tuple[Generated, dict]:
  """One rollout batch of P groups, and statistics over all responses generated for it.

  With DAPO dynamic sampling (Yu et al. 2025), groups whose verdicts are all equal carry no
  correctness signal and are dropped; fresh prompts are sampled (up to MAX_SAMPLING_ROUNDS
  rounds) until P groups with signal are collected; if they run out, zero-signal groups fill the
  batch so shapes stay static, marked as `filler` so the update masks them out of the loss (they
  would only dilute the token-mean denominator). The filter uses the verifier's verdicts (groups all right or all
  wrong are dropped), not the shaped reward, as verl's DAPO recipe filters on accuracy. Every generated response counts toward `samples`.
  """
  rl = run.rl_config
  P, G = rl.prompts_per_step, rl.group_size
  hosts = hosts_lib.current()
  rounds, parts, spare, kept = [], [], [], 0
  for round_index in range(MAX_SAMPLING_ROUNDS if rl.dynamic_sampling else 1):
    # This process's share of the round (all P with one process); counters stay global.
    generated = _generate_groups(
        run, state, hosts_lib.process_key(jax.random.fold_in(key, round_index), hosts),
        hosts_lib.stream_offsets(counters["prompts"], P, hosts), clock)
    counters["prompts"] += P
    counters["samples"] += P * G
    rounds.append(generated)
    if not rl.dynamic_sampling:
      return generated, _generation_stats(rounds, G)
    signal_groups = np.asarray(dapo.groups_with_signal(generated.correct.astype(np.float32), G))
    keep = np.zeros(P, bool)
    keep[np.flatnonzero(signal_groups)[:P - kept]] = True
    parts.append(_select_groups(generated, keep, G))
    spare.append(_select_groups(generated, ~signal_groups, G))
    kept += int(keep.sum())
    if kept == P:
      break
  if kept < P:
    filler = _concat(spare)
    keep = np.zeros(len(filler.rewards) // G, bool)
    keep[:P - kept] = True
    parts.append(_select_groups(filler, keep, G)._replace(filler=np.ones((P - kept) * G, bool)))
  stats = _generation_stats(rounds, G)
  stats["sampling/kept_groups_with_signal"] = kept
  stats["sampling/out_of_rounds"] = int(kept < P)  # 1: filler groups completed this batch
  return _concat(parts), stats


def _loss_mask(run, generated: Generated) -> tuple[np.ndarray, dict[str, float]]:
  """The update's response mask: the rollout's, with the rows that must not enter the loss set to
  0 by `masks.mask_rows` (truncated responses when rl.mask_truncated, DAPO filler groups), and
  the fractions of the batch's rows that are truncated and that are masked for each reason."""
  rollout = generated.rollout
  t_r = rollout.response_mask.shape[1]
  truncated = np.asarray(masks.truncated_rows(rollout.tokens[:, -t_r:], rollout.response_mask,
                                              run.sampler.eos_ids))
  masked_truncated = truncated & bool(run.rl_config.mask_truncated)
  filler = _row_flags(generated, "filler")
  loss_mask = np.asarray(masks.mask_rows(rollout.response_mask, ~(masked_truncated | filler)))
  return loss_mask, {"response/truncated_frac": float(truncated.mean()),
                     "loss_mask/truncated_frac": float(masked_truncated.mean()),
                     "loss_mask/filler_frac": float(filler.mean())}


def _behaviour_logp(run, state, sharded, rollout) -> tuple[np.ndarray, dict[str, float]]:
  """The update's old_logp [B, Tr] as rl.old_logp asks: the sampler's, or ("recompute") a trainer
  forward with the current params, also written into sharded["old_logp"], with the
  sampler-trainer mismatch: the mean k3 of the trainer's log-probs against the sampler's over real
  tokens, train/sampler_trainer_k3 (with "sampler" the update step logs the same quantity)."""
  if run.rl_config.old_logp != "recompute":
    return rollout.logp, {}
  sharded["old_logp"] = run.logp_fn(state.params, sharded)
  old_logp = np.asarray(sharded["old_logp"]).reshape(rollout.logp.shape)
  return old_logp, _sampler_trainer_mismatch(old_logp, rollout)


def _sampler_trainer_mismatch(old_logp, rollout) -> dict[str, float]:
  """{"train/sampler_trainer_k3": mean k3 of the trainer's log-probs old_logp [B, Tr] against the
  sampler's (rollout.logp) over the real tokens (rollout.response_mask)}."""
  mismatch = masks.masked_mean(kl_divergence("k3", old_logp, rollout.logp), rollout.response_mask)
  return {"train/sampler_trainer_k3": float(mismatch)}


def _rl_step(run, state, step_key, counters, clock):
  """One rollout batch and its update(s); advances `counters` and the RunClock `clock` in place.

  Returns (metrics record, new state)."""
  sample_key, update_key = jax.random.split(step_key)
  generated, generation_stats = _collect_rollouts(run, state, sample_key, counters, clock)
  with clock.measure("training"):
    train_record, state = train_phase(run, state, generated, update_key)
  return {**generation_stats, **train_record}, state


def update_batch(run, state, generated: Generated) -> tuple[dict, dict]:
  """The update step's batch from a scored rollout batch: trimmed to its bucketed prompt and
  response widths, with the reference / critic / recomputed behaviour passes the config needs,
  advantages and the loss mask, sharded over the devices.

  With several processes (`rlscale.runner.hosts`), `generated` holds this process's rows; the
  widths, advantages, loss mask and statistics come from the union of every process's rows
  (gathered in process order: the one-process batch), so every process trains on the same shapes
  and the step equals the one-process step on the union; the device passes run on this process's
  rows, and the returned batch holds this process's rows.

  Returns: (sharded batch with a leading device axis, record: mask stats, the sampler-trainer
  mismatch when old_logp is recomputed, tokens/trained, and the trained widths in tokens
  batch/prompt_width and batch/response_width: one update-step compile per pair)."""
  rl = run.rl_config
  hosts = hosts_lib.current()
  everything = _gather(generated, hosts)
  # Train on the batch's longest prompt and response, bucketed (a few static widths), not the
  # sampler's prompt bucket and response limit: the left padding and the columns after every
  # response are compute without effect on the loss. Taken from the union so that every process
  # trims to the same widths (the sharded update's shapes must match across processes).
  prompt_width, width = train_widths(everything.rollout)
  rollout = trim_rollout(generated.rollout, width, prompt_width)
  union = rollout if hosts.count == 1 else trim_rollout(everything.rollout, width, prompt_width)
  batch = {
      "tokens": rollout.tokens,
      "input_mask": np.concatenate([rollout.prompt_mask, rollout.response_mask], axis=1),
      "response_mask": rollout.response_mask,
      "old_logp": rollout.logp,
  }
  sharded = update_lib.shard_batch(batch, run.num_devices)
  old_logp, mismatch = _behaviour_logp(run, state, sharded, rollout)
  extras = {}
  if update_lib.uses_ref_logp(rl):
    extras["ref_logp"] = run.logp_fn(run.ref_params, sharded)
  if update_lib.uses_critic(rl):
    extras["values"] = run.value_fn(state.critic_params, sharded)
  flat = {k: np.asarray(v).reshape((-1,) + v.shape[2:]) for k, v in extras.items()}
  if hosts.count > 1:
    # The passes above ran on this process's rows; advantages need every row.
    flat = hosts_lib.gather_rows({**flat, "old_logp": old_logp}, hosts)
    old_logp = flat.pop("old_logp")
    if mismatch:
      mismatch = _sampler_trainer_mismatch(old_logp, union)
  targets = run.advantage_fn(everything.rewards, union.response_mask, old_logp=old_logp,
                             ref_logp=flat.get("ref_logp"), values=flat.get("values"))
  if "ref_logp" in extras:
    sharded["ref_logp"] = extras["ref_logp"]
  if "values" in extras:
    sharded["old_values"] = extras["values"]
  # Advantages (and ref_logp, values) above use every row; the loss only the unmasked ones.
  loss_mask, mask_stats = _loss_mask(run, everything)  # truncation is judged at the full width
  loss_mask = hosts_lib.own_rows(loss_mask[:, :width], hosts)
  targets = hosts_lib.own_rows({k: np.asarray(v) for k, v in targets.items()}, hosts)
  sharded.update(update_lib.shard_batch({**targets, "response_mask": loss_mask},
                                        run.num_devices))
  tokens = int(union.prompt_mask.sum() + union.response_mask.sum())
  return sharded, {**mask_stats, **mismatch, "tokens/trained": tokens,
                   "batch/prompt_width": prompt_width, "batch/response_width": width}


def train_phase(run, state, generated: Generated, update_key):
  """The training phase of one RL step (what the runner times as `training`): `update_batch`,
  then the update step and its metrics on the host.

  Args: run (`builders.Run`), state (replicated TrainState, donated), generated (`Generated`),
  update_key (PRNG key of the update).
  Returns: (record: mask stats, train/* metrics as Python floats, tokens/trained; new state).
  """
  sharded, record = update_batch(run, state, generated)
  state, metrics = run.update_fn(state, sharded,
                                 update_lib.replicate_key(update_key, run.num_devices))
  metrics = {f"train/{k}": float(np.asarray(v).reshape(-1)[0])
             for k, v in jax.device_get(metrics).items()}
  return {**record, **metrics}, state


def _out_of_rounds_warning(run, record, step) -> str:
  return (f"warning: step {step}: DAPO dynamic sampling found "
          f"{record['sampling/kept_groups_with_signal']} of {run.rl_config.prompts_per_step} "
          f"groups with both right and wrong answers in {MAX_SAMPLING_ROUNDS} rounds; groups "
          "without signal (masked out of the loss) fill the batch. Counted per step as "
          "sampling/out_of_rounds in metrics.jsonl; printed once")


def _read_json(path) -> dict:
  if not os.path.exists(path):
    return {}
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _save_warm_eval(workdir, warm_eval):
  outputs.write_json(os.path.join(workdir, "warm_start_eval.json"), warm_eval)


def _load_warm_eval(workdir):
  return _read_json(os.path.join(workdir, "warm_start_eval.json"))


def _mean_of(records, key):
  values = [r[key] for r in records if key in r]
  return float(np.mean(values)) if values else None


def export_policy(workdir: str, model_config, params, tokenizer=None) -> str:
  """Writes the policy as a HF checkpoint (config.json + model.safetensors, loadable by
  `rlscale.model.load_hf_checkpoint` and by transformers) to `<workdir>/policy`, with the run's
  tokenizer files when `tokenizer` is given (`Tokenizer.save`: the HF checkpoint's files, or the
  character vocabulary as tokenizer.json); returns the path.

  Atomic: written to policy.tmp first, then renamed over any previous export."""
  final = os.path.join(workdir, POLICY_DIR)
  partial = final + ".tmp"
  shutil.rmtree(partial, ignore_errors=True)
  save_hf_checkpoint(partial, model_config, params)
  if tokenizer is not None:
    tokenizer.save(partial)
  if os.path.exists(final):
    shutil.rmtree(final)
  os.replace(partial, final)
  return final


def _finish(workdir, run, params, warm_eval, step, counters, clock):
  policy = export_policy(workdir, run.export_config, params, run.tokenizer)
  records = read_metrics(os.path.join(workdir, METRICS_FILE))
  plots = plot_curves(records, workdir, title=run.title, group_size=run.rl_config.group_size,
                      pass_k=run.evaluator.pass_k)
  final_eval = next((r for r in reversed(records) if "eval/greedy_accuracy" in r), {})
  times = clock.record(interval=False)
  parts = {key[len("wall/"):]: value for key, value in times.items() if key != "wall/total"}
  rl_seconds = sum(parts[p] for p in ("generation", "reward", "training"))
  summary = {
      "warm_start_accuracy": warm_eval.get("eval/greedy_accuracy"),
      "final_accuracy": final_eval.get("eval/greedy_accuracy"),
      "warm_start_pass_at_k": warm_eval.get("eval/pass_at_k"),
      "final_pass_at_k": final_eval.get("eval/pass_at_k"),
      "final_mean_reward": final_eval.get("eval/mean_reward"),
      "steps": step,
      "samples_consumed": counters["samples"],
      "prompts_consumed": counters["prompts"],
      "wall_seconds": times["wall/total"],
      # Seconds per part of the RL run (execution; compilation apart; they sum to wall_seconds);
      # warm_start (model load + SFT or its cache, recorded by the run's first segment) is not
      # part of wall_seconds.
      "phase_seconds": {**parts, "warm_start": run.warm_start_seconds},
      # Two rates, named apart: per second of the RL wall clock and per second of generation +
      # reward + training execution only (the progress bar's rate is a third: wall less compile).
      "steps_per_wall_second": step / times["wall/total"] if times["wall/total"] else None,
      "steps_per_compute_second": step / rl_seconds if rl_seconds else None,
      # Fraction of RL steps whose update gradient clipping changed (optim/clipped).
      "clipped_fraction": _mean_of(records, "optim/clipped"),
      "num_devices": run.num_devices,  # local devices of each process
      "num_processes": jax.process_count(),
      "plots": plots,
      "metrics": os.path.join(workdir, METRICS_FILE),
      "tensorboard": os.path.join(workdir, "tensorboard"),
      "policy": policy,
  }
  outputs.write_json(os.path.join(workdir, SUMMARY_FILE), summary, indent=2)
  run.log(f"done: held-out greedy accuracy {summary['warm_start_accuracy']:.3f} "
          f"({run.starting_point}) -> "
          f"{summary['final_accuracy']:.3f} (after {step} RL steps, "
          f"{summary['samples_consumed']} responses) in {summary['wall_seconds']:.0f} s "
          f"(+ {run.warm_start_seconds:.0f} s model load and warm start before the RL clock)")
  run.log(f"results: {os.path.join(workdir, SUMMARY_FILE)}; curves: {plots['vs_samples']}, "
          f"{plots['vs_wall_time']}; TensorBoard: tensorboard --logdir {summary['tensorboard']}; "
          f"final policy (HF format): {policy}")
  out_of_rounds = sum(int(r.get("sampling/out_of_rounds", 0)) for r in records)
  if out_of_rounds:
    run.log(f"warning: DAPO dynamic sampling ran out of rounds in {out_of_rounds} of {step} steps "
            "(sampling/out_of_rounds in metrics.jsonl)")
  run.log(accuracy_change_note(summary["warm_start_accuracy"], summary["final_accuracy"],
                               len(run.evaluator.examples), smoke=run.smoke))
  return summary
