"""Subprocess worker of tests/model/test_attention.py (needs 4 host devices, set before JAX
starts: XLA_FLAGS=--xla_force_host_platform_device_count=4).

  python -m tests.model.splash_mesh_worker

Runs splash attention (Pallas interpret mode) under `jax.shard_map` on a {data: 2, fsdp: 1,
tensor: 2} mesh of CPU devices, as the update step traces it (abstract mesh + logical rules),
and prints one JSON line: the largest differences of the output and of the q/k/v gradients
from the dense "cpu" path, and how many manual (shard_map) computations the program holds.
"""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from rlscale.model import attention
from rlscale.parallel.rules import DEFAULT_RULES


def main():
  mesh = jax.make_mesh((2, 1, 2), ("data", "fsdp", "tensor"),
                       axis_types=(jax.sharding.AxisType.Auto,) * 3)
  b, t, h, k, d = 4, 40, 4, 2, 8
  rng = np.random.default_rng(0)
  q, key, value = (jnp.asarray(rng.normal(size=(b, t, n, d)), jnp.float32) for n in (h, k, k))
  segment_ids = np.ones((b, t), np.int32)
  segment_ids[0, :7] = 0  # left padding
  segment_ids[1, 20:] = 2  # two packed sequences
  segment_ids[2] = 0  # a row of padding only
  weights = jnp.asarray(rng.normal(size=(b, t, h, d)), jnp.float32)

  def outputs_and_grads(q, key, value, ids, impl):
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(DEFAULT_RULES):
      segments = attention.segments_from_mask(ids)
      run = lambda *qkv: attention.attend(*qkv, segments, impl=impl)  # noqa: E731
      loss = lambda *qkv: jnp.sum(run(*qkv) * weights)  # noqa: E731
      return run(q, key, value), jax.grad(loss, argnums=(0, 1, 2))(q, key, value)

  rows = NamedSharding(mesh, PartitionSpec("data"))
  args = [jax.device_put(x, rows) for x in (q, key, value, jnp.asarray(segment_ids))]
  fn = jax.jit(outputs_and_grads, static_argnums=4)
  splash, dense = fn(*args, "splash"), fn(*args, "cpu")
  diffs = jax.tree.leaves(jax.tree.map(lambda a, c: float(jnp.max(jnp.abs(a - c))), splash, dense))
  manual = fn.lower(*args, "splash").as_text().count("sdy.manual_computation")
  print(json.dumps({"out": diffs[0], "grads": diffs[1:], "manual_computations": manual}))


if __name__ == "__main__":
  main()
