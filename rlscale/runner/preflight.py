"""The checks run before a run starts: cheap, before the workdir exists, each refusal one line.

`check_config(config)` is what `loop.train_and_evaluate` calls first (after joining a distributed
run, before it creates the workdir, takes the workdir lock, builds the model or warms it up), so a
config that cannot run fails in well under a second and leaves nothing on disk:

1. Every float in the config is finite (`check_finite`), and every seed (a field named `seed` or
   ending in `_seed`, at any depth) is an int that `jax.random.key` takes, in
   [-2^63, 2^63 - 1] (`check_seeds`); a larger one used to fail with an OverflowError traceback,
   `task.eval_seed` only after the warm start. No field of
   experiments/configs/default.py documents infinity or NaN as a setting ("off" is None, 0 or a
   value <= 0), so a NaN or infinite float is always a mistake; a NaN learning rate used to train
   a NaN policy to the end and export it.
2. Everything `validate.check_config` validates without the model (rl presets, mesh, train.*,
   optimizer, sampling), whose result `loop.train_and_evaluate` hands to `builders.build_run`:
   every config check runs once, here, and nothing is checked again while the run is built;
   then the mesh's sharding of the abstract train state (`check_sharding`: an fsdp axis that
   leaves the state replicated is refused before the warm start trains).
3. Memory (`estimate_memory`, `check_memory`): the bytes of the arrays a run cannot do without,
   from the model's sizes (the built-in model's config fields, or an HF checkpoint's config.json:
   no weights are read) and the batch's, against the machine's memory: the host's RAM on a CPU
   backend (all its devices share it), one device's `bytes_limit` on GPU/TPU (and the host's RAM
   for the host arrays), the SFT warm start included. A formula, not a compile. The estimate
   counts from below (see `rlscale.train.memory`), so it refuses only runs that cannot fit; a
   run it passes may still run out of memory. RLSCALE_SKIP_MEMORY_CHECK=1 in the environment skips it.
4. Hard bounds that no memory lifts (`check_bounds`): one step's [rows, prompt + response] token
   array (the rollout's, the evaluation's and the SFT warm start's) must stay within 2^31 - 1
   elements, the largest int32 index.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Optional, Sequence

import jax
import numpy as np

from rlscale.model.config import ModelConfig
from rlscale.runner import builders
from rlscale.runner import validate
from rlscale.tokenizers import CharTokenizer
from rlscale.parallel.rules import rules_for_mesh
from rlscale.train import memory
from rlscale.train import state as state_lib
from rlscale.train import update as update_lib

SKIP_MEMORY_ENV = "RLSCALE_SKIP_MEMORY_CHECK"
INT32_MAX = 2 ** 31 - 1
# Task sources that generate their held-out prompts (never fewer than asked); a data file
# ("local_math") may hold fewer, so its evaluation is not counted unless task.eval_size is set.
GENERATED_SOURCES = ("reasoning_gym", "arithmetic")
# Fields that are references to another field (experiments/configs/default.py:
# `config.rl.temperature = config.rollout.get_ref("temperature")`), to the field people set.
MIRRORED_FIELDS = {"rl.temperature": "rollout.temperature"}
# Allowed values of the float fields people set most, for the message of a non-finite value (the
# validators of each section check the ranges; these only say them).
FLOAT_RANGES = {
    "optim.learning_rate": "a float > 0 (the peak learning rate at optim.reference_batch, "
                           "e.g. 1e-4)",
    "optim.critic_learning_rate": "a float > 0, or None (= optim.learning_rate)",
    "optim.b1": "a float in [0, 1)",
    "optim.b2": "a float in [0, 1)",
    "optim.eps": "a float >= 0 (e.g. 1e-8)",
    "optim.weight_decay": "a float >= 0 (with optim.optimizer='adamw')",
    "optim.grad_clip_norm": "a float > 0, or <= 0 / None for no clipping",
    "optim.final_lr_frac": "a float in [0, 1]",
    "sft.learning_rate": "a float > 0",
    "rollout.temperature": "a float >= 0 (0 = greedy)",
    "rollout.top_p": "a float in (0, 1] (1.0 = off)",
    "rollout.min_p": "a float in [0, 1], or None (off)",
    "rl.temperature": "a float > 0 (the rollout temperature)",
    "rl.kl_coef": "a float >= 0 (0 = no KL term)",
    "rl.entropy_coef": "a float >= 0",
    "rl.clip_eps_low": "a float in [0, 1), or None (the preset's)",
    "rl.clip_eps_high": "a float >= 0, or None (the preset's)",
    "rl.dual_clip_c": "a float > 1, or 0 / None (off)",
    "rl.gamma": "a float in [0, 1]",
    "rl.lam": "a float in [0, 1]",
    "rl.vf_coef": "a float > 0",
    "rl.value_clip_eps": "a float > 0, or 0 (no clipping)",
    "rl.overlong_buffer_frac": "a float in [0, 1)",
}


# --- 1. Finite floats.

def non_finite_floats(tree: Any, prefix: str = "") -> list[tuple[str, float]]:
  """(dotted path, value) of every NaN or infinite float leaf of a ConfigDict, dict, list or
  tuple, in the tree's order (references resolved, as the run reads them); ints, strings and
  None are not floats and pass."""
  if hasattr(tree, "items"):
    children = [(f"{prefix}{key}", value) for key, value in tree.items()]
  elif isinstance(tree, (list, tuple)):
    children = [(f"{prefix[:-1]}[{i}]", value) for i, value in enumerate(tree)]
  else:
    children = []
  bad = []
  for path, value in children:
    if hasattr(value, "items") or isinstance(value, (list, tuple)):
      bad.extend(non_finite_floats(value, f"{path}."))
    elif isinstance(value, (float, np.floating)) and not math.isfinite(value):
      bad.append((path, float(value)))
  return bad


def check_finite(config) -> None:
  """Raises ValueError for the first NaN or infinite float of `config`, naming its field, the
  value and the allowed values, e.g. `optim.learning_rate=nan is not a finite number; allowed:
  a float > 0 (...)`."""
  # A field that only mirrors another is reported under the one people set.
  bad = sorted(non_finite_floats(config), key=lambda item: item[0] in MIRRORED_FIELDS)
  if bad:
    path, value = bad[0]
    allowed = FLOAT_RANGES.get(path, "a finite float (see experiments/configs/default.py)")
    raise ValueError(f"{path}={value} is not a finite number; allowed: {allowed}")


# Seeds: what `jax.random.key` takes (a C long; negative seeds are accepted).
SEED_MIN, SEED_MAX = -2 ** 63, 2 ** 63 - 1
SEED_RANGE = "an int in [-2**63, 2**63 - 1]"


def seed_fields(tree: Any, prefix: str = "") -> list[tuple[str, Any]]:
  """(dotted path, value) of every field named `seed` or ending in `_seed` of a ConfigDict or
  dict, at any depth, in the tree's order (sections are walked, their values not)."""
  found = []
  for key, value in (tree.items() if hasattr(tree, "items") else ()):
    path = f"{prefix}{key}"
    if hasattr(value, "items"):
      found.extend(seed_fields(value, f"{path}."))
    elif isinstance(key, str) and (key == "seed" or key.endswith("_seed")):
      found.append((path, value))
  return found


