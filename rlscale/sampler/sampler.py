"""The sampler: `decode.generate` jitted over a device mesh, prompts bucketed to a few lengths.

`Sampler` binds the static choices once (model config, response length, sampling strategy, EOS
ids, pad id, prompt-length buckets), left-pads each prompt batch to a bucket so only a handful of
shapes are ever compiled, and runs `generate` under `jax.jit` in the global view (flax lm1b's
jitted decode; tunix's sampler on its mesh): params sharded as the train state's
(`rlscale.parallel.shardings`), prompt and response rows over the mesh's batch axes (data x fsdp),
the KV cache by its logical names (`decode.CACHE_K_AXES`), the model's activations by theirs
(`transformer.constrain_activations`); XLA's partitioner places the collectives. One device is
the mesh {data: 1}. On a mesh over several processes each process passes its own prompt rows,
which become its rows of the global batch (`parallel.data.global_batch`), and gets back the
responses of those rows (`parallel.data.local_rows`).

One global key: the noise of response column i is `gumbel(fold_in(fold_in(rng, 0), i))` over the
whole [B, V] batch, drawn by the partitionable threefry (`jax_threefry_partitionable`, on by
default), so the same key gives the same tokens on any mesh (float summation order aside, which
can flip a token only at an exact tie of perturbed logits), and the same key on every process
of a multi-process mesh gives each row the noise of its place in the global batch. The inner
`fold_in(rng, 0)` keeps the samples of the sampler's earlier one-device form, so earlier runs
reproduce.
"""

from __future__ import annotations

import concurrent.futures
from typing import Optional, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from rlscale.model.config import ModelConfig
from rlscale.model.transformer import param_shardings
from rlscale.parallel.data import batch_sharding, global_batch, local_rows, mesh_processes
from rlscale.parallel.mesh import batch_parallelism, make_mesh, mesh_config
from rlscale.parallel.rules import DEFAULT_RULES
from rlscale.sampler.decode import (Rollout, check_special_ids, checked_batch, generate_unchecked,
                                    id_tuple, map_rollout, pad_to_bucket, positive_int)
from rlscale.sampler.strategies import SamplingConfig


def _hashable_rules(rules) -> tuple:
  """Logical axis rules (pairs of a name and mesh axes: None, a name or a sequence of names, as
  a ConfigDict's lists) as nested tuples, hashable for the static arguments."""
  return tuple((name, tuple(axes) if isinstance(axes, (list, tuple)) else axes)
               for name, axes in rules)


def _placed(x, sharding: NamedSharding) -> jax.Array:
  """x (an array of any kind) on `sharding`: x itself when already so placed (jit takes an
  equivalent sharding as is; `jax.device_put` would cost a copy per call), else a copy there."""
  if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(sharding, x.ndim):
    return x
  return jax.device_put(x, sharding)


