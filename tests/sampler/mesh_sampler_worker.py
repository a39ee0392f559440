"""Subprocess worker of tests/sampler/test_mesh_sampler.py (needs 8 host devices, set before JAX
starts: XLA_FLAGS=--xla_force_host_platform_device_count=8).

  python -m tests.sampler.mesh_sampler_worker

Samples one batch with one key by the one-device pmapped `Sampler` (the reference) and by
`MeshSampler` on each mesh, and prints one JSON line: per case and mesh whether the tokens, masks
and lengths equal the reference's, the largest |logp difference|, how the KV cache's keys are
sharded inside the jitted decode, and the rows each device holds of the output.
"""

import json

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from rlscale.model import init_params
from rlscale.model.config import ModelConfig
from rlscale.parallel import mesh as mesh_lib
from rlscale.parallel import shardings as shardings_lib
from rlscale.sampler import sampler as sampler_lib
from rlscale.sampler.mesh_sampler import MeshSampler
from rlscale.sampler.sampler import Sampler
from rlscale.sampler.strategies import SamplingConfig

# 2 KV heads and hidden 32: tensor = 2 shards heads and kv_heads, fsdp = 2 the embed dimension.
MODEL = ModelConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                    num_kv_heads=2, head_dim=8)
MESHES = {"111": (1, 1, 1), "data4": (4, 1, 1), "fsdp2_tensor2": (1, 2, 2), "222": (2, 2, 2)}
CASES = {  # name: (sampling, prompts P, samples per prompt G, the meshes it runs on)
    "temperature_P4_G2": (SamplingConfig(temperature=1.0), 4, 2, tuple(MESHES)),
    # P = 2 below data x fsdp = 4: the prompts are replicated, the G = 4 rows each sharded.
    "top_k_P2_G4": (SamplingConfig(temperature=0.8, top_k=5), 2, 4, ("data4", "222")),
    "greedy_P8_G1": (SamplingConfig(temperature=0.0), 8, 1, ("fsdp2_tensor2",)),
}


def prompts(num_prompts: int):
  rng = np.random.default_rng(0)
  tokens = rng.integers(3, MODEL.vocab_size, (num_prompts, 7)).astype(np.int32)
  mask = np.ones_like(tokens)
  for row in range(num_prompts):
    mask[row, :row % 4] = 0  # left padding of 0..3 slots
  return tokens, mask


def cache_spec(mesh) -> str:
  """PartitionSpec of a [8, K, D, 16] key cache buffer constrained by `constrain_cache` inside a
  jitted function on `mesh` (what the decode loop's carry gets)."""
  from rlscale.model.transformer import init_cache  # pylint: disable=g-import-not-at-top
  from rlscale.parallel.rules import DEFAULT_RULES  # pylint: disable=g-import-not-at-top

  def probe(x):
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
      cache = init_cache(MODEL, 8, 16)
      cache = cache._replace(k=tuple(k + x for k in cache.k))  # computed on the mesh
      return sampler_lib.constrain_cache(cache, DEFAULT_RULES).k[0]
  x = jax.device_put(np.zeros((), np.float32), NamedSharding(mesh, PartitionSpec()))
  return str(jax.jit(probe)(x).sharding.spec)


def main():
  params = init_params(MODEL, jax.random.key(0))
  # Larger logits than the init's, so sampling is far from uniform and ties are rarer.
  params = jax.tree.map(lambda x: np.asarray(x) * 3.0 if x.ndim == 2 else np.asarray(x), params)
  key = jax.random.key(42)
  results = {}
  for case, (sampling, num_prompts, group, meshes) in CASES.items():
    tokens, mask = prompts(num_prompts)
    reference = Sampler(MODEL, max_new_tokens=6, sampling=sampling, eos_ids=(1,), pad_id=0,
                        prompt_buckets=(8,), devices=jax.devices()[:1])(
                            params, tokens, mask, key, samples_per_prompt=group)
    for name in meshes:
      shape = MESHES[name]
      devices = jax.devices()[:int(np.prod(shape))]
      mesh = mesh_lib.make_mesh(dict(zip(mesh_lib.MESH_AXES, shape)), devices)
      placed = shardings_lib.put_on_mesh(params, shardings_lib.tree_shardings(params, mesh))
      sampler = MeshSampler(MODEL, 6, sampling, (1,), 0, mesh, prompt_buckets=(8,))
      out = sampler(placed, tokens, mask, key, samples_per_prompt=group)
      again = sampler(placed, tokens, mask, key, samples_per_prompt=group)
      results[f"{case}/{name}"] = {
          "tokens_equal": bool(np.array_equal(out.tokens, reference.tokens)),
          "masks_equal": bool(np.array_equal(out.response_mask, reference.response_mask)
                              and np.array_equal(out.prompt_mask, reference.prompt_mask)),
          "lengths_equal": bool(np.array_equal(out.lengths, reference.lengths)),
          "logp_max_abs": float(np.max(np.abs(out.logp - reference.logp))),
          "repeat_equal": bool(np.array_equal(out.tokens, again.tokens)),
          "traces": sampler.num_traces,
          "tokens_vary": bool(len(np.unique(reference.tokens[:, 8:])) > 2),
      }
  for name, shape in MESHES.items():
    mesh = mesh_lib.make_mesh(dict(zip(mesh_lib.MESH_AXES, shape)),
                              jax.devices()[:int(np.prod(shape))])
    results[f"cache_spec/{name}"] = cache_spec(mesh)
  # A key that differs gives different tokens (the comparison above can fail).
  tokens, mask = prompts(4)
  mesh = mesh_lib.make_mesh({"data": 4, "fsdp": 1, "tensor": 1}, jax.devices()[:4])
  sampler = MeshSampler(MODEL, 6, SamplingConfig(temperature=1.0), (1,), 0, mesh, prompt_buckets=(8,))
  a = sampler(params, tokens, mask, key, samples_per_prompt=2)
  b = sampler(params, tokens, mask, jax.random.key(43), samples_per_prompt=2)
  results["other_key_differs"] = bool(not np.array_equal(a.tokens, b.tokens))
  print(json.dumps(results))


if __name__ == "__main__":
  main()