def check_seeds(config) -> None:
  """Raises ValueError for the first seed field (`seed_fields`) that is not an int in
  [-2^63, 2^63 - 1] (what `jax.random.key` takes; beyond it an OverflowError), naming the field,
  the value and the range. None passes (an unset placeholder, e.g. sft.seed = `seed`)."""
  for path, value in seed_fields(config):
    if value is None:
      continue
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer))
        or not SEED_MIN <= int(value) <= SEED_MAX):
      raise ValueError(f"{path}={value!r} is not a valid seed; allowed: {SEED_RANGE} "
                       "(what jax.random.key takes)")


def check_critic_seed(config, checked: validate.CheckedConfig) -> None:
  """A critic's head is initialised from `jax.random.key(seed + 1)`: with one, `seed` must be at
  most 2^63 - 2."""
  if update_lib.uses_critic(checked.rl) and config.seed == SEED_MAX:
    raise ValueError(f"seed={config.seed} is not a valid seed with a critic (rl.advantage="
                     f"{checked.rl.advantage!r} trains one, its head seeded by seed + 1); "
                     "allowed: an int in [-2**63, 2**63 - 2]")


# --- 3. Memory.

def format_bytes(n: float) -> str:
  """`n` bytes in binary units with 3 significant digits: "512 B", "1.50 KiB", "23.5 GiB"."""
  for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
    if abs(n) < 1024 or unit == "PiB":
      return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
    n /= 1024
  raise AssertionError("unreachable")


