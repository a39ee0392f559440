"""A run's jitted steps, built from its config with abstract inputs, ready to lower for any mesh.

`build_steps(config, devices, model_config)` checks the config as the run would
(`runner.validate.check_config`, with the rows split over the mesh of `devices`) and returns
the programs one RL step of that run compiles, each as a `Step` whose `lower()` lowers the
run's own jitted function for shapes, dtypes and shardings only (no parameter is initialised,
nothing runs):

- `update`: the update step (`train.update_fn.make_update_fn_from_checked`) on the global batch
  of B = P x G rows of Tp + Tr tokens, with the config's epochs, minibatches, microbatches,
  remat and optimizer; the state donated.
- `sample`: the sampler's prefill and decode loop with its KV cache (`sampler.Sampler`'s jitted
  generate) for the rollout: P prompts x G samples, Tp = the largest prompt bucket, Tr =
  rollout.max_new_tokens.
- `eval_sample` / `eval_greedy`: the same for the held-out evaluation (task.eval_size prompts,
  padded to the mesh, x eval.pass_k samples; and greedy with one sample).
- `ref_logp` (a KL term), `old_logp` (rl.old_logp "recompute"), `values` (a PPO critic): the
  forward passes (`train.passes`) over the update batch.

Each step carries the bytes per device that the run keeps alive while it runs besides the
step's own arguments (`Step.resident_bytes`: the Adam moments while sampling, the reference
copy with a KL term), so a step that compiles can still be reported as not fitting.

Choices the runner makes by the process's default backend are made for the target platform
here: `models.for_platform` (kernel switches) and `update.microbatch_count` (an unset
rl.microbatches is one slice on GPU/TPU).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from rlscale.model.config import ModelConfig
from rlscale.parallel import mesh as mesh_lib
from rlscale.parallel.data import batch_sharding, mesh_processes
from rlscale.parallel.rules import rules_for_mesh
from rlscale.rl.presets import validate_rl_config
from rlscale.runner import hosts as hosts_lib
from rlscale.runner import validate
from rlscale.sampler.sampler import Sampler
from rlscale.sampler.strategies import SamplingConfig
from rlscale.train import passes
from rlscale.train import update as update_lib
from rlscale.train.memory import abstract_batch
from rlscale.train.state import abstract_train_state
from rlscale.train.update_fn import make_update_fn_from_checked

# Held-out prompts when task.eval_size is None (`runner.builders.DEFAULT_EVAL_SIZE`).
DEFAULT_EVAL_SIZE = 256
# The sampler's token ids for compiling: the ids only enter comparisons, so any in-vocabulary
# value gives the same program (`Sampler` checks they are in the vocabulary).
COMPILE_EOS_IDS = (0,)
COMPILE_PAD_ID = 0


@dataclasses.dataclass(frozen=True)
class Step:
  """One jitted program of a run, ready to lower for abstract inputs.

  Attributes:
    name: "update", "sample", "eval_sample", "eval_greedy", "ref_logp", "old_logp" or
      "values".
    kind: "update", "sampler" or "pass" (what to change when it does not fit).
    rows: global rows of its batch (responses).
    tokens: width of a row in tokens (prompt + response).
    detail: one line on what it computes, e.g. "256 rows x (16 + 8) tokens, 1 microbatch".
    lower: () -> jax.stages.Lowered of the run's own jitted function.
    resident_bytes: bytes per device the run keeps alive during this step besides its
      arguments (e.g. the Adam moments while sampling).
    resident_what: what those bytes are, e.g. "Adam moments".
  """
  name: str
  kind: str
  rows: int
  tokens: int
  detail: str
  lower: Callable[[], jax.stages.Lowered]
  resident_bytes: int = 0
  resident_what: str = ""


@dataclasses.dataclass(frozen=True)
class RunSteps:
  """What `build_steps` works out of a config for one mesh.

  Attributes:
    model_config: the compiled policy (`models.aot_model_config`).
    mesh: the Mesh over the target devices.
    rl: the resolved rl section, microbatches chosen for the target platform.
    update_microbatches: K, gradient-accumulation slices of a minibatch.
    pass_microbatches: slices of the forward passes.
    prompt_len, response_len: Tp (the largest prompt bucket) and Tr, in tokens.
    state_bytes: bytes per device of the training state (params, Adam moments, a critic).
    param_bytes: bytes per device of the policy's parameters.
    processes: the run's process count the sampler's layout assumed.
    steps: the `Step`s, update first.
    sampler: the run's `Sampler` on `mesh` (its rules, param shardings, sampling), for
      programs built beside the steps (`aot.programs`: prefill, one decode step).
    params: the policy's parameters as ShapeDtypeStructs with the train state's shardings.
  """
  model_config: ModelConfig
  mesh: jax.sharding.Mesh
  rl: object
  update_microbatches: int
  pass_microbatches: int
  prompt_len: int
  response_len: int
  state_bytes: int
  param_bytes: int
  processes: int
  steps: tuple
  sampler: Optional[Sampler] = None
  params: object = None


def shard_bytes(tree) -> int:
  """Bytes one device holds of a tree of ShapeDtypeStruct leaves with NamedShardings (the
  shard of each leaf: `sharding.shard_shape`); None leaves count 0."""
  total = 0
  for leaf in jax.tree.leaves(tree):
    shape = leaf.sharding.shard_shape(leaf.shape) if leaf.sharding is not None else leaf.shape
    total += math.prod(shape) * jnp.dtype(leaf.dtype).itemsize
  return total


def _abstract(tree, shardings):
  """ShapeDtypeStruct leaves of `tree` carrying the matching NamedShardings."""
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      tree, shardings)


def _single_device_mesh_section(mesh_cfg):
  """A copy of a `mesh` section with every axis 1 but data -1: valid on this process's one CPU
  device, so `validate.check_config` runs its other checks here."""
  section = copy.deepcopy(mesh_cfg)
  for axis in section:
    section[axis] = 1
  section["data"] = -1
  return section


def check_for_mesh(config, mesh, processes: int) -> validate.CheckedConfig:
  """`validate.check_config(config)` as a run on `mesh` over `processes` processes would see
  it: every check, with the rows split over `mesh`'s batch axes and the prompts over the
  processes, and `mesh` in the result.

  Raises: ValueError / FileNotFoundError as `check_config` (naming the field)."""
  local = copy.deepcopy(config)
  if local.get("mesh") is not None:
    with local.unlocked():
      local.mesh = _single_device_mesh_section(local.mesh)
  checked = validate.check_config(local)
  parallelism = mesh_lib.batch_parallelism(mesh)
  validate_rl_config(checked.rl, num_devices=parallelism)
  hosts_lib.check_rl_config(checked.rl, hosts_lib.Hosts(0, processes))
  return dataclasses.replace(checked, mesh=mesh, batch_parallelism=parallelism)


def sampler_layout(prompts: int, group: int, parts: int, processes: int,
                   host_threads: int) -> tuple[int, int, bool]:
  """(prompt rows of one jitted call, samples per prompt G, prompts sharded) as
  `Sampler.__call__` arranges `prompts` x `group` rows on a mesh of `parts` batch parts over
  `processes` processes with `host_threads` row chunks (it repeats the prompts G times when a
  chunk would split a group, or several processes' prompts do not split over the parts)."""
  chunks = max(c for c in range(1, host_threads + 1) if prompts * group % (parts * c) == 0)
  if prompts % chunks or (processes > 1 and prompts % parts):
    prompts, group = prompts * group, 1
  return prompts // chunks, group, (prompts // chunks) % parts == 0


def _rng_spec(mesh) -> jax.ShapeDtypeStruct:
  """A replicated PRNG key's abstract value."""
  dtype = jax.eval_shape(lambda: jax.random.key(0)).dtype
  return jax.ShapeDtypeStruct((), dtype, sharding=NamedSharding(mesh, PartitionSpec()))


def _moe_batch(model_config: ModelConfig, rows: int, response_len: int, mesh, *,
               replay: bool) -> dict:
  """The update batch's MoE keys: the sampler's experts [B, Tr, L_moe, k] int32 (logged as the
  routing mismatch) and, with routing replay, the same as "routing"."""
  if not model_config.moe_layers:
    return {}
  spec = jax.ShapeDtypeStruct(
      (rows, response_len, len(model_config.moe_layers), model_config.num_experts_per_tok),
      jnp.int32, sharding=batch_sharding(mesh, 4))
  return {"sampler_experts": spec, **({"routing": spec} if replay else {})}


def _sampler_step(name: str, sampler: Sampler, params, sampling: SamplingConfig, *,
                  prompts: int, group: int, processes: int, host_threads: int, prompt_len: int,
                  resident: tuple[int, str]) -> Step:
  """A Step lowering `sampler`'s jitted generate for `prompts` x `group` rows."""
  mesh = sampler.mesh
  rows_per_call, g, sharded = sampler_layout(prompts, group, sampler.num_devices, processes,
                                             host_threads)
  sharding = (batch_sharding(mesh, 2) if sharded else NamedSharding(mesh, PartitionSpec()))
  prompt = jax.ShapeDtypeStruct((rows_per_call, prompt_len), jnp.int32, sharding=sharding)
  fn = sampler.jitted(sampling, g, sharded)
  rows = rows_per_call * g
  tr = sampler.max_new_tokens
  return Step(name=name, kind="sampler", rows=rows, tokens=prompt_len + tr,
              detail=(f"{rows_per_call} prompts x {g} samples, ({prompt_len} + {tr}) tokens, "
                      f"KV cache of {prompt_len + tr} slots, temperature {sampling.temperature}"),
              lower=lambda: fn.lower(params, prompt, prompt, _rng_spec(mesh)),
              resident_bytes=resident[0], resident_what=resident[1])


def _pass_step(name: str, fn, params, batch: dict, mesh, *, microbatches: int,
               resident: tuple[int, str]) -> Step:
  """A Step lowering a `train.passes` function: it jits per batch layout on first call, so it
  is traced inside an outer jit with the same shardings (the inner jit becomes its body)."""
  batch_shardings = {k: v.sharding for k, v in batch.items()}
  param_shardings = jax.tree.map(lambda x: x.sharding, params)
  outer = jax.jit(fn, in_shardings=(param_shardings, batch_shardings),
                  out_shardings=batch_sharding(mesh, 2))
  rows, width = batch["tokens"].shape
  return Step(name=name, kind="pass", rows=rows, tokens=width,
              detail=f"{rows} rows x {width} tokens, {microbatches} microbatch(es)",
              lower=lambda: outer.lower(params, batch),
              resident_bytes=resident[0], resident_what=resident[1])


def build_steps(config, devices: Sequence[jax.Device], model_config: ModelConfig, *,
                platform: str = "tpu", eval_steps: bool = True,
                processes: int | None = None) -> RunSteps:
  """The run's jitted steps for `config` on a mesh of `devices`, ready to lower (see the module
  docstring).

  Args:
    config: a run config (experiments/configs/*.py), overrides applied.
    devices: the target devices (a TPU topology's, `topology.load_topology(...).devices`);
      the mesh is `parallel.mesh.make_mesh(config.mesh, devices)`.
    model_config: the policy (`models.aot_model_config(config, platform=...)`).
    platform: the target backend, for choices the runner makes by backend (microbatches).
    eval_steps: include the held-out evaluation's sampler calls.
    processes: the run's process count (hosts) on these devices, for the prompts each passes
      to the sampler; None: the processes owning them (libtpu describes v5e:2x4 as 2 hosts of
      4 chips; a v5e-8 VM with 8 chips on one host is processes=1).
  Returns: RunSteps.
  Raises: ValueError (naming the field) for a config the run would refuse on this mesh: mesh
    sizes that do not multiply to the device count, rows that do not split over it, bad rl /
    rollout / train fields; FileNotFoundError for a missing model.checkpoint_path.
  """
  mesh_cfg = config.get("mesh")
  mesh_cfg = mesh_lib.mesh_config() if mesh_cfg is None else mesh_cfg
  mesh = mesh_lib.make_mesh(mesh_cfg, devices)
  processes = mesh_processes(mesh) if processes is None else processes
  checked = check_for_mesh(config, mesh, processes)
  rl = copy.deepcopy(checked.rl)
  batch = rl.prompts_per_step * rl.group_size
  tp, tr = checked.prompt_buckets[-1], config.rollout.max_new_tokens
  width = tp + tr
  noise_scale = bool(config.train.get("measure_noise_scale", False))
  update_k = update_lib.microbatch_count(rl.microbatches, batch // rl.minibatches, width,
                                         platform, group_size=rl.group_size,
                                         measure_noise_scale=noise_scale)
  pass_k = update_lib.microbatch_count(rl.microbatches, batch, width, platform)
  rl.microbatches = update_k  # what update_step would choose on `platform`
  critic = update_lib.uses_critic(rl)
  rules = rules_for_mesh(mesh)
  update = make_update_fn_from_checked(
      model_config, rl, checked.optimizer, mesh, critic_optimizer=checked.critic_optimizer,
      rules=rules, measure_noise_scale=noise_scale)
  shardings = update.state_shardings
  state = _abstract(abstract_train_state(model_config, checked.optimizer, critic=critic,
                                         critic_optimizer=checked.critic_optimizer), shardings)
  state_bytes, param_bytes = shard_bytes(state), shard_bytes(state.params)
  kl = update_lib.uses_ref_logp(rl)
  ref_bytes = param_bytes if kl else 0

  def resident(*, args_bytes: int, ref_in_args: bool = False) -> tuple[int, str]:
    """(state and reference bytes alive beside a step whose arguments hold args_bytes of
    them, what they are)."""
    parts = [("training state" if args_bytes == 0 else "Adam moments and the rest of the state",
              state_bytes - args_bytes)]
    if kl and not ref_in_args:
      parts.append(("the reference copy (KL)", ref_bytes))
    parts = [(what, n) for what, n in parts if n > 0]
    return sum(n for _, n in parts), " + ".join(what for what, _ in parts)

  update_batch = {**abstract_batch(rl, batch, tp, tr, mesh),
                  **_moe_batch(model_config, batch, tr, mesh, replay=checked.routing_replay)}
  rng = _rng_spec(mesh)
  steps = [Step(
      name="update", kind="update", rows=batch, tokens=width,
      detail=(f"{rl.algorithm}, {batch} rows x ({tp} + {tr}) tokens, {rl.epochs} epoch(s) x "
              f"{rl.minibatches} minibatch(es) x {update_k} microbatch(es), remat "
              f"{'on' if model_config.remat else 'off'}"),
      lower=lambda: update.jitted(update_batch).lower(state, update_batch, rng),
      resident_bytes=ref_bytes, resident_what="the reference copy (KL)" if kl else "")]
  sampler = Sampler(model_config, tr, checked.sampling, COMPILE_EOS_IDS, COMPILE_PAD_ID, mesh,
                    prompt_buckets=checked.prompt_buckets, param_shardings=shardings.params,
                    rules=rules, host_threads=config.rollout.host_threads)
  beside_params = resident(args_bytes=param_bytes)
  sample = dict(processes=processes, host_threads=config.rollout.host_threads, prompt_len=tp,
                resident=beside_params)
  steps.append(_sampler_step("sample", sampler, state.params, checked.sampling,
                             prompts=rl.prompts_per_step, group=rl.group_size, **sample))
  if eval_steps:
    parts = checked.batch_parallelism
    prompts = -(-(config.task.get("eval_size") or DEFAULT_EVAL_SIZE) // parts) * parts
    steps.append(_sampler_step("eval_sample", sampler, state.params, checked.eval_sampling,
                               prompts=prompts, group=config.eval.pass_k, **sample))
    steps.append(_sampler_step("eval_greedy", sampler, state.params,
                               SamplingConfig(temperature=0.0), prompts=prompts, group=1,
                               **sample))
  pass_batch = {k: v for k, v in update_batch.items() if k in update_lib.PASS_KEYS}
  no_routing = {k: v for k, v in pass_batch.items() if k != "routing"}
  pass_args = dict(microbatches=pass_k, rules=rules)
  if kl:
    fn = passes.make_logp_fn(model_config, rl.temperature, mesh, shardings.params, **pass_args)
    steps.append(_pass_step("ref_logp", fn, state.params, no_routing, mesh, microbatches=pass_k,
                            resident=resident(args_bytes=0, ref_in_args=True)))
  if rl.old_logp == "recompute":
    fn = passes.make_logp_fn(model_config, rl.temperature, mesh, shardings.params, **pass_args)
    steps.append(_pass_step("old_logp", fn, state.params, pass_batch, mesh, microbatches=pass_k,
                            resident=beside_params))
  if critic:
    fn = passes.make_value_fn(model_config, mesh, shardings.critic_params, **pass_args)
    steps.append(_pass_step("values", fn, state.critic_params, no_routing, mesh,
                            microbatches=pass_k,
                            resident=resident(args_bytes=shard_bytes(state.critic_params))))
  return RunSteps(model_config=model_config, mesh=mesh, rl=rl, update_microbatches=update_k,
                  pass_microbatches=pass_k, prompt_len=tp, response_len=tr,
                  state_bytes=state_bytes, param_bytes=param_bytes, processes=processes,
                  steps=tuple(steps), sampler=sampler, params=state.params)
