"""One RL step: a rollout batch (`rollouts.collect_rollouts`), its update batch
(`update_batch.make_update_batch`) and the update step, as the runner, the throughput profile
(`rlscale.scaling.throughput`) and the benchmarks run it; and the checks that stop a run whose
training diverged (`nonfinite_training_values`, `all_finite`, `divergence_message`)."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rlscale.runner.rollouts import Generated, collect_rollouts
from rlscale.runner.update_batch import make_update_batch


def clip_fired(grad_norm: float, threshold: float | None) -> float:
  """`optim/clipped`: 1.0 when global-norm clipping changed the step's update (pre-clip norm
  `train/grad_norm` > threshold), else 0.0 (always 0 with clipping off, threshold None). With
  several optimizer updates per step (epochs x minibatches) grad_norm is their mean, so this says
  whether the mean norm exceeded the threshold."""
  return float(threshold is not None and grad_norm > threshold)


def rl_step(run, state, step_key, counters, clock):
  """One rollout batch and its update(s); advances `counters` and the RunClock `clock` in place.

  Args: run (`roles.Run`), state (TrainState as the run holds it; donated), step_key (the
    step's PRNG key, `fold_in(seed key, step)`), counters ({"samples", "prompts"}: responses
    generated and prompts drawn so far), clock (`timing.RunClock`).
  Returns (metrics record of Python numbers, new state)."""
  sample_key, update_key = jax.random.split(step_key)
  generated, generation_stats = collect_rollouts(run, state, sample_key, counters, clock)
  with clock.measure("training"):
    train_record, state = train_phase(run, state, generated, update_key)
  return {**generation_stats, **train_record}, state


def train_phase(run, state, generated: Generated, update_key):
  """The training phase of one RL step (what the runner times as `training`):
  `update_batch.make_update_batch`, then the update step and its metrics on the host.

  Args: run (`roles.Run`), state (TrainState on the mesh, donated), generated (`Generated`),
  update_key (PRNG key of the update).
  Returns: (record: mask stats, train/* metrics as Python floats, tokens/trained; new state).
  """
  return finish_update(*start_update(run, state, generated, update_key))


def start_update(run, state, generated: Generated, update_key):
  """The first half of `train_phase`: the update batch and the update step, dispatched (JAX
  returns before XLA has run it, so the caller can do other work meanwhile, as the
  asynchronous rollouts' "dispatch" overlap does). Returns (record, new state, metrics on the
  device), `finish_update`'s arguments."""
  batch, record = make_update_batch(run, state, generated)
  state, metrics = run.trainer.update(state, batch.arrays(), update_key)
  return record, state, metrics


def finish_update(record: dict, state, metrics):
  """The second half of `train_phase`: waits for the update's metrics and returns (record with
  train/* metrics as Python floats, state)."""
  metrics = {f"train/{k}": float(v) for k, v in jax.device_get(metrics).items()}
  return {**record, **metrics}, state


def nonfinite_training_values(record: dict) -> list[str]:
  """Keys of the step's losses and gradient norms (`train/*loss`, `train/*grad_norm`: the
  policy's and, for PPO, the critic's) whose value is NaN or infinite, in record order.

  Read from the metrics record, whose values are already on the host for logging, so the check
  adds no device round trip to the step."""
  return [k for k, v in record.items()
          if k.startswith("train/") and k.endswith(("loss", "grad_norm"))
          and isinstance(v, (int, float)) and not math.isfinite(v)]


def divergence_message(step: int, record: dict, bad: list[str], last_good: int | None,
                       checkpoint_dir: str) -> str:
  """The one-line reason a run stopped at RL step `step` (1-based) with non-finite `bad` values
  of its metrics `record` (`nonfinite_training_values`), e.g. "step 7: the loss is nan (grad norm
  nan); the run stopped, its last good checkpoint (step 6) is kept in <dir>; ...".

  `last_good`: the newest checkpoint's step, None when none was written yet."""
  loss, norm = _number(record.get("train/loss")), _number(record.get("train/grad_norm"))
  if "train/loss" in bad or "train/grad_norm" not in bad:
    what = f"the loss is {loss} (grad norm {norm})"
  else:
    what = f"the gradient norm is {norm} (loss {loss})"
  others = [k for k in bad if k not in ("train/loss", "train/grad_norm")]
  if others:
    what += "; also non-finite: " + ", ".join(f"{k} = {record[k]}" for k in others)
  return f"step {step}: {what}; {stopped_note(last_good, checkpoint_dir)}"


def _number(value) -> str:
  """A metric for a message: 6 significant digits ("nan", "inf" as they are)."""
  return f"{value:.6g}" if isinstance(value, (int, float)) else str(value)


def stopped_note(last_good: int | None, checkpoint_dir: str) -> str:
  """What is kept of a diverged run and what to change: rerunning the same command resumes from
  the last good checkpoint and diverges again (every step's randomness is fixed by the seed)."""
  kept = (f"its last good checkpoint (step {last_good}) is kept in {checkpoint_dir}"
          if last_good is not None else "no checkpoint was written before it")
  return (f"the run stopped and exported no policy, {kept}; the same command would diverge "
          "again: lower optim.learning_rate or clip harder (optim.grad_clip_norm) and start a "
          "new --workdir")


def all_finite(tree: Any) -> bool:
  """Whether every floating-point leaf of `tree` (device or host arrays; other leaves such as
  integer counters and PRNG keys are skipped) holds only finite values. One reduction on the
  device and one scalar fetched: the runner calls it before writing a checkpoint, not every
  step."""
  leaves = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
  return not leaves or bool(_leaves_finite(leaves))


@jax.jit
def _leaves_finite(leaves):
  return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


def host_tree_finite(tree: Any) -> bool:
  """`all_finite` for a tree of host (numpy) arrays, checked on the host without copying it to
  a device (the exported policy's params)."""
  return all(bool(np.isfinite(np.asarray(x)).all()) for x in jax.tree.leaves(tree)
             if jnp.issubdtype(np.asarray(x).dtype, jnp.inexact))
