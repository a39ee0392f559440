"""Subprocess worker of tests/runner/test_async_loop.py's two-device case (2 host devices, set
before JAX starts: XLA_FLAGS=--xla_force_host_platform_device_count=2).

  python -m tests.runner.async_mesh_worker SFT_CACHE WORKDIR

Asynchronous rollouts at k = 2 on the mesh {data: 2} (parameter snapshots and the sampler on
both devices): an uninterrupted 4-step run, and a run stopped after 2 steps (its checkpoint holds
batches 2 and 3, drawn by versions 0 and 1) then resumed. Prints one JSON line: the devices, the
uninterrupted run's rollout/policy_version and rollout/staleness_max per step, the in-flight
batches of the step-2 checkpoint, and whether the resumed run's metrics (non-time fields) equal
the uninterrupted run's.
"""

import json
import os
import sys

import jax

from rlscale.runner.loop import train_and_evaluate
from rlscale.runner.metrics_log import read_metrics
from tests.runner.runner_configs import comparable, multihost_config


def main(sft_cache: str, work: str) -> None:
  config = multihost_config(sft_cache, 4)
  config.rl.max_off_policy_steps = 2
  config.mesh.data = 2
  whole, parts = os.path.join(work, "whole"), os.path.join(work, "parts")
  train_and_evaluate(config, whole)
  train_and_evaluate(config, parts, stop_after_steps=2)
  with open(os.path.join(parts, "checkpoints", "2", "meta", "metadata"), encoding="utf-8") as f:
    in_flight = [(b["batch"], b["version"]) for b in json.load(f)["in_flight"]]
  train_and_evaluate(config, parts)
  records = read_metrics(os.path.join(whole, "metrics.jsonl"))[1:]
  print(json.dumps({
      "devices": jax.device_count(),
      "policy_version": [r["rollout/policy_version"] for r in records],
      "staleness_max": [r["rollout/staleness_max"] for r in records],
      "in_flight_at_2": in_flight,
      "resumed_equal": comparable(read_metrics(os.path.join(parts, "metrics.jsonl")))
                       == comparable(read_metrics(os.path.join(whole, "metrics.jsonl")))}))


if __name__ == "__main__":
  main(*sys.argv[1:])
