"""The loop-free programs of one RL step, for the TPU compiler's cost model.

XLA's cost model (`compiled.cost_analysis()`) counts every loop body once, whatever its trip
count: the sampler's decode `lax.while_loop`, the update's epoch / minibatch / microbatch
`lax.scan`s, the forward passes' microbatch `lax.map` and the output head's position chunks
(`rl.logprob.response_states_logp`'s `lax.map`). So a step's seconds are estimated from programs
without such loops, each with how often one RL step runs it (`Program.repeats`):

- `prefill`: the model's forward over the P distinct prompts [P, Tp] writing an empty KV cache
  of Tp + Tr slots, its cache copied to the G rows of each prompt (what `decode.generate` does
  before its loop); once per step.
- `decode`: one decode step: one token per row [B, 1] attending over the whole static cache of
  Tp + Tr slots, the sampling draw, the cache written in place (donated); Tr per step, since the
  static sampler attends over every slot at every step and runs Tr steps when no row stops
  early (every step costs the same: an upper bound for rows that stop at EOS).
- `update`: the run's own update step (`steps.build_steps`' "update") with the output head in one
  chunk (`one_logits_chunk`), so its program is one microbatch's forward and backward plus the
  optimizer; epochs x minibatches x K microbatches per step. The optimizer's update is then
  counted K times per minibatch instead of once, and the chunked head's recomputation of the
  logits in the backward is missing (one head forward per microbatch): both small against the
  layers' forward and backward. (`aot.profile` compiles the run at one microbatch's rows with
  one microbatch instead, the same program at every batch, when those rows hold whole groups.)
- `ref_logp`, `old_logp`, `values`: the run's forward passes (when the config has them), one
  head chunk; pass microbatches per step.

The sampler's programs use the run's mesh, rules and parameter shardings (`RunSteps.sampler`,
`RunSteps.params`); the others are the run's own steps. Each is a `steps.Step`, compiled by
`measure.compile_step` like the steps of `python -m rlscale.aot`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Iterator

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from rlscale.aot.steps import RunSteps, Step, sampler_layout
from rlscale.model.transformer import KVCache
from rlscale.parallel.data import batch_sharding
from rlscale.parallel.rules import logical_to_spec
from rlscale.rl import logprob
from rlscale.sampler import decode
from rlscale.sampler.decode import CACHE_K_AXES, CACHE_V_AXES, constrain_cache
from rlscale.sampler.strategies import sample_token_from_noise

# Phases of the runner's clock (`runner.timing.PHASES`) each program's seconds count towards;
# the forward passes run inside the training phase (`runner.rl_step.train_phase`).
PHASE_OF = {"prefill": "generation", "decode": "generation", "update": "training",
            "ref_logp": "training", "old_logp": "training", "values": "training"}
PASS_STEPS = ("ref_logp", "old_logp", "values")


@dataclasses.dataclass(frozen=True)
class Program:
  """A loop-free program and how often one RL step runs it.

  Attributes:
    step: the `steps.Step` to compile (its name: "prefill", "decode", "update", "ref_logp",
      "old_logp" or "values").
    phase: "generation" or "training" (`PHASE_OF`).
    repeats: runs per RL step (e.g. Tr for the decode step).
    why: how repeats was counted, e.g. "Tr = 1024 decode steps".
  """
  step: Step
  phase: str
  repeats: int
  why: str


@contextlib.contextmanager
def one_logits_chunk() -> Iterator[None]:
  """Within the block, traces score the response's output head in one chunk (no `lax.map`
  over position chunks, which the cost model would count once): `logprob.LOGITS_CHUNK_ELEMENTS`
  raised past any [B, Tr, V] (it is read when a trace calls it), restored after."""
  saved = logprob.LOGITS_CHUNK_ELEMENTS
  logprob.LOGITS_CHUNK_ELEMENTS = 2 ** 62
  try:
    yield
  finally:
    logprob.LOGITS_CHUNK_ELEMENTS = saved


def one_chunk_step(step: Step) -> Step:
  """`step` lowering under `one_logits_chunk`."""
  def lower():
    with one_logits_chunk():
      return step.lower()
  return dataclasses.replace(step, lower=lower)


def abstract_cache(run: RunSteps, rows: int, slots: int) -> KVCache:
  """The KV cache of `rows` rows and `slots` slots as ShapeDtypeStructs (the model's compute
  dtype: keys [B, K, D, S], values [B, K, S, D] per layer), sharded as the sampler constrains
  it (`decode.CACHE_K_AXES` / `CACHE_V_AXES` under its rules)."""
  c, mesh, rules = run.model_config, run.mesh, run.sampler.rules

  def spec(shape, names):
    sharding = NamedSharding(mesh, logical_to_spec(names, shape, mesh, rules))
    return jax.ShapeDtypeStruct(shape, c.jnp_dtype, sharding=sharding)
  k = spec((rows, c.num_kv_heads, c.head_dim, slots), CACHE_K_AXES)
  v = spec((rows, c.num_kv_heads, slots, c.head_dim), CACHE_V_AXES)
  return KVCache((k,) * c.num_layers, (v,) * c.num_layers)


def _in_mesh(run: RunSteps, fn):
  """fn traced on the run's abstract mesh under the sampler's logical axis rules (as
  `Sampler`'s jitted generate traces)."""
  def wrapped(*args):
    with jax.sharding.use_abstract_mesh(run.mesh.abstract_mesh), \
        nn.logical_axis_rules(run.sampler.rules):
      return fn(*args)
  return wrapped


def prefill_step(run: RunSteps, prompts: int, group: int) -> Step:
  """The prefill of `prompts` x `group` rows laid out as the sampler lays them out
  (`steps.sampler_layout`: P prompt rows of Tp tokens, sharded over the batch axes or on every
  device, G copies of each prompt's cache): params, tokens [P, Tp] int32, mask [P, Tp] int32 ->
  (last logits [P * G, V], cache of P * G rows x (Tp + Tr) slots)."""
  sampler, c = run.sampler, run.model_config
  per_call, g, sharded = sampler_layout(prompts, group, sampler.num_devices, run.processes,
                                        sampler.host_threads)
  tp, slots = run.prompt_len, run.prompt_len + run.response_len

  def prefill(params, tokens, mask):
    # As `decode.generate_unchecked` before its loop: one forward of the distinct prompts.
    out = decode.prefill(params, c, tokens, mask, num_slots=slots, cache_rules=sampler.rules)
    to_rows = lambda x: jnp.repeat(x, g, axis=0)  # noqa: E731
    return to_rows(out.logits), constrain_cache(jax.tree.map(to_rows, out.cache), sampler.rules)

  rows = batch_sharding(run.mesh, 2) if sharded else NamedSharding(run.mesh, PartitionSpec())
  prompt = jax.ShapeDtypeStruct((per_call, tp), jnp.int32, sharding=rows)
  fn = jax.jit(_in_mesh(run, prefill), in_shardings=(sampler.param_shardings, rows, rows))
  return Step(name="prefill", kind="sampler", rows=per_call * g, tokens=tp,
              detail=f"{per_call} prompts x {tp} tokens into a cache of {slots} slots, x {g} rows",
              lower=lambda: fn.lower(run.params, prompt, prompt))


def decode_step(run: RunSteps, rows: int) -> Step:
  """One decode step of `rows` rows: params, cache (donated), last token [B] int32, positions
  [B, 1] int32, slot mask [B, Tp + Tr] int32, slot int32, rng -> (token [B] int32, logp [B]
  float32, cache). The query attends over all Tp + Tr slots (the static sampler's attention)."""
  sampler, c = run.sampler, run.model_config
  slots = run.prompt_len + run.response_len

  def step(params, cache, last_token, positions, slot_mask, slot, rng):
    out = decode.decode_forward(params, c, last_token, positions, slot_mask, slot, cache)
    gumbel = None if sampler.sampling.greedy else jax.random.gumbel(
        rng, (rows, c.vocab_size), jnp.float32)  # the draw each step makes past the table
    token, logp = sample_token_from_noise(out.logits[:, 0], gumbel, sampler.sampling)
    return token, logp, constrain_cache(out.cache, sampler.rules)

  mesh = run.mesh
  cache = abstract_cache(run, rows, slots)
  spec = lambda shape, dtype=jnp.int32: jax.ShapeDtypeStruct(  # noqa: E731
      shape, dtype, sharding=batch_sharding(mesh, len(shape)))
  replicated = NamedSharding(mesh, PartitionSpec())
  key = jax.ShapeDtypeStruct((), jax.eval_shape(lambda: jax.random.key(0)).dtype,
                             sharding=replicated)
  args = (run.params, cache, spec((rows,)), spec((rows, 1)), spec((rows, slots)),
          jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated), key)
  fn = jax.jit(_in_mesh(run, step), in_shardings=jax.tree.map(lambda x: x.sharding, args),
               donate_argnums=(1,))
  return Step(name="decode", kind="sampler", rows=rows, tokens=slots,
              detail=f"{rows} rows x 1 token over a cache of {slots} slots",
              lower=lambda: fn.lower(*args))


