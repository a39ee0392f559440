"""The decode core: jitted autoregressive sampling with a preallocated KV cache.

`generate` prefills the left-padded prompt into a cache of Tp + Tr slots in one forward, then
decodes one token per iteration of a `lax.while_loop` (the flax lm1b / gemma / tunix pattern):
per-row positions count only real prompt tokens, every step draws with a fresh key
`fold_in(rng, step)`, a row stops changing after its first EOS, and the loop exits as soon as
every row has finished.

Also here: the `Rollout` it returns (and `map_rollout` to slice / concatenate rollouts), the host
checks every caller makes (`check_prompts`, `check_special_ids`, `checked_batch`), prompt-length
bucketing (`pad_to_bucket`) and the KV cache's logical axis names (`constrain_cache`). The
bucketed sampler on a device mesh built on it is `rlscale.sampler.sampler.Sampler`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rlscale.model.config import ModelConfig
from rlscale.model.attention import cache_segments
from rlscale.model.transformer import KVCache, Transformer, init_cache, positions_from_mask
from rlscale.parallel import rules as rules_lib
from rlscale.sampler.strategies import SamplingConfig, sample_token_from_noise

# Largest Gumbel table [Tr, B, V] float32 (bytes) drawn before the decode loop; above it each step
# draws its own. One vectorised draw avoids XLA:CPU's rolled threefry loop (dozens of tiny ops)
# inside every decode step; the noise, and so the tokens, are the same either way. Measured on W1
# (2 cores): +4% tokens/s with a 4 MiB table (batch 32 per program), -3% with 16 MiB (batch 128),
# where reading the table costs more than the per-step draws.
GUMBEL_TABLE_BYTES = 8 * 2**20
# Logical names of the KV cache's dimensions (`KVCache`: keys [B, K, D, S] transposed, values
# [B, K, S, D]): rows as the activations' batch, KV heads as the parameters' kv_heads (so a
# tensor-parallel attention reads its own heads' cache), head_dim and slots replicated.
CACHE_K_AXES = ("activation_batch", "kv_heads", "head_dim", "activation_length")
CACHE_V_AXES = ("activation_batch", "kv_heads", "activation_length", "head_dim")


class Rollout(NamedTuple):
  """Sampled responses for B rows (prompt width Tp, response limit Tr).

  From `Sampler`, Tp is the prompt bucket the prompts were padded to (not the width passed in),
  so slice responses with `Tp = rollout.prompt_mask.shape[1]`: `tokens[:, Tp:]`.

  Attributes:
    tokens: [B, Tp + Tr] int32, the left-padded prompt then the response; response slots after
      the first EOS (and slots never reached) hold pad_id.
    prompt_mask: [B, Tp] int32, 1 for real prompt tokens.
    response_mask: [B, Tr] int32, 1 for generated tokens up to and including the first EOS.
    logp: [B, Tr] float32, log softmax(logits / temperature)[token] of each generated token under
      the sampling policy before top-k / top-p / min-p (see `strategies`; temperature 0 reads as
      1), 0 where response_mask is 0. A full forward recomputes it (up to float rounding): with
      `mask = concatenate([prompt_mask, response_mask], 1)` and
      `logits = forward(params, config, tokens, mask).logits` (position t predicts token t + 1),
      `logp == token_logp(logits[:, Tp - 1:-1], tokens[:, Tp:], temperature) * response_mask`.
    lengths: [B] int32, response length in tokens (sum of response_mask).
    num_steps: [B] int32, number of response positions the decode loop produced for the batch
      the row was generated in (from `Sampler`: the whole batch, or the row's host-thread chunk);
      below Tr when every row of it finished early.
    experts: [B, Tr, L_moe, k] int32 for a model with experts, else None: the experts each MoE
      layer chose at the position that predicts each response token (the prompt's last position
      for token 0), -1 where response_mask is 0; for the routing-mismatch metric and routing
      replay (`transformer.replay_window`).
  """
  tokens: jax.Array
  prompt_mask: jax.Array
  response_mask: jax.Array
  logp: jax.Array
  lengths: jax.Array
  num_steps: jax.Array
  experts: Optional[jax.Array] = None


def map_rollout(fn, *rollouts: Rollout) -> Rollout:
  """Rollout(fn(field of each rollout) for each field), a field None in the first rollout kept
  None (e.g. a dense model's experts): to slice, concatenate or copy rollouts field by field."""
  return Rollout(*(None if fields[0] is None else fn(*fields) for fields in zip(*rollouts)))


class DecodeState(NamedTuple):
  """Carry of the decode `lax.while_loop` (B rows, Tr response slots, S = Tp + Tr cache slots).

  Attributes:
    step: int32 scalar, response tokens produced so far (the next one goes to column `step`).
    last_token: [B] int32, the token produced at column step - 1 (fed to the next forward).
    tokens: [B, Tr] int32 response tokens, pad_id where not produced.
    logp: [B, Tr] float32, 0 where not produced.
    response_mask: [B, Tr] int32.
    done: [B] bool, the row has produced an EOS.
    cache: KVCache with S slots, filled up to slot Tp + step - 2.
    experts: [B, Tr, L_moe, k] int32, -1 where not produced; None for a dense model.
  """
  step: jax.Array
  last_token: jax.Array
  tokens: jax.Array
  logp: jax.Array
  response_mask: jax.Array
  done: jax.Array
  cache: KVCache
  experts: Optional[jax.Array] = None


def _is_eos(token: jax.Array, eos_ids: tuple) -> jax.Array:
  """[B] int32 -> [B] bool; all False when eos_ids is empty (EOS disabled)."""
  hit = jnp.zeros(token.shape, bool)
  for eos in eos_ids:
    hit = hit | (token == eos)
  return hit


def _record(state: DecodeState, token, logp, moe, *, eos_ids: tuple, pad_id: int) -> DecodeState:
  """Writes the token drawn for column `state.step` (pad_id / 0 / mask 0 / experts -1 for
  finished rows); moe: the forward's MoEStats (experts [L_moe, B, 1, k]) or None."""
  live = ~state.done
  token = jnp.where(live, token, pad_id)
  column = lambda x: x[:, None]  # noqa: E731  [B] -> [B, 1] for the column update
  write = lambda buf, val: jax.lax.dynamic_update_slice_in_dim(  # noqa: E731
      buf, column(val), state.step, axis=1)
  if moe is not None:
    chosen = jnp.transpose(moe.experts[:, :, -1], (1, 0, 2))  # [B, L_moe, k]
    state = state._replace(experts=write(state.experts,
                                         jnp.where(live[:, None, None], chosen, -1)))
  return state._replace(
      step=state.step + 1,
      last_token=token,
      tokens=write(state.tokens, token),
      logp=write(state.logp, jnp.where(live, logp, 0.0)),
      response_mask=write(state.response_mask, live.astype(jnp.int32)),
      done=state.done | _is_eos(token, eos_ids))


def positive_int(value, name: str) -> int:
  """`value` as a Python int >= 1 (numpy integers accepted: static arguments must hash alike).

  Raises:
    ValueError: naming `name`, when value is not an int (a bool is not) or is below 1.
  """
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
    raise ValueError(f"{name} must be an int >= 1, got {value!r}")
  return int(value)


def constrain_cache(cache: KVCache, rules) -> KVCache:
  """`cache` with every buffer constrained to the sharding its logical names (CACHE_K_AXES,
  CACHE_V_AXES) get under `rules` (`rlscale.parallel.rules` format) on the abstract mesh in
  effect (`jax.sharding.use_abstract_mesh`); `cache` unchanged when rules is None (`generate`
  outside a mesh). A mesh axis that does not divide a dimension leaves it replicated
  (`rules.logical_to_spec`)."""
  if rules is None:
    return cache
  mesh = jax.sharding.get_abstract_mesh()
  put = lambda x, names: jax.lax.with_sharding_constraint(  # noqa: E731
      x, rules_lib.logical_to_spec(names, x.shape, mesh, rules))
  return KVCache(tuple(put(k, CACHE_K_AXES) for k in cache.k),
                 tuple(put(v, CACHE_V_AXES) for v in cache.v))


def check_generate_args(prompt_tokens, prompt_mask, model_config: ModelConfig, sampling,
                        eos_ids: tuple, pad_id: int) -> None:
  """The checks of `generate`'s arguments (prompts [B, Tp] int, arrays or tracers).

  Raises:
    ValueError: prompt_tokens not [B, Tp] with Tp >= 1, prompt_mask of another shape, sampling
      not a SamplingConfig, ids `check_special_ids` rejects, or (concrete prompts only) prompts
      `check_prompts` rejects.
  """
  if prompt_tokens.ndim != 2 or prompt_tokens.shape[1] < 1:
    raise ValueError(f"prompt_tokens must be [B, Tp] with Tp >= 1, got shape {prompt_tokens.shape}")
  if prompt_mask.shape != prompt_tokens.shape:
    raise ValueError(f"prompt_mask shape {prompt_mask.shape} must equal prompt_tokens shape "
                     f"{prompt_tokens.shape}")
  if not isinstance(sampling, SamplingConfig):
    raise ValueError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
  check_special_ids(eos_ids, pad_id, model_config.vocab_size)
  if not any(isinstance(x, jax.core.Tracer) for x in (prompt_tokens, prompt_mask)):  # values known
    check_prompts(prompt_tokens, prompt_mask, model_config.vocab_size)


def check_special_ids(eos_ids: tuple, pad_id: int, vocab_size: int) -> None:
  """Checks the static ids of `generate`.

  Raises:
    ValueError: eos_ids is not a tuple of ints, or an EOS id (which could never be sampled) or
      pad_id (embedded as NaN: jnp.take fills out-of-range rows) lies outside [0, vocab_size).
  """
  if not isinstance(eos_ids, tuple) or not all(isinstance(e, int) for e in eos_ids):
    raise ValueError(f"eos_ids must be a tuple of ints (() disables EOS), got {eos_ids!r}")
  if any(not 0 <= e < vocab_size for e in eos_ids):
    raise ValueError(f"eos_ids {eos_ids} must lie in the model's vocabulary [0, {vocab_size})")
  if not isinstance(pad_id, int) or not 0 <= pad_id < vocab_size:
    raise ValueError(f"pad_id {pad_id!r} is outside the model's vocabulary [0, {vocab_size})")


def check_prompts(prompt_tokens, prompt_mask, vocab_size: int) -> None:
  """Host-side checks of a prompt batch, which the jitted sampler would otherwise garble silently.

  Args:
    prompt_tokens: [B, Tp] int. prompt_mask: [B, Tp] int. vocab_size: V of the model.
  Raises:
    ValueError: naming the first bad row, when prompt_mask holds a value other than 0/1, a row has
      no real token, a row is not left-padded (a 0 after a 1: decoding starts after the last
      slot, so the first token would follow a pad), or a real token id lies outside [0, V) (its
      embedding reads NaN).
  """
  tokens, mask = np.asarray(prompt_tokens), np.asarray(prompt_mask)
  if not np.isin(mask, (0, 1)).all():
    raise ValueError(f"prompt_mask must hold only 0 and 1, got values {np.unique(mask).tolist()}")
  empty = np.flatnonzero(mask.sum(axis=1) == 0)
  if empty.size:
    raise ValueError(f"prompt_mask row {empty[0]} has no real token; every row needs at least one")
  not_left = np.flatnonzero((np.diff(mask, axis=1) < 0).any(axis=1))
  if not_left.size:
    row = not_left[0]
    raise ValueError(f"prompt_mask row {row} is not left-padded ({mask[row].tolist()}); real tokens "
                     "must fill the end of each row")
  outside = (mask == 1) & ((tokens < 0) | (tokens >= vocab_size))
  if outside.any():
    row = int(np.flatnonzero(outside.any(axis=1))[0])
    raise ValueError(f"prompt_tokens row {row} holds id {tokens[row][outside[row]][0]} at a real "
                     f"position, outside the model's vocabulary [0, {vocab_size})")


def generate(params, prompt_tokens: jax.Array, prompt_mask: jax.Array, rng: jax.Array, *,
             model_config: ModelConfig, max_new_tokens: int, sampling: SamplingConfig,
             eos_ids: tuple, pad_id: int, samples_per_prompt: int = 1,
             cache_rules=None) -> Rollout:
  """Samples up to Tr = max_new_tokens tokens after each left-padded prompt (jitted).

  With samples_per_prompt = G > 1 the P prompts are prefilled once and their KV cache is copied
  to G rows each (GRPO's G responses share their prompt's keys and values, as prefix caching in
  vLLM / SGLang does): B = P * G rows, row p * G + g the g-th sample of prompt p, the same
  samples as passing each prompt G times (same key), for 1/G of the prefill FLOPs.

  Args:
    params: the Transformer parameters (the `params` collection).
    prompt_tokens: [P, Tp] int32, left-padded (real tokens at the end of each row); P = B when
      samples_per_prompt is 1.
    prompt_mask: [P, Tp] {0,1} int, 1 for real tokens; each row 0...0 1...1 with >= 1 real token.
    rng: PRNG key; response column i is drawn with fold_in(rng, i).
    model_config: static ModelConfig of `params`.
    max_new_tokens: static Tr >= 1.
    sampling: static SamplingConfig (temperature 0 = greedy).
    eos_ids: static tuple of token ids in [0, V) that end a response; () disables EOS (always Tr
      tokens).
    pad_id: static id in [0, V) written after the first EOS; may equal an EOS id.
    samples_per_prompt: static G >= 1, responses sampled per prompt.
    cache_rules: static logical axis rules (a tuple of (name, mesh axes) pairs) that shard the
      KV cache over the abstract mesh in effect (`constrain_cache`; `Sampler` passes its rules);
      None (default) leaves its layout to the compiler.
  Returns:
    Rollout (see its docstring) with B = P * G rows, prompts repeated in `tokens`/`prompt_mask`.
  Raises:
    ValueError: on inconsistent shapes, a bad static argument (`check_special_ids`;
      max_new_tokens or samples_per_prompt not an int >= 1, numpy integers accepted), or,
      when the prompts are concrete arrays (not traced), a prompt batch `check_prompts` rejects.
  """
  max_new_tokens = positive_int(max_new_tokens, "max_new_tokens")
  samples_per_prompt = positive_int(samples_per_prompt, "samples_per_prompt")
  check_generate_args(prompt_tokens, prompt_mask, model_config, sampling, eos_ids, pad_id)
  return generate_unchecked(params, prompt_tokens, prompt_mask, rng, model_config=model_config,
                            max_new_tokens=max_new_tokens, sampling=sampling, eos_ids=eos_ids,
                            pad_id=pad_id, samples_per_prompt=samples_per_prompt,
                            cache_rules=cache_rules)


def prefill(params, model_config: ModelConfig, prompt_tokens, prompt_mask, *, num_slots: int,
            cache_rules=None):
  """The sampler's prefill: every prompt slot of each distinct prompt in one forward into an
  empty cache, attending to the prompt slots only (the static offset 0 lets splash / cudnn run
  it). prompt_tokens, prompt_mask [P, Tp] int32 (left-padded) -> ModelOutput with the last
  position's logits [P, 1, V] float32 and the cache of P rows x num_slots slots."""
  prompt_len = prompt_tokens.shape[1]
  cache = constrain_cache(init_cache(model_config, prompt_tokens.shape[0], num_slots), cache_rules)
  return Transformer(model_config).apply(
      {"params": params}, prompt_tokens, positions_from_mask(prompt_mask),
      cache_segments(prompt_mask, 0, prompt_len), cache, jnp.int32(0), last_only=True)


def decode_forward(params, model_config: ModelConfig, last_token, positions, slot_mask, slot,
                   cache):
  """One decode step's forward: last_token [B] int32 at rotary positions [B, 1] int32 written to
  cache slot `slot` (int32 scalar), attending to the slots where slot_mask [B, S] is 1 up to its
  own -> ModelOutput with logits [B, 1, V] float32 and the updated cache."""
  return Transformer(model_config).apply({"params": params}, last_token[:, None], positions,
                                         cache_segments(slot_mask, slot, 1), cache, slot)


@functools.partial(jax.jit, static_argnames=("model_config", "max_new_tokens", "sampling",
                                             "eos_ids", "pad_id", "samples_per_prompt",
                                             "cache_rules"))
def generate_unchecked(params, prompt_tokens, prompt_mask, rng, *, model_config, max_new_tokens,
                       sampling, eos_ids, pad_id, samples_per_prompt, cache_rules=None) -> Rollout:
  """`generate` without the argument checks (jitted; the same arguments, all static but the
  four arrays), to call inside another jitted function whose caller checked them."""
  num_prompts, prompt_len = prompt_tokens.shape
  batch = num_prompts * samples_per_prompt
  num_slots = prompt_len + max_new_tokens
  prompt_mask = prompt_mask.astype(jnp.int32)
  prompt_tokens = prompt_tokens.astype(jnp.int32)

  out = prefill(params, model_config, prompt_tokens, prompt_mask, num_slots=num_slots,
                cache_rules=cache_rules)
  if samples_per_prompt > 1:  # each prompt's G rows start from copies of its prefill
    to_rows = lambda x: jnp.repeat(x, samples_per_prompt, axis=0)  # noqa: E731
    moe = None if out.moe is None else out.moe._replace(
        experts=jnp.repeat(out.moe.experts, samples_per_prompt, axis=1))
    out = out._replace(logits=to_rows(out.logits), cache=jax.tree.map(to_rows, out.cache),
                       moe=moe)
    prompt_tokens, prompt_mask = to_rows(prompt_tokens), to_rows(prompt_mask)
  out = out._replace(cache=constrain_cache(out.cache, cache_rules))
  # Cache slot s holds a real token (segment 1) iff it is a real prompt slot or a response slot;
  # response slots not yet written lie after the query's slot, which causality excludes.
  slot_mask = jnp.concatenate([prompt_mask, jnp.ones((batch, max_new_tokens), jnp.int32)], axis=1)
  empty = DecodeState(
      step=jnp.int32(0),
      last_token=jnp.zeros((batch,), jnp.int32),
      tokens=jnp.full((batch, max_new_tokens), pad_id, jnp.int32),
      logp=jnp.zeros((batch, max_new_tokens), jnp.float32),
      response_mask=jnp.zeros((batch, max_new_tokens), jnp.int32),
      done=jnp.zeros((batch,), bool),
      cache=out.cache,
      experts=None if out.moe is None else jnp.full(
          (batch, max_new_tokens) + (out.moe.experts.shape[0], out.moe.experts.shape[-1]), -1,
          jnp.int32))
  record = functools.partial(_record, eos_ids=eos_ids, pad_id=pad_id)
  draw = _gumbel_source(rng, out.logits.shape[-1], batch, max_new_tokens, sampling)
  # Left padding puts every row's last real prompt token in the last prompt slot.
  first = record(empty, *sample_token_from_noise(out.logits[:, -1], draw(0), sampling), out.moe)

  real_prompt_len = prompt_mask.sum(axis=1)

  def cond(state: DecodeState):
    return (state.step < max_new_tokens) & ~jnp.all(state.done)

  def body(state: DecodeState):
    slot = prompt_len + state.step - 1  # cache slot of last_token
    positions = (real_prompt_len + state.step - 1)[:, None]
    out = decode_forward(params, model_config, state.last_token, positions, slot_mask, slot,
                         state.cache)
    token, logp = sample_token_from_noise(out.logits[:, 0], draw(state.step), sampling)
    return record(state._replace(cache=constrain_cache(out.cache, cache_rules)), token, logp,
                  out.moe)

  final = jax.lax.while_loop(cond, body, first)
  return Rollout(
      tokens=jnp.concatenate([prompt_tokens, final.tokens], axis=1),
      prompt_mask=prompt_mask,
      response_mask=final.response_mask,
      logp=final.logp,
      lengths=final.response_mask.sum(axis=1, dtype=jnp.int32),
      num_steps=jnp.full((batch,), final.step, jnp.int32),
      experts=final.experts)


def _gumbel_source(rng, vocab: int, batch: int, max_new_tokens: int, sampling: SamplingConfig):
  """Returns draw(step) -> [B, V] float32 Gumbel noise of response column `step`
  (jax.random.gumbel(fold_in(rng, step))), or None for greedy decoding.

  Draws the whole [Tr, B, V] table at once (vmapped over steps: the same numbers) when it fits in
  GUMBEL_TABLE_BYTES, else one draw per call."""
  if sampling.greedy:
    return lambda step: None
  gumbel = lambda step: jax.random.gumbel(  # noqa: E731
      jax.random.fold_in(rng, step), (batch, vocab), jnp.float32)
  if 4 * max_new_tokens * batch * vocab > GUMBEL_TABLE_BYTES:
    return gumbel
  table = jax.vmap(gumbel)(jnp.arange(max_new_tokens))
  return lambda step: jax.lax.dynamic_index_in_dim(table, step, keepdims=False)


def pad_to_bucket(prompt_tokens: np.ndarray, prompt_mask: np.ndarray, buckets: Sequence[int],
                  pad_id: int):
  """Left-pads [B, Tp] prompts to the smallest bucket >= Tp.

  Returns (tokens [B, bucket] int32, mask [B, bucket] int32).
  Raises:
    ValueError: if Tp exceeds the largest bucket.
  """
  prompt_len = prompt_tokens.shape[1]
  fitting = [b for b in sorted(buckets) if b >= prompt_len]
  if not fitting:
    raise ValueError(f"prompt length {prompt_len} exceeds the largest prompt bucket "
                     f"{max(buckets)} (prompt_buckets {tuple(sorted(buckets))}); add a larger "
                     "bucket or shorten the prompts")
  extra = fitting[0] - prompt_len
  tokens = np.pad(np.asarray(prompt_tokens, np.int32), ((0, 0), (extra, 0)), constant_values=pad_id)
  mask = np.pad(np.asarray(prompt_mask, np.int32), ((0, 0), (extra, 0)))
  return tokens, mask


def id_tuple(eos_ids) -> tuple:
  """A sequence (tuple, list, 1-D array) of token ids as a tuple of Python ints.

  Raises:
    ValueError: eos_ids is a single id or anything but a sequence of integers.
  """
  ids = np.asarray(eos_ids)  # a str or a single id is 0-D
  if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
    raise ValueError("eos_ids must be a sequence of token ids (e.g. tokenizer.eos_ids; () disables "
                     f"EOS), got {eos_ids!r}")
  return tuple(int(i) for i in ids)


def checked_batch(prompt_tokens, prompt_mask, vocab_size: int, samples_per_prompt: int,
                  parts: int, parts_name: str):
  """(prompt_tokens, prompt_mask as numpy [P, Tp], G as an int) after the checks a sampler makes.

  Raises:
    ValueError: when the two are not both [P, Tp], prompt_tokens is not of an integer dtype or
      prompt_mask of an integer or bool one (a float id would be truncated silently),
      `check_prompts` rejects the prompts, samples_per_prompt is not an int >= 1, or B = P * G
      does not split into `parts` (named by `parts_name`).
  """
  prompt_tokens, prompt_mask = np.asarray(prompt_tokens), np.asarray(prompt_mask)
  if prompt_tokens.ndim != 2 or prompt_mask.shape != prompt_tokens.shape:
    raise ValueError(f"prompt_tokens and prompt_mask must both be [P, Tp], got shapes "
                     f"{prompt_tokens.shape} and {prompt_mask.shape}")
  if not np.issubdtype(prompt_tokens.dtype, np.integer):
    raise ValueError(f"prompt_tokens must hold integer token ids, got dtype {prompt_tokens.dtype}")
  if not (np.issubdtype(prompt_mask.dtype, np.integer) or prompt_mask.dtype == bool):
    raise ValueError(f"prompt_mask must be of an integer or bool dtype, got {prompt_mask.dtype}")
  check_prompts(prompt_tokens, prompt_mask, vocab_size)
  group = positive_int(samples_per_prompt, "samples_per_prompt")
  if prompt_tokens.shape[0] * group % parts:
    raise ValueError(f"batch size B={prompt_tokens.shape[0] * group} (prompts x "
                     f"samples_per_prompt) must be divisible by {parts_name}")
  return prompt_tokens, prompt_mask, group
