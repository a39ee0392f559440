"""One RL step: a rollout batch (`rollouts.collect_rollouts`), its update batch
(`update_batch.make_update_batch`) and the update step, as the runner, the throughput profile
(`rlscale.scaling.throughput`) and the benchmarks run it."""

from __future__ import annotations

import jax
import numpy as np

from rlscale.runner.layout import layout_of
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

  Args: run (`builders.Run`), state (TrainState as the run holds it; donated), step_key (the
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

  Args: run (`builders.Run`), state (TrainState as the run's layout holds it, donated), generated (`Generated`),
  update_key (PRNG key of the update).
  Returns: (record: mask stats, train/* metrics as Python floats, tokens/trained; new state).
  """
  batch, record = make_update_batch(run, state, generated)
  state, metrics = run.update_fn(state, batch.arrays(),
                                 layout_of(run).update_key(update_key))
  metrics = {f"train/{k}": float(np.asarray(v).reshape(-1)[0])
             for k, v in jax.device_get(metrics).items()}
  return {**record, **metrics}, state
