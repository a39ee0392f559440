"""The sampler on a device mesh: `sampler.generate` under `jax.jit` in the global view, params
sharded as the train state's (`rlscale.parallel.shardings`), prompt and response rows over the
mesh's data x fsdp axes, the KV cache by its logical names (`sampler.CACHE_K_AXES`), the model's
activations by theirs (`transformer.constrain_activations`); XLA's partitioner places the
collectives (flax lm1b's jitted decode; tunix's sampler on its mesh).

One global key: the noise of response column i is `gumbel(fold_in(fold_in(rng, 0), i))` over the
whole [B, V] batch, drawn by the partitionable threefry (`jax_threefry_partitionable`, on by
default), so the same key gives the same tokens on any mesh, and the tokens of the one-device
pmapped `Sampler` (which folds in its device index 0): float summation order aside, which can
flip a token only at an exact tie of perturbed logits.
"""

from __future__ import annotations

from typing import Optional, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from rlscale.model.config import ModelConfig
from rlscale.parallel.data import batch_sharding
from rlscale.parallel.mesh import batch_parallelism
from rlscale.parallel.rules import DEFAULT_RULES
from rlscale.parallel.shardings import tree_shardings
from rlscale.sampler.sampler import (Rollout, _check_generate_args, _generate, _id_tuple,
                                     _positive_int, check_special_ids, checked_batch,
                                     map_rollout, pad_to_bucket)
from rlscale.sampler.strategies import SamplingConfig


