"""Subprocess worker of tests/sampler/test_sampler_mesh.py (needs 8 host devices, set before JAX
starts: XLA_FLAGS=--xla_force_host_platform_device_count=8).

  python -m tests.sampler.sampler_mesh_worker
  python -m tests.sampler.sampler_mesh_worker process ID PORT OUT
      (with 2 host devices per process): one of two processes joined by jax.distributed on
      localhost, sampling on a {data: 2, fsdp: 2} mesh over both processes' 4 devices, each
      process passing only its half of the prompts (TWO_PROCESS_CASES); saves its rows to OUT.

Samples one batch with one key by the `Sampler` on a one-device mesh (the reference, itself
checked against `decode.generate`) and on meshes of 2, 4 and 8 devices (data, fsdp, tensor), and
prints one JSON line: per case and mesh whether the tokens, masks and lengths equal the
reference's, the largest |logp difference|, the compile count; how the KV cache's keys are
sharded inside the jitted decode; host-thread chunks on a mesh against one device; a batch the
mesh cannot split.
"""

import json
import sys

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from rlscale.model import init_params
from rlscale.model.config import ModelConfig
from rlscale.model.transformer import param_shardings
from rlscale.parallel import mesh as mesh_lib
from rlscale.parallel import shardings as shardings_lib
from rlscale.sampler import decode
from rlscale.sampler.sampler import Sampler
from rlscale.sampler.strategies import SamplingConfig
from tests.timeouts import hang_timeout

# 2 KV heads and hidden 32: tensor = 2 shards heads and kv_heads, fsdp = 2 the embed dimension.
MODEL = ModelConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                    num_kv_heads=2, head_dim=8)
TR = 6
# (data, fsdp, tensor); None: the default mesh (mesh=None), data parallelism over all 8 devices.
MESHES = {"111": (1, 1, 1), "data2": (2, 1, 1), "data4": (4, 1, 1), "data8": None,
          "fsdp2_tensor2": (1, 2, 2), "222": (2, 2, 2)}
CASES = {  # name: (sampling, prompts P, samples per prompt G, the meshes it runs on)
    "temperature_P4_G2": (SamplingConfig(temperature=1.0), 4, 2, tuple(MESHES)),
    # P below data x fsdp: the prompts are replicated, the G rows of each sharded.
    "top_k_P2_G4": (SamplingConfig(temperature=0.8, top_k=5), 2, 4, ("data4", "222")),
    "temperature_P1_G2": (SamplingConfig(temperature=1.0), 1, 2, ("data2",)),
    "greedy_P8_G1": (SamplingConfig(temperature=0.0), 8, 1, ("fsdp2_tensor2",)),
}


# name: (global prompts P, samples per prompt G). P = 4 splits over data x fsdp = 4 (shared
# prefill); P = 2 does not, so each process repeats its prompt G times.
TWO_PROCESS_CASES = {"P4_G2": (4, 2), "P2_G4": (2, 4)}
TWO_PROCESS_SAMPLING = SamplingConfig(temperature=1.0)
KEY = 42


def model_params():
  params = init_params(MODEL, jax.random.key(0))
  # Larger logits than the init's, so sampling is far from uniform and ties are rarer.
  return jax.tree.map(lambda x: np.asarray(x) * 3.0 if x.ndim == 2 else np.asarray(x), params)


def make_mesh(name: str):
  shape = MESHES[name]
  if shape is None:
    return None
  return mesh_lib.make_mesh(dict(zip(mesh_lib.MESH_AXES, shape)),
                            jax.devices()[:int(np.prod(shape))])


def prompts(num_prompts: int):
  rng = np.random.default_rng(0)
  tokens = rng.integers(3, MODEL.vocab_size, (num_prompts, 7)).astype(np.int32)
  mask = np.ones_like(tokens)
  for row in range(num_prompts):
    mask[row, :row % 4] = 0  # left padding of 0..3 slots
  return tokens, mask


def sampler(name: str, sampling, host_threads: int = 1) -> Sampler:
  return Sampler(MODEL, TR, sampling, (1,), 0, make_mesh(name), prompt_buckets=(8,),
                 host_threads=host_threads)


def compare(out, reference) -> dict:
  return {
      "tokens_equal": bool(np.array_equal(out.tokens, reference.tokens)),
      "masks_equal": bool(np.array_equal(out.response_mask, reference.response_mask)
                          and np.array_equal(out.prompt_mask, reference.prompt_mask)),
      "lengths_equal": bool(np.array_equal(out.lengths, reference.lengths)),
      "logp_max_abs": float(np.max(np.abs(out.logp - reference.logp))),
      "numpy": all(isinstance(x, np.ndarray) for x in out if x is not None),
  }


def cache_spec(mesh) -> str:
  """PartitionSpec of a [8, K, D, 16] key cache buffer constrained by `constrain_cache` inside a
  jitted function on `mesh` (what the decode loop's carry gets)."""
  from rlscale.model.transformer import init_cache  # pylint: disable=g-import-not-at-top
  from rlscale.parallel.rules import DEFAULT_RULES  # pylint: disable=g-import-not-at-top

  def probe(x):
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
      cache = init_cache(MODEL, 8, 16)
      cache = cache._replace(k=tuple(k + x for k in cache.k))  # computed on the mesh
      return decode.constrain_cache(cache, DEFAULT_RULES).k[0]
  x = jax.device_put(np.zeros((), np.float32), NamedSharding(mesh, PartitionSpec()))
  return str(jax.jit(probe)(x).sharding.spec)