def step_programs(run: RunSteps) -> list[Program]:
  """The loop-free programs of one RL step of `run` (`steps.build_steps` with eval_steps=False)
  and their repeats per step (see the module docstring): prefill, decode, update, then the
  forward passes the run has.

  Raises: ValueError when `run` has no sampler (a RunSteps built without one)."""
  if run.sampler is None or run.params is None:
    raise ValueError("step_programs needs RunSteps from steps.build_steps (sampler and params)")
  rl, tr = run.rl, run.response_len
  batch = rl.prompts_per_step * rl.group_size
  by_name = {s.name: s for s in run.steps}
  sample = by_name["sample"]  # its resident bytes (the state beside the params) apply to both
  resident = dict(resident_bytes=sample.resident_bytes, resident_what=sample.resident_what)
  updates = rl.epochs * rl.minibatches * run.update_microbatches
  programs = [
      Program(dataclasses.replace(prefill_step(run, rl.prompts_per_step, rl.group_size),
                                  **resident), "generation", 1, "once per step"),
      Program(dataclasses.replace(decode_step(run, batch), **resident), "generation", tr,
              f"Tr = {tr} decode steps (no early stop)"),
      Program(one_chunk_step(by_name["update"]), "training", updates,
              f"{rl.epochs} epoch(s) x {rl.minibatches} minibatch(es) x "
              f"{run.update_microbatches} microbatch(es)")]
  for name in PASS_STEPS:
    if name in by_name:
      programs.append(Program(one_chunk_step(by_name[name]), PHASE_OF[name], run.pass_microbatches,
                              f"{run.pass_microbatches} microbatch(es)"))
  return programs
