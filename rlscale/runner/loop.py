"""The RL loop: config -> trained policy, metrics.jsonl, checkpoints, curves and summary.json.

Its parts live in their own modules: `rollouts` (generation, DAPO dynamic sampling), `update_batch`
(the update step's typed batch), `rl_step` (one step: rollouts, batch, update) and `run_dir` (the
run directory's names, resume checks, the policy export and summary); this module keeps
`train_and_evaluate` and the loop over steps (evaluation schedule, logging, checkpoints, stops).

One step: P prompts from the task stream -> G samples each (the jitted sampler on the mesh) ->
rewards (host verifier) -> advantages (jitted) -> update step (jitted on the mesh) -> one metrics
record indexed by step,
responses consumed and seconds per part (`rlscale.runner.timing`: generation / reward / training /
evaluation / checkpointing execution, JAX compilation apart, and the rest as other; `time/*` since
the previous record, `wall/*` cumulative, parts summing to `wall/total`). Every
`train.checkpoint_every` steps the train state, the task-stream position and the cumulative wall
time are saved; running the same command again resumes from there and reproduces the metrics of an
uninterrupted run, because every step's randomness is `fold_in(seed key, step)`.

Asynchronous rollouts (rl.max_off_policy_steps = k >= 1, `rlscale.runner.async_rollouts`): batch n
is drawn by the policy after max(0, n - k) updates, in a rollout thread (or between the update's
dispatch and its metrics) while the trainer updates; checkpoints also hold the k batches in
flight (`inflight`), so a resumed run equals an uninterrupted one at the same k. k = 0 runs each
step with `rl_step`, unchanged.

Evaluation schedule: every `train.eval_every` steps, or, when `train.eval_every_samples` = E is set,
at every step where the responses consumed cross a multiple of E (the first step whose count is
>= k * E; with a fixed budget and B dividing E, every batch size evaluates at the same counts, and
otherwise each record's `samples` holds the exact count). The warm start (0 samples) and the final
step are always evaluated. Every evaluation uses the same key (`evaluate.evaluation_key`).

Several processes (multi-host, `rlscale.runner.hosts`): each process draws its own share of the
global P prompts (stream offsets by process index), whose rows are its part of the step's global
arrays; the sampler, the advantages and the update run on the mesh over every process's devices
in the global view, so a step equals the one-process step on the same prompts. Each process
evaluates its share of the held-out set and all get the union's metrics; process 0 alone writes
config.json, metrics.jsonl, TensorBoard, plots, summary.json and the policy; every process takes
part in orbax's checkpoint save (orbax writes the host arrays from process 0). The workdir must be
on a file system every process sees.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import tqdm

from rlscale import outputs
from rlscale.cli import TrainingDiverged
from rlscale.runner import async_rollouts, builders, inflight
from rlscale.runner import validate
from rlscale.runner import hosts as hosts_lib
from rlscale.runner import preflight
from rlscale.runner import progress
from rlscale.runner import workdir_lock
from rlscale.runner.checkpoints import Checkpointer
from rlscale.runner.evaluate import evaluation_key
from rlscale.runner.interrupts import StopFlag
from rlscale.runner.metrics_log import MetricsLogger
from rlscale.runner.rl_step import (all_finite, clip_fired, divergence_message,
                                     nonfinite_training_values, rl_step, stopped_note)
from rlscale.runner.rollouts import MAX_SAMPLING_ROUNDS
from rlscale.runner.run_dir import (CHECKPOINTS_DIR, CONFIG_FILE, POLICY_DIR, SUMMARY_FILE,
                                    WARM_START_FILE, check_resume_config, completed_summary,
                                    export_policy, finish, holds_results, last_accuracy,
                                    load_warm_eval, read_json, save_warm_eval)
from rlscale.runner.sft import effective_sft_seed
from rlscale.runner.timing import RunClock
from rlscale.train.optimizer import clipping_threshold


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
  One run per workdir: process 0 holds the workdir's lock (`rlscale.runner.workdir_lock`) from
  the moment the workdir exists to the end; a run started in a workdir another run holds raises
  WorkdirInUse (a ValueError naming the holder's pid and host) and changes nothing there. A
  finished run is answered (`run already complete ...`, its summary) before the lock, reading
  only, so a read-only workdir still shows its results; an unfinished one where the lock cannot
  be created raises workdir_lock.WorkdirReadOnly (a ValueError: one line, exit status 2).
  A run that fails (an exception or Ctrl-C) before it has written results leaves no half-made
  workdir: unless `holds_results(workdir)`, what the run added is removed, and the workdir itself
  when the run created it (`rlscale.outputs.removed_on_failure`); a workdir that existed before
  keeps what it held. With several processes only process 0 removes anything: the workdir is
  shared, and what another process would see as added may be process 0's.

  A non-finite loss or gradient norm at a step (or a non-finite state about to be checkpointed)
  stops the run there: that step's metrics record is written, no checkpoint of it and no policy,
  and TrainingDiverged (exit status 3) names the step and the last good checkpoint.

  Raises: ValueError for an invalid config (naming the field and the allowed values),
  FileNotFoundError for a missing checkpoint or data path, workdir_lock.WorkdirInUse (a
  ValueError) when another run holds the workdir, rlscale.cli.TrainingDiverged as above.
  """
  builders.maybe_initialize_distributed(config.get("distributed", "auto"))
  # Every config check, once, before the workdir exists (a refusal leaves nothing on disk);
  # build_run builds from the result and checks nothing again.
  checked = preflight.check_config(config)
  if not hosts_lib.joined().writer:
    outputs.make_dirs(workdir)
    return _train_and_evaluate(config, workdir, stop_after_steps, checked)
  # A finished run answers before the lock, reading only: a read-only workdir still shows it.
  finished = _finished_run(config, workdir, writer=True)
  if finished is not None:
    return finished
  # The lock first, before any slow step and before removed_on_failure looks at the workdir: a
  # refused run must neither wait for a model build nor remove what the holder is writing.
  with workdir_lock.held(workdir), outputs.removed_on_failure(workdir, keep=holds_results):
    return _train_and_evaluate(config, workdir, stop_after_steps, checked)