def main():
  assert len(jax.devices()) == 8, jax.devices()
  params = model_params()
  key = jax.random.key(KEY)
  results = {}
  for case, (sampling, num_prompts, group, meshes) in CASES.items():
    tokens, mask = prompts(num_prompts)
    reference = sampler("111", sampling)(params, tokens, mask, key, samples_per_prompt=group)
    padded, padded_mask = decode.pad_to_bucket(np.repeat(tokens, group, 0),
                                               np.repeat(mask, group, 0), (8,), 0)
    direct = decode.generate(params, padded, padded_mask, jax.random.fold_in(key, 0),
                             model_config=MODEL, max_new_tokens=TR, sampling=sampling,
                             eos_ids=(1,), pad_id=0)
    results[f"{case}/reference_is_generate"] = compare(
        decode.map_rollout(np.asarray, direct), reference)
    for name in meshes:
      on_mesh = sampler(name, sampling)
      placed = shardings_lib.put_on_mesh(
          params, param_shardings(params, on_mesh.mesh))
      out = on_mesh(placed, tokens, mask, key, samples_per_prompt=group)
      again = on_mesh(params, tokens, mask, key, samples_per_prompt=group)  # host params
      results[f"{case}/{name}"] = {
          **compare(out, reference),
          "repeat_equal": bool(np.array_equal(out.tokens, again.tokens)),
          "traces": on_mesh.num_traces,
          "num_devices": on_mesh.num_devices,
          "tokens_vary": bool(len(np.unique(reference.tokens[:, 8:])) > 2),
      }
  for name in ("111", "data4", "fsdp2_tensor2", "222"):
    results[f"cache_spec/{name}"] = cache_spec(make_mesh(name))
  # Host-thread chunks on a mesh: each chunk spread over its devices, the tokens of one device.
  tokens, mask = prompts(4)
  sampling = SamplingConfig(temperature=1.0)
  one = sampler("111", sampling, host_threads=2)(params, tokens, mask, key, samples_per_prompt=2)
  plain = sampler("111", sampling)(params, tokens, mask, key, samples_per_prompt=2)
  results["host_threads/chunks_differ_from_one_key"] = bool(
      not np.array_equal(one.tokens, plain.tokens))
  for name in ("data2", "222"):
    threaded = sampler(name, sampling, host_threads=2)
    threaded(params, tokens, mask, key, samples_per_prompt=2)  # compiles
    out = threaded(params, tokens, mask, key, samples_per_prompt=2)  # chunks concurrently
    results[f"host_threads/{name}"] = {**compare(out, one), "traces": threaded.num_traces}
  # B = 3 does not split over data 2.
  try:
    sampler("data2", sampling)(params, tokens[:3], mask[:3], key)
    results["odd_batch_error"] = None
  except ValueError as e:
    results["odd_batch_error"] = str(e)
  # A key that differs gives different tokens (the comparisons above can fail).
  on_data4 = sampler("data4", sampling)
  a = on_data4(params, tokens, mask, key, samples_per_prompt=2)
  b = on_data4(params, tokens, mask, jax.random.key(43), samples_per_prompt=2)
  results["other_key_differs"] = bool(not np.array_equal(a.tokens, b.tokens))
  print(json.dumps(results))


def run_process(process_id: int, port: int, out: str) -> None:
  """One process of the two-process test: TWO_PROCESS_CASES on a {data: 2, fsdp: 2} mesh over
  both processes, this process's prompts only; its rows (and the refusal of host_threads) to
  `out` (.npz)."""
  jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                             process_id=process_id, initialization_timeout=int(hang_timeout(30)))
  mesh = mesh_lib.make_mesh(mesh_lib.mesh_config(2, 2, 1), jax.devices())
  sampler = Sampler(MODEL, TR, TWO_PROCESS_SAMPLING, (1,), 0, mesh, prompt_buckets=(8,))
  saved = {"num_devices": np.asarray(sampler.num_devices)}
  for case, (num_prompts, group) in TWO_PROCESS_CASES.items():
    tokens, mask = prompts(num_prompts)
    half = num_prompts // 2
    mine = slice(process_id * half, (process_id + 1) * half)
    rollout = sampler(model_params(), tokens[mine], mask[mine], jax.random.key(KEY),
                      samples_per_prompt=group)
    for field in ("tokens", "logp", "response_mask", "num_steps"):
      saved[f"{case}/{field}"] = getattr(rollout, field)
  try:
    Sampler(MODEL, TR, TWO_PROCESS_SAMPLING, (1,), 0, mesh, host_threads=2)
  except ValueError as e:
    saved["host_threads_error"] = np.asarray(str(e))
  np.savez(out, **saved)
  jax.distributed.shutdown()


if __name__ == "__main__":
  if len(sys.argv) > 1 and sys.argv[1] == "process":
    run_process(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
  else:
    main()
