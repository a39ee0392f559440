"""Subprocess worker for the multi-process runner tests (tests/runner/test_hosts_processes.py).

  python -m tests.runner.hosts_worker WORKDIR SFT_CACHE TOTAL_STEPS OUT

One of the processes of a run joined by jax.distributed on localhost through the runner's own
path (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID in the environment):
`train_and_evaluate(multihost_config(SFT_CACHE, TOTAL_STEPS), WORKDIR)`. Saves to OUT (.npz) the
training-stream offsets this process read (`offsets`, in order) and, for every sampling round r,
what it generated (`r/rollout/<field>`, `r/rewards`, `r/scores`, `r/correct`).
"""

import sys

import jax
import numpy as np

from rlscale.runner import builders
from rlscale.runner import loop, rollouts
from tests.runner.runner_configs import multihost_config

SFT_OFFSETS = 10**8  # the warm start reads the stream from here on (builders.warm_start)


def record_stream(patch) -> tuple[list, list]:
  """Makes the runner record, in this process, every RL training-stream offset its task reads
  and every sampling round's Generated; `patch(module, name, value)` sets the wrappers (e.g.
  pytest's monkeypatch.setattr). Returns the (offsets, rounds) lists they append to."""
  offsets, rounds = [], []
  make_task, generate = builders.make_task, rollouts.generate_groups

  def making(*args, **kwargs):
    task = make_task(*args, **kwargs)
    read = task.train_example

    def train_example(offset):
      if offset < SFT_OFFSETS:
        offsets.append(offset)
      return read(offset)

    task.train_example = train_example
    return task

  def generating(*args):
    rounds.append(generate(*args))
    return rounds[-1]

  patch(builders, "make_task", making)
  patch(rollouts, "generate_groups", generating)
  return offsets, rounds


def main(workdir: str, sft_cache: str, total_steps: int, out: str) -> None:
  offsets, rounds = record_stream(setattr)
  loop.train_and_evaluate(multihost_config(sft_cache, total_steps), workdir)
  arrays = {"offsets": np.asarray(offsets, np.int64)}
  for r, generated in enumerate(rounds):
    arrays.update({f"{r}/rollout/{k}": np.asarray(v)
                   for k, v in generated.rollout._asdict().items() if v is not None})
    arrays.update({f"{r}/{k}": np.asarray(getattr(generated, k))
                   for k in ("rewards", "scores", "correct")})
  np.savez(out, **arrays)
  jax.distributed.shutdown()


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