@dataclasses.dataclass(frozen=True)
class Phase:
  """The arrays alive together in one part of a step, in one memory pool.

  Attributes:
    name: what runs, e.g. "the rollout".
    sizes: the config fields that set its size, with their values, e.g.
      "rl.prompts_per_step=4 x rl.group_size=4 responses of rollout.max_new_tokens=8 tokens".
    terms: (description with its formula, bytes) of each array counted.
    lower: what to lower when it does not fit.
  """
  name: str
  sizes: str
  terms: tuple[tuple[str, int], ...]
  lower: str

  @property
  def total(self) -> int:
    """Bytes of all its terms."""
    return sum(b for _, b in self.terms)


@dataclasses.dataclass(frozen=True)
class Pool:
  """A memory a run's arrays must fit in: `limit` bytes, described as `what` (e.g. "this
  machine's RAM"); `devices` is how many of the run's devices keep their arrays in it (all local
  devices for a CPU backend's RAM, 1 for one accelerator's memory, 0 for the host RAM beside an
  accelerator, which holds host arrays only)."""
  what: str
  limit: Optional[int]
  devices: int


def host_ram_bytes() -> int:
  """Physical RAM of this machine in bytes (SC_PHYS_PAGES x SC_PAGE_SIZE): the whole memory,
  not what other processes leave free, so that a busy machine does not refuse a run."""
  return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def memory_pools(devices: Sequence[Any]) -> list[Pool]:
  """Where this process's arrays live: on a CPU backend one pool, the host's RAM, shared by all
  local `devices`; on GPU/TPU one device's memory (`memory_stats()["bytes_limit"]`, limit None
  when the backend does not report it: not checked) and the host RAM for host arrays."""
  ram = host_ram_bytes()
  if devices[0].platform == "cpu":
    return [Pool("this machine's RAM", ram, len(devices))]
  stats = devices[0].memory_stats() or {}
  limit = stats.get("bytes_limit")
  return [Pool(f"one {devices[0].platform.upper()}'s memory ({devices[0].device_kind})",
               int(limit) if limit else None, 1),
          Pool("this machine's RAM (host arrays)", ram, 0)]


def estimate_model_config(config) -> ModelConfig:
  """The policy's architecture without its weights: an HF checkpoint's config.json
  (model.checkpoint_path), or the built-in model's fields with the character tokenizer's
  vocabulary, computing in config.model.dtype (what `builders.build_model` builds).

  Raises: ValueError naming a bad model field; FileNotFoundError without config.json."""
  if config.model.source == "hf":
    from rlscale.model.hf_checkpoint import load_hf_config  # pylint: disable=g-import-not-at-top
    return load_hf_config(config.model.checkpoint_path).replace(dtype=config.model.dtype)
  fields = {name: config.model[name] for name in builders.MODEL_FIELDS if name != "param_dtype"}
  fields.update({name: config.model[name] for name in builders.MOE_MODEL_FIELDS
                 if name in config.model})
  return ModelConfig(vocab_size=CharTokenizer().vocab_size, **fields)