class Sampler:
  """Bucketed `generate` jitted over a mesh, with the static choices bound once.

  Args:
    model_config: ModelConfig of the params passed to `__call__`.
    max_new_tokens: Tr, response length limit (int >= 1).
    sampling: default SamplingConfig (a call may override it; each distinct one compiles once).
    eos_ids: sequence of EOS token ids, e.g. `tokenizer.eos_ids` (() disables EOS).
    pad_id: id used to left-pad prompts and to fill responses after EOS, e.g. `tokenizer.pad_id`.
    mesh: a `rlscale.parallel.mesh.make_mesh` Mesh; None: data parallelism over every device
      (`make_mesh(mesh_config())`).
    prompt_buckets: allowed padded prompt lengths (ints >= 1), e.g. (16, 32, 64, 128).
    param_shardings: NamedShardings of the params tree on `mesh` (e.g. the train state's,
      `rlscale.train.update_fn.make_update_fn(...).state_shardings.params`); None: derived from
      the first call's params' paths and shapes (`transformer.param_shardings` under `rules`).
    rules: logical axis rules (`rules.DEFAULT_RULES` format) of the params (when derived), the
      KV cache and the activations.
    host_threads: split each batch into up to C = host_threads contiguous row chunks (the largest
      C <= host_threads with B divisible by C x num_devices), each spread over the mesh and
      generated concurrently from its own host thread, chunk c with the key fold_in(rng, c).
      On a CPU backend XLA runs one decode loop on about one core and concurrent programs occupy
      the others: on 2 cores 1.2-1.6x tokens/s at batch 16-256 for 64-token responses
      (benchmarks/results/sampler.json: rlscale_cache, 2 threads, against
      rlscale_cache_one_thread), none for the main job's 8-token ones. Leave 1 on
      accelerators. The samples then depend on the chunk count, so on the device count too.
      Must be 1 on a mesh over several processes.

  Attributes:
    mesh: the Mesh the sampler runs on.
    param_shardings: the params' NamedShardings (None until the first call when not given).
    num_traces: how many times the generation function was traced (= compilations), for tests.

  Raises:
    ValueError: naming the argument, on max_new_tokens or host_threads not an int >= 1, an empty
      bucket list or a bucket not an int >= 1, eos_ids not a sequence of ints, eos_ids or pad_id
      outside the model's vocabulary (`decode.check_special_ids`), or sampling not a
      SamplingConfig, or host_threads > 1 on a mesh over several processes; from
      `mesh.make_mesh` when mesh is None.
  """

  def __init__(self, model_config: ModelConfig, max_new_tokens: int, sampling: SamplingConfig,
               eos_ids: Sequence[int], pad_id: int, mesh=None, *,
               prompt_buckets: Sequence[int] = (16, 32, 64, 128, 256), param_shardings=None,
               rules=DEFAULT_RULES, host_threads: int = 1):
    self.host_threads = positive_int(host_threads, "host_threads")
    if not prompt_buckets or any(not isinstance(b, int) or b < 1 for b in prompt_buckets):
      raise ValueError("prompt_buckets must be a non-empty sequence of ints >= 1, "
                       f"got {prompt_buckets!r}")
    if not isinstance(sampling, SamplingConfig):
      raise ValueError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
    self.model_config = model_config
    self.max_new_tokens = positive_int(max_new_tokens, "max_new_tokens")
    self.sampling = sampling
    self.eos_ids = id_tuple(eos_ids)  # hashable Python ints for the static argument
    self.pad_id = int(pad_id) if isinstance(pad_id, (int, np.integer)) else pad_id
    check_special_ids(self.eos_ids, self.pad_id, model_config.vocab_size)
    self.prompt_buckets = tuple(sorted(prompt_buckets))
    self.mesh = make_mesh(mesh_config()) if mesh is None else mesh
    self._processes = mesh_processes(self.mesh)
    if self._processes > 1 and self.host_threads > 1:
      raise ValueError(f"host_threads={self.host_threads} splits each process's rows into "
                       "chunks of their own keys; it must be 1 on a mesh over "
                       f"{self._processes} processes")
    self.rules = _hashable_rules(rules)
    self.param_shardings = param_shardings
    self.num_traces = 0
    self._jitted = {}  # (sampling, G, prompts sharded) -> jitted generate
    self._compiled = set()  # call signatures already run once, so threads never race to compile
    self._pool = (concurrent.futures.ThreadPoolExecutor(self.host_threads)
                  if self.host_threads > 1 else None)

  @property
  def num_devices(self) -> int:
    """How many parts the rows are split into (the mesh's batch axes, data x fsdp): B must be a
    multiple."""
    return batch_parallelism(self.mesh)

  def jitted(self, sampling: SamplingConfig, samples_per_prompt: int, prompts_sharded: bool,
             params=None):
    """The `jax.jit` generate of one (sampling, G, prompt layout), fn(params, prompt_tokens
    [P, Tp] int32, prompt_mask [P, Tp] int32, rng) -> Rollout of global arrays, e.g. to `.lower()`
    for abstract inputs (`rlscale.aot`). prompts_sharded: the prompt rows split over the mesh's
    batch axes (else every device holds every prompt); params: only needed when the sampler was
    built without param_shardings (they are derived from its paths and shapes)."""
    return self._function(params, sampling, samples_per_prompt, prompts_sharded)

  def _function(self, params, sampling: SamplingConfig, group: int, prompts_sharded: bool):
    """The jitted generate of one (sampling, G, prompt layout), built once."""
    key = (sampling, group, prompts_sharded)
    if key not in self._jitted:
      if self.param_shardings is None:
        self.param_shardings = param_shardings(params, self.mesh, rules=self.rules)
      replicated = NamedSharding(self.mesh, PartitionSpec())
      rows = batch_sharding(self.mesh, 2)
      prompts = rows if prompts_sharded else replicated
      per_row = batch_sharding(self.mesh, 1)
      out = Rollout(rows, rows, rows, rows, per_row, per_row,
                    batch_sharding(self.mesh, 4) if self.model_config.moe_layers else None)

      def run(params, tokens, mask, rng):
        self.num_traces += 1  # runs only while tracing
        rng = jax.random.fold_in(rng, 0)  # see the module docstring
        with jax.sharding.use_abstract_mesh(self.mesh.abstract_mesh), \
            nn.logical_axis_rules(self.rules):
          return generate_unchecked(params, tokens, mask, rng, model_config=self.model_config,
                                    max_new_tokens=self.max_new_tokens, sampling=sampling,
                                    eos_ids=self.eos_ids, pad_id=self.pad_id,
                                    samples_per_prompt=group, cache_rules=self.rules)

      self._jitted[key] = jax.jit(run, in_shardings=(self.param_shardings, prompts, prompts,
                                                     replicated), out_shardings=out)
    return self._jitted[key]

  def __call__(self, params, prompt_tokens: np.ndarray, prompt_mask: np.ndarray, rng: jax.Array, *,
               sampling: Optional[SamplingConfig] = None, samples_per_prompt: int = 1) -> Rollout:
    """Samples `samples_per_prompt` responses for each of a batch of left-padded prompts.

    Args:
      params: Transformer params (the `params` collection): host arrays, or global arrays on
        the mesh (the train state's); placed by `param_shardings` (copied there unless already
        so placed).
      prompt_tokens: [P, Tp] int, left-padded: this process's prompts (on a mesh over H
        processes every process passes the same shape, the global batch has H * P prompts in
        process order; H = 1 otherwise); B = H * P * samples_per_prompt must be divisible by
        `num_devices`. The prompts are sharded over the batch axes when H * P (per host-thread
        chunk) is divisible too, else every device prefills every prompt (the same numbers).
      prompt_mask: [P, Tp] {0,1} int, 1 for real tokens, each row 0...0 1...1.
      rng: one PRNG key for the whole batch, the same on every process (see the module
        docstring; with C > 1 host-thread chunks, chunk c draws with fold_in(rng, c) instead).
      sampling: overrides the default SamplingConfig for this call.
      samples_per_prompt: G >= 1. Each prompt is prefilled once and its KV cache copied to its G
        rows (`decode.generate`); when the host-thread chunks would split a prompt's group, or
        several processes' prompts do not split over the batch axes, the prompts are repeated
        G times on the host instead (G times the prefill). Either way the samples equal those
        of the prompts repeated G times.
    Returns:
      Rollout of numpy arrays, this process's P * G rows (row p * G + g: sample g of prompt p;
      with H processes rows h * P * G .. of the global batch are process h's), prompt width
      = the bucket Tp was padded to; num_steps is the decode loop's count for the whole batch
      (for the row's chunk with host_threads).
    Raises:
      ValueError: B not divisible by num_devices (`parallel.data.global_batch`'s errors with
        several processes), samples_per_prompt not an int >= 1, Tp above the largest bucket,
        shapes that disagree, prompts `decode.check_prompts` rejects (right padding, an empty
        row, an id outside the vocabulary, a dtype that is not integer), sampling not a
        SamplingConfig, or rng not a PRNG key (`jax.random.key`).
    """
    sampling = self.sampling if sampling is None else sampling
    if not isinstance(sampling, SamplingConfig):
      raise ValueError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
    if not (isinstance(rng, jax.Array) and jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key)
            and rng.ndim == 0):
      raise ValueError(f"rng must be one PRNG key (jax.random.key(seed)), got "
                       f"{type(rng).__name__} {getattr(rng, 'dtype', '')} "
                       f"{getattr(rng, 'shape', '')}".rstrip())
    parts, processes = self.num_devices, self._processes
    parts_name = f"the mesh's batch parallelism (data x fsdp = {parts})"
    prompt_tokens, prompt_mask, group = checked_batch(
        prompt_tokens, prompt_mask, self.model_config.vocab_size, samples_per_prompt,
        parts if processes == 1 else 1, parts_name)
    num_prompts = prompt_tokens.shape[0] * processes  # of the global batch
    if num_prompts * group % parts:
      raise ValueError(f"batch size B={num_prompts * group} ({processes} processes x prompts x "
                       f"samples_per_prompt) must be divisible by {parts_name}")
    chunks = max(c for c in range(1, self.host_threads + 1)
                 if num_prompts * group % (parts * c) == 0)
    # A chunk must hold whole groups to share their prefill, and prompts from several processes
    # must split over the batch axes (they cannot be replicated): else repeat them here.
    if num_prompts % chunks or (processes > 1 and num_prompts % parts):
      prompt_tokens, prompt_mask = (np.repeat(x, group, axis=0)
                                    for x in (prompt_tokens, prompt_mask))
      num_prompts, group = num_prompts * group, 1
    tokens, mask = pad_to_bucket(prompt_tokens, prompt_mask, self.prompt_buckets, self.pad_id)
    fn = self._function(params, sampling, group, (num_prompts // chunks) % parts == 0)
    params = jax.tree.map(_placed, params, self.param_shardings)
    chunk_rows = tokens.shape[0] // chunks  # this process's prompt rows per chunk

    def run(c):
      rows = slice(c * chunk_rows, (c + 1) * chunk_rows)
      chunk_tokens, chunk_mask = tokens[rows], mask[rows]
      if processes > 1:  # this process's rows of the global batch
        placed = global_batch({"tokens": chunk_tokens, "mask": chunk_mask}, self.mesh)
        chunk_tokens, chunk_mask = placed["tokens"], placed["mask"]
      key = rng if chunks == 1 else jax.random.fold_in(rng, c)
      out = fn(params, chunk_tokens, chunk_mask, key)
      return map_rollout(local_rows, out)  # waits

    signature = (sampling, group, chunks, tokens.shape)
    # Concurrent chunks: XLA:CPU runs one decode loop on about one core, the others idle.
    if chunks == 1 or signature not in self._compiled:  # compile on this thread first
      outs = [run(c) for c in range(chunks)]
      self._compiled.add(signature)
    else:
      outs = list(self._pool.map(run, range(chunks)))
    return outs[0] if chunks == 1 else map_rollout(lambda *fields: np.concatenate(fields), *outs)