def _complete_line(steps: int, workdir: str) -> str:
  """What asking again for a finished run prints."""
  return f"run already complete ({steps} steps); results: {os.path.join(workdir, SUMMARY_FILE)}"


def _finished_run(config, workdir: str, writer: bool) -> dict[str, Any] | None:
  """The summary of the finished run of `config` in `workdir` (`completed_summary`; a changed
  config raises as `check_resume_config`), saying so when `writer`; None when there is more to
  do. Reads only."""
  check_resume_config(workdir, config)
  finished = completed_summary(config, workdir)
  if finished is not None and writer:
    print(_complete_line(finished["steps"], workdir))
  return finished



def _train_and_evaluate(config, workdir: str, stop_after_steps: int | None,
                        checked: validate.CheckedConfig) -> dict[str, Any]:
  hosts = hosts_lib.current()
  # Again under the lock (the writer asked before taking it): a run that finished and released
  # the lock in between is answered, not redone; the other processes ask here only.
  finished = _finished_run(config, workdir, hosts.writer)
  if finished is not None:
    return finished
  run = builders.build_run(config, workdir, log=print if hosts.writer else _quiet, checked=checked)
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
  layout = run.layout
  step = 0
  counters = {"samples": 0, "prompts": 0}  # responses generated, prompts drawn from the stream
  latest = checkpointer.latest_step()
  in_flight = []  # asynchronous rollouts' batches drawn before the checkpoint (`inflight`)
  if latest is not None:
    state, meta = checkpointer.restore(latest, layout.restore_target(state))
    in_flight = inflight.restore(checkpointer.restore_rollouts(latest),
                                 meta.get(inflight.META_KEY, []))
    step, counters = int(meta["step"]), dict(meta["counters"])
    clock.resume(meta["phase_seconds"], meta["wall_seconds"])
    run.log(f"resumed from checkpoint at step {step} ({counters['prompts']} prompts consumed)")
    summary_path = os.path.join(workdir, SUMMARY_FILE)
    if step >= run.total_steps and os.path.exists(summary_path):
      checkpointer.close()
      run.log(_complete_line(step, workdir))
      with open(summary_path, encoding="utf-8") as f:
        summary = json.load(f)
      if hosts.writer and not os.path.isdir(os.path.join(workdir, POLICY_DIR)):
        # finished before the export existed
        summary["policy"] = export_policy(workdir, run.export_config, layout.host_params(state.params),
                                          run.tokenizer)
        outputs.write_json(summary_path, summary, indent=2)
      return summary
  logger = (MetricsLogger(workdir, resume_step=step if latest is not None else None)
            if hosts.writer else _NullLogger())

  base_key = jax.random.key(config.seed)
  eval_key = evaluation_key(config.task.get("eval_seed", 1234))
  if latest is None:
    with clock.measure("evaluation"):
      warm_eval = run.evaluator(state.params, eval_key)
    logger.write({"step": 0, "samples": 0, **warm_eval, **clock.record(interval=False)})
    run.log(f"{run.starting_point}: held-out greedy accuracy "
            f"{warm_eval['eval/greedy_accuracy']:.3f}, "
            f"pass@{config.eval.pass_k} {warm_eval['eval/pass_at_k']:.3f}")
    if hosts.writer:
      save_warm_eval(workdir, warm_eval)
      outputs.write_json(os.path.join(workdir, WARM_START_FILE),
                         {"seconds": run.warm_start_seconds})
    shown_accuracy = warm_eval["eval/greedy_accuracy"]  # on the bar until the next evaluation
  else:
    warm_eval = load_warm_eval(workdir)
    shown_accuracy = last_accuracy(workdir, step) if hosts.writer else None
  # The first segment's model load + warm start seconds, whatever a resume's setup took.
  run.warm_start_seconds = read_json(os.path.join(workdir, WARM_START_FILE)).get(
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
  # With rl.max_off_policy_steps = k >= 1 the next batches are drawn ahead while the trainer
  # updates (`async_rollouts`); at k = 0 `ahead` is None and each step is `rl_step`.
  with StopFlag(lambda: running) as stop, async_rollouts.ahead_of_training(
      run, async_rollouts.overlap_mode(config), first=step, end=total_steps, state=state,
      base_key=base_key, counters=counters, restored=in_flight, clock=clock) as ahead:
    while step < total_steps and not stopping:
      running = step + 1
      step_key = jax.random.fold_in(base_key, step)
      samples_before = counters["samples"]
      if ahead is None:
        record, state = rl_step(run, state, step_key, counters, clock)
      else:
        record, state = async_rollouts.async_step(ahead, state, step, counters, clock)
      record["optim/clipped"] = clip_fired(record["train/grad_norm"], clip_threshold)
      if record.get("sampling/out_of_rounds") and not warned_out_of_rounds and hosts.writer:
        warned_out_of_rounds = True
        tqdm.tqdm.write(_out_of_rounds_warning(run, record, step + 1))
      step += 1
      record.update(step=step, **counters)
      diverged = nonfinite_training_values(record)
      if stop_after_steps is not None and step - first_step >= stop_after_steps:
        stop.stop = True
      if not diverged and evaluation_due(  # no evaluation of a diverged policy
          step=step, total_steps=total_steps, samples_before=samples_before,
          samples_after=counters["samples"], eval_every=config.train.eval_every,
          eval_every_samples=config.train.get("eval_every_samples")):
        with clock.measure("evaluation"):
          last_eval = run.evaluator(state.params, eval_key)
        record.update(last_eval)
        shown_accuracy = last_eval["eval/greedy_accuracy"]
      # time/* covers everything since the previous record (the previous step's checkpoint too).
      record.update(clock.record())
      logger.write(record)  # a diverged step's too, so the user sees its values
      if diverged:
        raise _diverged(bar, logger, checkpointer, lambda last, where: divergence_message(
            step, record, diverged, last, where), ahead=ahead)
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
          saved = state
          # A finite loss and gradient norm can still leave non-finite parameters (an update
          # overflowing), and a checkpoint of them would be resumed: check what is saved.
          if not all_finite(saved):
            raise _diverged(bar, logger, checkpointer, lambda last, where: (
                f"step {step}: the parameters or optimizer state are not finite after the "
                f"update (loss {record['train/loss']:.6g}, grad norm "
                f"{record['train/grad_norm']:.6g}); "
                + stopped_note(last, where)), ahead=ahead)
          meta = {"step": step, "counters": counters,
                  "wall_seconds": clock.wall_seconds(), "phase_seconds": clock.totals}
          arrays = None
          if ahead is not None:  # the batches drawn for the next steps, waited for
            arrays, meta[inflight.META_KEY] = inflight.to_checkpoint(ahead.in_flight(step))
          checkpointer.save(step, saved, meta, rollouts=arrays)
    running = None
    if ahead is not None:
      # The rollout side first: its thread stopped and joined (a batch it is drawing finishes
      # and is discarded) before the run closes or exports anything, so no work of it runs
      # into what the teardown shuts down (the checkpointer's executors, the process's exit).
      ahead.close()
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
    return finish(workdir, run, layout.host_params(state.params), warm_eval, step,
                  counters, clock, final_eval=last_eval)


def _diverged(bar, logger, checkpointer, message, *, ahead=None) -> TrainingDiverged:
  """The TrainingDiverged to raise when training stops on non-finite values: the rollout side
  (`ahead`, asynchronous rollouts; None at k = 0) stopped, then the progress bar, metrics log
  and checkpointer closed (the error line then stands alone, the log is flushed),
  `message(last good checkpoint step or None, checkpoint folder)` its text."""
  if ahead is not None:
    ahead.close(failed=True)
  bar.close()
  logger.close()
  last_good = checkpointer.latest_step()
  checkpointer.close()
  return TrainingDiverged(message(last_good, checkpointer.directory))


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



def _quiet(message: str) -> None:  # pylint: disable=unused-argument
  """The log of processes other than 0: they print nothing (process 0 reports the run)."""


class _NullLogger:
  """MetricsLogger's interface for processes other than 0, which write no metrics."""

  def write(self, record) -> None:  # pylint: disable=unused-argument
    pass

  def close(self) -> None:
    pass





def _out_of_rounds_warning(run, record, step) -> str:
  return (f"warning: step {step}: DAPO dynamic sampling found "
          f"{record['sampling/kept_groups_with_signal']} of {run.rl_config.prompts_per_step} "
          f"groups with both right and wrong answers in {MAX_SAMPLING_ROUNDS} rounds; groups "
          "without signal (masked out of the loss) fill the batch. Counted per step as "
          "sampling/out_of_rounds in metrics.jsonl; printed once")