class MeshSampler:
  """Bucketed `generate` jitted over `mesh`, with the static choices bound once (the interface
  of `sampler.Sampler`, so the runner and `evaluate.Evaluator` call either).

  Args:
    model_config, max_new_tokens, sampling, eos_ids, pad_id, prompt_buckets: as for `Sampler`.
    mesh: a `rlscale.parallel.mesh.make_mesh` Mesh.
    param_shardings: NamedShardings of the params tree (e.g. `fn.state_shardings.params` of
      `parallel.update.make_sharded_update_fn`); default: derived from `params`' paths and shapes
      on the first call (`shardings.tree_shardings`).
    rules: logical axis rules (`rules.DEFAULT_RULES` format) of the cache and activations.

  Attributes:
    num_traces: how many times the generation function was traced (= compilations), for tests.

  Raises:
    ValueError: as `Sampler` for the static arguments.
  """

  def __init__(self, model_config: ModelConfig, max_new_tokens: int, sampling: SamplingConfig,
               eos_ids: Sequence[int], pad_id: int, mesh, *,
               prompt_buckets: Sequence[int] = (16, 32, 64, 128, 256), param_shardings=None,
               rules=DEFAULT_RULES):
    if not prompt_buckets or any(not isinstance(b, int) or b < 1 for b in prompt_buckets):
      raise ValueError("prompt_buckets must be a non-empty sequence of ints >= 1, "
                       f"got {prompt_buckets!r}")
    if not isinstance(sampling, SamplingConfig):
      raise ValueError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
    self.model_config = model_config
    self.max_new_tokens = _positive_int(max_new_tokens, "max_new_tokens")
    self.sampling = sampling
    self.eos_ids = _id_tuple(eos_ids)
    self.pad_id = int(pad_id) if isinstance(pad_id, (int, np.integer)) else pad_id
    check_special_ids(self.eos_ids, self.pad_id, model_config.vocab_size)
    self.prompt_buckets = tuple(sorted(prompt_buckets))
    self.mesh = mesh
    self.rules = tuple(tuple(r) if isinstance(r, list) else r for r in rules)
    self.param_shardings = param_shardings
    self.num_traces = 0
    self._jitted = {}  # (sampling, G, prompts sharded) -> jitted generate

  @property
  def num_devices(self) -> int:
    """How many parts the rows are split into (mesh data x fsdp): B must be a multiple."""
    return batch_parallelism(self.mesh)

  def _function(self, params, sampling: SamplingConfig, group: int, prompts_sharded: bool):
    key = (sampling, group, prompts_sharded)
    if key not in self._jitted:
      if self.param_shardings is None:
        self.param_shardings = tree_shardings(params, self.mesh, rules=self.rules)
      rows = batch_sharding(self.mesh, 2)
      prompts = rows if prompts_sharded else NamedSharding(self.mesh, PartitionSpec())
      replicated = NamedSharding(self.mesh, PartitionSpec())
      out = Rollout(rows, rows, rows, rows, batch_sharding(self.mesh, 1),
                    batch_sharding(self.mesh, 1),
                    batch_sharding(self.mesh, 4) if self.model_config.moe_layers else None)

      def run(params, tokens, mask, rng):
        self.num_traces += 1  # runs only while tracing
        # The one-device Sampler's key (device index 0 folded in), so both draw the same noise.
        rng = jax.random.fold_in(rng, 0)
        with jax.sharding.use_abstract_mesh(self.mesh.abstract_mesh), \
            nn.logical_axis_rules(self.rules):
          return _generate(params, tokens, mask, rng, model_config=self.model_config,
                           max_new_tokens=self.max_new_tokens, sampling=sampling,
                           eos_ids=self.eos_ids, pad_id=self.pad_id, samples_per_prompt=group,
                           cache_rules=self.rules)
      self._jitted[key] = jax.jit(run, in_shardings=(self.param_shardings, prompts, prompts,
                                                     replicated), out_shardings=out)
    return self._jitted[key]

  def __call__(self, params, prompt_tokens: np.ndarray, prompt_mask: np.ndarray, rng: jax.Array, *,
               sampling: Optional[SamplingConfig] = None, params_replicated: bool = False,
               samples_per_prompt: int = 1) -> Rollout:
    """Samples `samples_per_prompt` responses for each of a batch of left-padded prompts.

    Args:
      params: Transformer params: global arrays on the mesh (the train state's) or host arrays
        (placed by `param_shardings`).
      prompt_tokens: [P, Tp] int, left-padded; B = P * samples_per_prompt must be divisible by
        `num_devices` (mesh data x fsdp). Sharded over those axes when P is divisible too, else
        every device prefills every prompt (the same numbers).
      prompt_mask: [P, Tp] {0,1}, 1 for real tokens.
      rng: one PRNG key for the whole batch (see the module docstring).
      sampling: overrides the default SamplingConfig for this call.
      params_replicated: accepted for `Sampler`'s interface; a mesh has no replicated layout
        (must be False).
      samples_per_prompt: G >= 1; each prompt is prefilled once and its cache copied to its G
        rows (`generate`).
    Returns:
      Rollout of numpy arrays, B = P * G rows (row p * G + g: sample g of prompt p), prompt width
      = the bucket Tp was padded to; num_steps is the decode loop's count for the whole batch.
    Raises:
      ValueError: params_replicated True, B not divisible by num_devices, Tp above the largest
        bucket, shapes that disagree, or prompts `check_prompts` rejects.
    """
    if params_replicated:
      raise ValueError("params_replicated=True is the pmap layout; on a mesh pass the params as "
                       "global arrays (the train state's)")
    sampling = self.sampling if sampling is None else sampling
    parts = self.num_devices
    prompt_tokens, prompt_mask, group = checked_batch(
        prompt_tokens, prompt_mask, self.model_config.vocab_size, samples_per_prompt, parts,
        f"mesh data x fsdp = {parts}")
    num_prompts = prompt_tokens.shape[0]
    tokens, mask = pad_to_bucket(prompt_tokens, prompt_mask, self.prompt_buckets, self.pad_id)
    _check_generate_args(tokens, mask, self.model_config, sampling, self.eos_ids, self.pad_id)
    fn = self._function(params, sampling, group, num_prompts % parts == 0)
    out = fn(params, tokens, mask, rng)
    return map_rollout(lambda x: np.asarray(jax.device_get(x)), out)

