"""The run directory: the names of its files, whether a config may resume the run there, whether
it holds results a failed run must not delete, whether the run is already complete, and its
outputs at the end (the exported policy, the curves, summary.json).

Layout of a workdir: config.json (the resolved config), metrics.jsonl, tensorboard/,
checkpoints/<step>/, warm_start_eval.json, warm_start_seconds.json, curves_vs_samples.png,
curves_vs_wall_time.png, summary.json and policy/ (a HF checkpoint); sft/ holds the warm-start
cache when sft.cache_dir is unset; .lock exists while a run holds the workdir
(`rlscale.runner.workdir_lock`; never a result).
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import jax
import numpy as np

from rlscale import outputs
from rlscale import inputs
from rlscale.cli import TrainingDiverged
from rlscale.model import save_hf_checkpoint
from rlscale.runner import builders
from rlscale.runner import validate
from rlscale.runner.checkpoints import Checkpointer
from rlscale.runner.config_files import flatten_config
from rlscale.runner.evaluate import accuracy_change_note
from rlscale.runner.metrics_log import read_metrics
from rlscale.runner.plots import plot_curves
from rlscale.runner.rl_step import host_tree_finite

CONFIG_FILE = "config.json"
POLICY_DIR = "policy"  # the final policy as a HF checkpoint
SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_DIR = "checkpoints"
WARM_START_FILE = "warm_start_seconds.json"  # written once by the first segment of a run
# Fields that may change when resuming a run; any other change means a different experiment.
# The mesh may: a checkpoint restores onto any mesh and the run continues up to float rounding.
RESUMABLE_FIELDS = ("train.total_steps", "train.total_samples", "train.eval_every",
                    "train.eval_every_samples", "train.checkpoint_every",
                    "train.keep_checkpoints", "sft.cache_dir", "distributed", "mesh.data",
                    "mesh.fsdp", "mesh.tensor", "mesh.expert", "rollout.async_overlap")
# Fields added after runs were checkpointed, with the value their absence meant: a config.json
# written before a field existed resumes while the field keeps that value.
ADDED_FIELD_DEFAULTS = {"optim.schedule_unit": "steps", "optim.warmup_samples": 0,
                        "train.measure_noise_scale": False, "mesh.data": -1, "mesh.fsdp": 1,
                        "mesh.tensor": 1, "model.attention_impl": "auto",
                        "model.remat_impl": "auto", "model.moe_routing_replay": False,
                        "rl.max_off_policy_steps": 0, "rl.off_policy_correction": None,
                        "rl.tis_cap": 2.0, "rl.decoupled_weight_cap": None,
                        "rollout.async_overlap": "thread"}
# DAPO dynamic sampling: at most this many rounds of P prompts per step (verl's max_num_gen_batches).


def check_resume_config(workdir: str, config) -> None:
  """Refuses to resume a checkpointed run with a different config.

  Raises ValueError naming the changed fields unless only RESUMABLE_FIELDS differ from the
  workdir's config.json (written by the run that made the checkpoints; a field it or the current
  config lacks counts as ADDED_FIELD_DEFAULTS gives)."""
  path = os.path.join(workdir, CONFIG_FILE)
  checkpoints = os.path.join(workdir, CHECKPOINTS_DIR)
  if not (os.path.exists(path) and os.path.isdir(checkpoints) and os.listdir(checkpoints)):
    return
  saved = {**ADDED_FIELD_DEFAULTS, **flatten_config(inputs.read_json(path)["config"])}
  # A field only some configs have (model.moe_routing_replay: MoE configs) reads as its default
  # on both sides.
  current = {**ADDED_FIELD_DEFAULTS,
             **flatten_config(json.loads(json.dumps(config.to_dict(), default=str)))}
  changed = sorted(k for k in set(saved) | set(current)
                   if saved.get(k) != current.get(k) and k not in RESUMABLE_FIELDS)
  if changed:
    details = ", ".join(f"{k}: {saved.get(k)!r} -> {current.get(k)!r}" for k in changed[:8])
    raise ValueError(f"workdir {workdir!r} holds checkpoints of a run with another config "
                     f"({details}); use a new --workdir, or change only {list(RESUMABLE_FIELDS)} "
                     "when resuming")



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
  total_steps = validate.resolve_total_steps(
      config.train, config.rl.prompts_per_step * config.rl.group_size)
  checkpointer = Checkpointer(os.path.join(workdir, CHECKPOINTS_DIR),
                              keep=config.train.keep_checkpoints)
  latest = checkpointer.latest_step()
  checkpointer.close()
  summary = read_json(path)
  done = latest is not None and min(latest, summary.get("steps", -1)) >= total_steps
  return summary if done else None



def last_accuracy(workdir: str, step: int) -> float | None:
  """Held-out greedy accuracy of the last evaluation at or before `step` in the workdir's
  metrics.jsonl (the warm start's at step 0), or None when none is recorded."""
  records = read_metrics(os.path.join(workdir, METRICS_FILE))
  evaluated = [r for r in records if r.get("step", 0) <= step and "eval/greedy_accuracy" in r]
  return evaluated[-1]["eval/greedy_accuracy"] if evaluated else None



def read_json(path) -> dict:
  """The JSON object in file `path`, or {} when the file does not exist."""
  if not os.path.exists(path):
    return {}
  return inputs.read_json(path)


def save_warm_eval(workdir: str, warm_eval: dict) -> None:
  """Writes the warm start's held-out metrics (step 0) to `<workdir>/warm_start_eval.json`, which
  a resumed run reads back for its summary (`load_warm_eval`)."""
  outputs.write_json(os.path.join(workdir, "warm_start_eval.json"), warm_eval)


def load_warm_eval(workdir: str) -> dict:
  """The warm start's held-out metrics `save_warm_eval` wrote, or {} when absent."""
  return read_json(os.path.join(workdir, "warm_start_eval.json"))


def _mean_of(records, key):
  values = [r[key] for r in records if key in r]
  return float(np.mean(values)) if values else None


def export_policy(workdir: str, model_config, params, tokenizer=None) -> str:
  """Writes the policy as a HF checkpoint (config.json + model.safetensors, loadable by
  `rlscale.model.load_hf_checkpoint` and by transformers) to `<workdir>/policy`, with the run's
  tokenizer files when `tokenizer` is given (`Tokenizer.save`: the HF checkpoint's files, or the
  character vocabulary as tokenizer.json); returns the path.

  Atomic: written to policy.tmp first, then renamed over any previous export.

  Raises: rlscale.cli.TrainingDiverged (nothing written) when a parameter is NaN or infinite: a
  diverged policy is never exported, also not by a rerun re-exporting from a checkpoint."""
  final = os.path.join(workdir, POLICY_DIR)
  if not host_tree_finite(params):
    raise TrainingDiverged(f"the policy's parameters are not all finite: it is not exported to "
                           f"{final}; lower optim.learning_rate or clip harder "
                           "(optim.grad_clip_norm) and start a new --workdir")
  partial = final + ".tmp"
  shutil.rmtree(partial, ignore_errors=True)
  save_hf_checkpoint(partial, model_config, params)
  if tokenizer is not None:
    tokenizer.save(partial)
  if os.path.exists(final):
    shutil.rmtree(final)
  os.replace(partial, final)
  return final


def finish(workdir: str, run, params, warm_eval: dict, step: int, counters: dict, clock, *,
           final_eval: dict | None = None) -> dict:
  """The end of a run in `workdir` (process 0): the policy exported (`export_policy`), the curves
  plotted, summary.json written and the closing lines logged.

  Args: run (`roles.Run`), params (the final policy's params, one host copy), warm_eval (the
    warm start's held-out metrics), step (RL steps done), counters ({"samples", "prompts"}),
    clock (`timing.RunClock`: the wall time and its parts), final_eval (the held-out metrics of
    the run's last evaluation, from its own memory; None when this segment evaluated nothing,
    e.g. a rerun after a crash between the last checkpoint and the summary: then the last
    evaluation in metrics.jsonl, which the workdir lock keeps this run's own).
  Returns: the summary dict (as written to summary.json).
  Raises: rlscale.cli.TrainingDiverged for non-finite params (`export_policy`).
  """
  policy = export_policy(workdir, run.export_config, params, run.tokenizer)
  records = read_metrics(os.path.join(workdir, METRICS_FILE))
  plots = plot_curves(records, workdir, title=run.title, group_size=run.rl_config.group_size,
                      pass_k=run.evaluator.pass_k)
  if final_eval is None:
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