def eval_rows(config) -> int:
  """Rows of the held-out evaluation's sampled pass: held-out prompts x eval.pass_k. The prompts
  are task.eval_size, or for generated sources task.default_eval_size (256 when absent); 0 for a
  data file without task.eval_size (it may hold fewer rows than asked: nothing counted)."""
  prompts = config.task.get("eval_size")
  if prompts is None and config.task.source in GENERATED_SOURCES:
    prompts = config.task.get("default_eval_size") or builders.DEFAULT_EVAL_SIZE
  return (prompts or 0) * config.eval.pass_k


def update_microbatch_rows(rl, rows: int, width: int, platform: str,
                           measure_noise_scale: bool) -> int:
  """Rows of one update microbatch on one device (of `rows` per minibatch, `width` tokens each),
  at least: rows / rl.microbatches when set; unset, on a CPU enough rows for
  `update.CPU_MICROBATCH_TOKENS` tokens (or the whole minibatch when smaller), elsewhere the
  whole minibatch (one row with train.measure_noise_scale, whose split is not known here);
  `update.microbatch_count` chooses the actual split."""
  if rl.microbatches:
    return max(rows // rl.microbatches, 1)
  if platform == "cpu":
    return min(rows, -(-update_lib.CPU_MICROBATCH_TOKENS // width))
  return 1 if measure_noise_scale else rows


def _mesh_sizes(checked: validate.CheckedConfig) -> tuple[int, int]:
  """(devices of the run, ways the parameters are split): the data axis keeps a full copy on
  each of its devices; fsdp x tensor (x expert) split them."""
  devices = checked.mesh.devices.size
  return devices, devices // checked.mesh.shape["data"]


def estimate_memory(config, checked: validate.CheckedConfig, model: ModelConfig,
                    pool: Pool, *, platform: str) -> list[Phase]:
  """The phases of a run whose arrays must fit in `pool` at once, each a lower bound in bytes.

  With B = P x G rows, S = prompt bucket + Tr slots (the smallest bucket: prompts may be short;
  the largest with DAPO's dynamic sampling), N parameters, and the pool's share d / n of the
  run's n devices (d = `pool.devices`; every batch array is split evenly over the devices):
    state = N x 12 bytes (float32 weights and Adam moments; + N x 4 for a KL reference, + the
      critic's N + hidden + 1 parameters x 12 for PPO), per device / (fsdp x tensor) on a mesh;
    rollout = state + KV cache (`memory.kv_cache_bytes`, B rows x S slots) + logits [B, V]
      float32 + the sampler's [B, Tr] tokens, log-probs and mask;
    evaluation = state + KV cache and logits of held-out prompts x eval.pass_k rows (`eval_rows`);
    update = state + gradients (N x 4) + one microbatch's activations
      (`memory.activation_bytes`: `update_microbatch_rows` rows at a width of S - Tr + 1, since
      the update trains on the batch's bucketed response width, which may be 1 token; logits
      of one position per row).
  With a warm start (`sft_runs`), first the SFT phase, jitted on one device: state (N x 12, split
  over mesh.fsdp x mesh.tensor on a mesh) + gradients (N x 4) + activations of the whole SFT
  batch (`memory.activation_bytes`: sft.batch_size rows x (rollout.max_prompt_tokens +
  rollout.max_new_tokens) tokens, since `builders.warm_start` pads every SFT prompt to the largest
  bucket, rollout.max_prompt_tokens; logits of the rollout.max_new_tokens response positions of
  each row, which the loss scores), this pool's share on a mesh.
  With asynchronous rollouts (rl.max_off_policy_steps = k >= 1) the update phase also holds the
  rollout's KV cache, logits and host arrays (drawn meanwhile, k batches in flight) and up to
  k + 1 float32 parameter snapshots for the sampler (`async_rollouts`).
  On a CPU backend the host arrays (`memory.host_rollout_bytes`) share the RAM and are added;
  beside an accelerator (d = 0) they form the host pool's only phases.
  Not counted: XLA's temporaries, attention scores and MLP intermediates.
  """
  rl = checked.rl
  n_devices, param_split = _mesh_sizes(checked)
  d = pool.devices
  tp = checked.prompt_buckets[-1] if rl.dynamic_sampling else checked.prompt_buckets[0]
  tr = config.rollout.max_new_tokens
  slots = tp + tr
  rows = rl.prompts_per_step * rl.group_size
  share = lambda nbytes: -(-nbytes * d // n_devices)  # noqa: E731  (this pool's part, rounded up)
  dtype = f"{memory.dtype_bytes(model.dtype)} bytes ({model.dtype})"
  sizes = (f"rl.prompts_per_step={rl.prompts_per_step} x rl.group_size={rl.group_size} responses "
           f"of rollout.max_new_tokens={tr} tokens")
  lower_rollout = "rl.prompts_per_step x rl.group_size or rollout.max_new_tokens"
  lower_prompt = ""
  if rl.dynamic_sampling:  # the sampler pads every prompt to rollout.max_prompt_tokens
    sizes += (f" after prompts padded to rollout.max_prompt_tokens={tp} tokens (rl.dynamic_sampling "
              "samples at the largest prompt bucket)")
    lower_prompt = ", or rollout.max_prompt_tokens"
    lower_rollout = "rl.prompts_per_step x rl.group_size, rollout.max_new_tokens or " \
                    "rollout.max_prompt_tokens"
  host_rows = rows // jax.process_count()

  state: list[tuple[str, int]] = []
  grads: list[tuple[str, int]] = []
  if d:
    params = model.num_params()
    copies = lambda nbytes: -(-nbytes * d // param_split)  # noqa: E731
    # A CPU run keeps one copy per data-parallel device in the same RAM; fsdp x tensor split it.
    where = (f" x {d // param_split} copies (one per device)" if d > param_split else
             f" / {param_split // d} (split over mesh.fsdp x mesh.tensor)" if d < param_split
             else "")
    state.append((f"parameters and Adam moments {params:,} x 12 bytes{where}",
                  copies(memory.train_state_bytes(params))))
    if update_lib.uses_ref_logp(rl):
      state.append((f"KL reference {params:,} x 4 bytes{where}",
                    copies(memory.train_state_bytes(params, trained=False))))
    critic = model.replace(value_head=True).num_params() if update_lib.uses_critic(rl) else 0
    if critic:
      state.append((f"critic and its Adam moments {critic:,} x 12 bytes{where}",
                    copies(memory.train_state_bytes(critic))))
    grads.append((f"gradients {params + critic:,} x 4 bytes{where}",
                   copies((params + critic) * memory.FLOAT32_BYTES)))

  def sampler_terms(n_rows: int, what: str) -> list[tuple[str, int]]:
    return [
        (f"KV cache of {what}: {n_rows:,} rows x {slots:,} slots ({tp:,} prompt + {tr:,} response) x "
         f"{model.num_layers} layers x 2 (keys, values) x {model.num_kv_heads} kv heads x "
         f"{model.head_dim} x {dtype}", share(memory.kv_cache_bytes(model, n_rows, slots))),
        (f"logits {n_rows:,} x {model.vocab_size:,} x 4 bytes",
         share(memory.logits_bytes(model, n_rows))),
        (f"sampled tokens, log-probs and mask {n_rows:,} x {tr:,} x 12 bytes",
         share(n_rows * tr * 3 * memory.FLOAT32_BYTES))]

  on_cpu = platform == "cpu"
  phases = []
  if sft_runs(config):
    phases.append(sft_phase(config, checked, model, pool, platform=platform))
  if d:
    rollout_host = ([("host rollout arrays", memory.host_rollout_bytes(host_rows, tp, tr))]
                    if on_cpu else [])
    phases.append(Phase("the rollout", sizes,
                        tuple(state + sampler_terms(rows, "the rollout") + rollout_host),
                        lower_rollout))
    e_rows = eval_rows(config)
    if e_rows:
      eval_host = ([("host evaluation arrays", memory.host_rollout_bytes(e_rows, tp, tr))]
                   if on_cpu else [])
      phases.append(Phase(
          "the held-out evaluation",
          f"{e_rows // config.eval.pass_k} held-out prompts x eval.pass_k={config.eval.pass_k} "
          f"samples of rollout.max_new_tokens={tr} tokens",
          tuple(state + sampler_terms(e_rows, "the evaluation") + eval_host),
          "task.eval_size, eval.pass_k or rollout.max_new_tokens" + lower_prompt))
    # Asynchronous rollouts (rl.max_off_policy_steps = k >= 1): the sampler draws beside the
    # update, from snapshots of up to k + 1 parameter versions (the thread's, and those
    # published while it lags), with up to k batches in flight on the host.
    k = rl.get("max_off_policy_steps") or 0
    beside_update = []
    if k:
      beside_update = ([(f"parameter snapshots for the sampler: up to {k + 1} versions x "
                         f"{params:,} x 4 bytes{where}",
                         copies((k + 1) * params * memory.FLOAT32_BYTES))]
                       + sampler_terms(rows, "the rollout drawn during the update")
                       + ([(f"host arrays of {k} in-flight rollout batches",
                             k * memory.host_rollout_bytes(host_rows, tp, tr))] if on_cpu else []))
    device_rows = max(rows // (checked.batch_parallelism * rl.minibatches), 1)
    mb_rows = update_microbatch_rows(rl, device_rows, tp + 1, platform,
                                     bool(config.train.get("measure_noise_scale", False)))
    tokens = mb_rows * (tp + 1)
    phases.append(Phase(
        "the update step", sizes,
        tuple(state + grads + [(f"activations of a microbatch: {tokens:,} tokens x "
                                f"{model.num_layers} layers x {model.hidden_size} x {dtype} + "
                                f"logits {mb_rows:,} x {model.vocab_size:,} x 4 bytes",
                                memory.activation_bytes(model, tokens, mb_rows) * d)]
              + rollout_host + beside_update),
        "rl.prompts_per_step x rl.group_size" + lower_prompt + ", or raise rl.microbatches or "
        "rl.minibatches; a smaller model or mesh.fsdp for the parameters"))
  else:
    phases.append(Phase("the rollout's host arrays", sizes,
                        (("host rollout arrays", memory.host_rollout_bytes(host_rows, tp, tr)),),
                        lower_rollout))
  return phases


def sft_runs(config) -> bool:
  """Whether the run trains a warm start (`builders.starting_point_label`: the built-in model with
  sft.steps > 0; an HF checkpoint or sft.steps = 0 skip it)."""
  return builders.starting_point_label(config) == "warm start"


def sft_width(config) -> int:
  """Tokens per row of an SFT batch: rollout.max_prompt_tokens (`builders.warm_start` pads every
  prompt to the largest prompt bucket, which is rollout.max_prompt_tokens) + rollout.max_new_tokens
  (responses are padded to it)."""
  return config.rollout.max_prompt_tokens + config.rollout.max_new_tokens


def sft_phase(config, checked: validate.CheckedConfig, model: ModelConfig, pool: Pool, *,
              platform: str) -> Phase:
  """The SFT warm start's arrays in `pool` (see `estimate_memory`): on the device side one jitted
  copy of the state, gradients and the whole batch's activations; on a CPU backend (or in the
  host pool beside an accelerator, d = 0) the batch's host arrays [B, Tp + Tr] x 2 and [B, Tr]."""
  rows, tp, tr = config.sft.batch_size, config.rollout.max_prompt_tokens, \
      config.rollout.max_new_tokens
  width = tp + tr
  n_devices, param_split = _mesh_sizes(checked)
  d = pool.devices
  sizes = (f"sft.batch_size={rows} rows of rollout.max_prompt_tokens={tp} + "
           f"rollout.max_new_tokens={tr} tokens")
  lower = ("sft.batch_size, rollout.max_prompt_tokens or rollout.max_new_tokens (sft.steps=0 "
           "skips the warm start)")
  host = ("SFT batch host arrays (tokens, input and response masks) "
          f"{rows:,} x ({2 * width:,} + {tr:,}) x 4 bytes",
          rows * (2 * width + tr) * memory.INT32_BYTES)
  if not d:
    return Phase("the SFT warm start's host arrays", sizes, (host,), lower)
  params = model.num_params()
  dtype = f"{memory.dtype_bytes(model.dtype)} bytes ({model.dtype})"
  if checked.mesh is None:  # jitted on the default device: one copy, the whole batch
    copies = share = lambda nbytes: nbytes  # noqa: E731
    where = ""
  else:  # the parameters split as the run's; the batch's share of this pool's devices
    copies = lambda nbytes: -(-nbytes * d // param_split)  # noqa: E731
    share = lambda nbytes: -(-nbytes * d // n_devices)  # noqa: E731
    where = f" x {d}/{param_split} (mesh.fsdp x mesh.tensor)" if d != param_split else ""
  tokens = rows * width
  terms = [
      (f"parameters and Adam moments {params:,} x 12 bytes{where}",
       copies(memory.train_state_bytes(params))),
      (f"gradients {params:,} x 4 bytes{where}", copies(params * memory.FLOAT32_BYTES)),
      (f"activations of the SFT batch: {tokens:,} tokens ({rows:,} rows x {width:,}) x "
       f"{model.num_layers} layers x {model.hidden_size} x {dtype} + logits {rows * tr:,} "
       f"response positions x {model.vocab_size:,} x 4 bytes",
       share(memory.activation_bytes(model, tokens, rows * tr)))]
  if platform == "cpu":
    terms.append(host)
  return Phase("the SFT warm start", sizes, tuple(terms), lower)


def memory_error(phase: Phase, pool: Pool) -> str:
  """The one-line refusal of `phase` in `pool`: the fields that set the size, the estimate, the
  memory, the terms with their formulas, what to lower and how to skip the check."""
  # The terms that make the total (>= 5% of it), largest first; the rest as one sum.
  ranked = sorted((t for t in phase.terms if t[1]), key=lambda t: -t[1])
  shown = [t for t in ranked if t[1] >= phase.total / 20]
  terms = " + ".join(f"{what} = {format_bytes(b)}" for what, b in shown)
  rest = ranked[len(shown):]
  if rest:
    terms += f" + {len(rest)} smaller terms = {format_bytes(sum(b for _, b in rest))}"
  return (f"{phase.sizes} need ~{format_bytes(phase.total)} for {phase.name}, more than "
          f"{pool.what} ({format_bytes(pool.limit)}): {terms}; lower {phase.lower} (an estimate "
          f"from below: rlscale/runner/preflight.py; {SKIP_MEMORY_ENV}=1 skips this check)")


def check_sharding(config, checked: validate.CheckedConfig,
                   model: Optional[ModelConfig] = None) -> None:
  """Raises ValueError (one line: the replicated share and the largest arrays) when the mesh's
  fsdp axis leaves more than 2% of the train state's bytes replicated
  (`train.state.state_shardings` on the abstract state: nothing is allocated), before any weights
  are read or the warm start trains.

  Args: config, checked (what `validate.check_config` made of it); model: the policy's
  architecture, default `estimate_model_config(config)`."""
  model = estimate_model_config(config) if model is None else model
  state_lib.state_shardings(model, checked.optimizer, checked.mesh,
                            critic=update_lib.uses_critic(checked.rl),
                            critic_optimizer=checked.critic_optimizer,
                            rules=rules_for_mesh(checked.mesh))


def check_memory(config, checked: validate.CheckedConfig,
                 model: Optional[ModelConfig] = None,
                 pools: Optional[Sequence[Pool]] = None) -> None:
  """Raises ValueError (`memory_error`) for the first phase of `estimate_memory` (SFT warm start,
  rollout, evaluation, update) that exceeds its memory (`memory_pools` of this process's devices).

  Args:
    config, checked: the config and what `validate.check_config` made of it.
    model: the policy's architecture; default `estimate_model_config(config)`.
    pools: the memories to check; default `memory_pools(jax.local_devices())`.
  """
  model = estimate_model_config(config) if model is None else model
  devices = jax.local_devices()
  pools = memory_pools(devices) if pools is None else pools
  for pool in pools:
    if pool.limit is None:
      continue
    for phase in estimate_memory(config, checked, model, pool, platform=devices[0].platform):
      if phase.total > pool.limit:
        raise ValueError(memory_error(phase, pool))


# --- 4. Hard bounds.

def check_bounds(config, checked: validate.CheckedConfig) -> None:
  """Raises ValueError when one token array [rows, prompt + response tokens] holds more than
  2^31 - 1 elements, past the largest int32 index, whatever the memory: the SFT warm start's
  (sft.batch_size rows x rollout.max_prompt_tokens + rollout.max_new_tokens, when it runs), the
  rollout's (P x G rows) and the evaluation's (prompts x eval.pass_k rows), whose prompt width
  is, from below, the smallest prompt bucket (the largest, rollout.max_prompt_tokens, with
  rl.dynamic_sampling) + rollout.max_new_tokens."""
  rl = checked.rl
  tr = config.rollout.max_new_tokens
  tp = checked.prompt_buckets[-1] if rl.dynamic_sampling else checked.prompt_buckets[0]
  arrays = []
  if sft_runs(config):
    arrays.append((config.sft.batch_size, "sft.batch_size", sft_width(config),
                   "rollout.max_prompt_tokens + rollout.max_new_tokens"))
  prompt = ("rollout.max_prompt_tokens"
            if rl.dynamic_sampling or tp == config.rollout.max_prompt_tokens else "the smallest prompt bucket of rollout.max_prompt_tokens")
  arrays += [(rl.prompts_per_step * rl.group_size, "rl.prompts_per_step x rl.group_size", tp + tr,
              f"{prompt} + rollout.max_new_tokens"),
             (eval_rows(config), "held-out prompts x eval.pass_k", tp + tr,
              f"{prompt} + rollout.max_new_tokens")]
  for rows, fields, width, widths in arrays:
    if rows * width > INT32_MAX:
      raise ValueError(
          f"{fields} = {rows:,} rows x ({widths} = {width:,}) tokens = {rows * width:,} elements "
          f"in one array, more than 2^31 - 1 (int32 indices overflow); lower {fields}, "
          "rollout.max_prompt_tokens or rollout.max_new_tokens")


def memory_check_skipped() -> bool:
  """Whether RLSCALE_SKIP_MEMORY_CHECK is 1 / true / yes in the environment."""
  return os.environ.get(SKIP_MEMORY_ENV, "").strip().lower() in ("1", "true", "yes")


def check_config(config) -> validate.CheckedConfig:
  """Every check run before a run starts, in order: finite floats (`check_finite`), seeds
  (`check_seeds`, and `check_critic_seed` once the rl preset is known), the config's
  fields (`validate.check_config`), the mesh's sharding of the state (`check_sharding`), memory (`check_memory`, unless RLSCALE_SKIP_MEMORY_CHECK=1)
  and hard bounds (`check_bounds`). Reads at most an HF checkpoint's config.json; builds no model
  and compiles nothing. Call it after `builders.maybe_initialize_distributed` (it reads the
  device count).

  Returns: the `validate.CheckedConfig`, to pass as `builders.build_run(..., checked=)`.
  Raises: ValueError (one line naming the field, the value and what is allowed or what to lower),
    FileNotFoundError for a missing model.checkpoint_path or its config.json.
  """
  check_finite(config)
  check_seeds(config)
  checked = validate.check_config(config)
  check_critic_seed(config, checked)
  check_sharding(config, checked)
  if not memory_check_skipped():
    check_memory(config, checked)
  check_bounds(config, checked)
  return checked
