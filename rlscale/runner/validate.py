"""Every check of a run's config, run once before anything is built, and what it works out.

`check_config(config)` validates everything that can be checked without building the model, the
task or the tokenizer (cheap: no weights are read, nothing compiles; an HF checkpoint's
config.json is read for its experts) and returns a `CheckedConfig`: the resolved `rl` section,
the mesh, the step count, the optimizers, the prompt buckets, the sampling configs, remat and
routing replay. `preflight.check_config` calls it before the workdir exists (adding the checks
that need the machine: memory) and hands the result to `builders.build_run`, which builds only.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Optional


from rlscale.packing.layout import Packing
from rlscale.parallel import mesh as mesh_lib
from rlscale.rl.presets import resolve_rl_config, validate_rl_config
from rlscale.runner import hosts as hosts_lib
from rlscale.runner.async_rollouts import OVERLAP_MODES
from rlscale.runner.evaluate import eval_sampling
from rlscale.sampler.strategies import SamplingConfig
from rlscale.train import update as update_lib
from rlscale.train.optimizer import make_optimizer

MODEL_SOURCES = ("builtin", "hf")


def model_has_experts(config) -> bool:
  """Whether the configured policy has MoE layers: model.num_experts > 0 for the built-in model,
  the checkpoint's config.json for model.source "hf" (read, not the weights)."""
  if config.model.source == "hf":
    from rlscale.model.hf_checkpoint import load_hf_config  # pylint: disable=g-import-not-at-top
    return load_hf_config(config.model.checkpoint_path).moe_fields_in_use
  return bool(config.model.get("num_experts") or 0)


def default_old_logp(config, rl):
  """rl with old_logp "recompute" when config.rl.old_logp is unset and the policy has experts:
  the sampler's KV-cached decode and the trainer's full forward may route a token to different
  experts (a tie broken by rounding), and the ratio's denominator should be the trainer's
  (as verl and other RL systems do for MoE). An explicit rl.old_logp is kept."""
  if config.rl.get("old_logp") is None and model_has_experts(config):
    rl.old_logp = "recompute"
  return rl


def routing_replay(config) -> bool:
  """config.model.moe_routing_replay (False when a config lacks it): the update step and the
  recomputed old_logp pass use the experts the sampler chose for each response position (R3,
  `moe.replayed_routing`) instead of routing again.

  Raises: ValueError when it is on for a model without experts (`model_has_experts`)."""
  replay = bool(config.model.get("moe_routing_replay", False))
  if replay and not model_has_experts(config):
    raise ValueError("model.moe_routing_replay=True needs a model with experts "
                     "(model.num_experts > 0, e.g. experiments/configs/moe.py); this model is dense")
  return replay


def prompt_buckets(max_prompt_tokens: int) -> tuple[int, ...]:
  """Powers of two from 16 up to max_prompt_tokens, then max_prompt_tokens itself."""
  if max_prompt_tokens < 1:
    raise ValueError(f"rollout.max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
  buckets, b = [], 16
  while b < max_prompt_tokens:
    buckets.append(b)
    b *= 2
  return tuple(buckets) + (max_prompt_tokens,)


def check_model_source(config) -> None:
  """Raises ValueError / FileNotFoundError for a bad model.source or a missing checkpoint path."""
  source, path = config.model.source, config.model.checkpoint_path
  if source not in MODEL_SOURCES:
    raise ValueError(f"model.source={source!r} is not one of {list(MODEL_SOURCES)}")
  if source == "hf" and not path:
    raise ValueError("model.source='hf' needs model.checkpoint_path: a local HF checkpoint "
                     "directory (config.json, *.safetensors, tokenizer.json); nothing is downloaded")
  if source == "hf" and not os.path.isdir(path):
    raise FileNotFoundError(f"model.checkpoint_path={path!r} is not a directory; point it at a "
                            "local HF checkpoint (config.json, *.safetensors, tokenizer.json)")


def rollout_sampling(config, rl) -> SamplingConfig:
  """The training SamplingConfig from config.rollout; raises ValueError naming the rollout.* field
  (a bad async_overlap too, `async_rollouts.OVERLAP_MODES`; or the double overlong shaping:
  task.overlong_max_len together with rl.overlong_buffer_frac)."""
  rollout = config.rollout
  for name in ("max_new_tokens", "host_threads"):
    value = rollout[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:  # True is an int
      raise ValueError(f"rollout.{name} must be an int >= 1, got {value!r}")
  if config.task.get("overlong_max_len") and rl.overlong_buffer_frac > 0:
    raise ValueError("overlong shaping is on twice: task.overlong_max_len and "
                     "rl.overlong_buffer_frac; set task.overlong_max_len=None or "
                     "rl.overlong_buffer_frac=0")
  overlap = rollout.get("async_overlap", "thread")
  if overlap not in OVERLAP_MODES:
    raise ValueError(f"rollout.async_overlap={overlap!r} is not one of {list(OVERLAP_MODES)}")
  try:
    min_p = rollout.get("min_p")  # None = off
    return SamplingConfig(temperature=rollout.temperature, top_k=rollout.top_k, top_p=rollout.top_p,
                          min_p=0.0 if min_p is None else min_p)
  except ValueError as e:
    raise ValueError(f"rollout: {e}".replace("sampling.", "rollout.")) from None


def _check_positive_int(config, field: str, optional: bool = False) -> None:
  value = config.train.get(field)
  if optional and value is None:
    return
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    allowed = "an int >= 1 or None" if optional else "an int >= 1"
    raise ValueError(f"train.{field} must be {allowed}, got {value!r}")


def resolve_total_steps(train, batch_size: int) -> int:
  """RL steps of a run: `train.total_steps`, or ceil(train.total_samples / B) with a sample budget.

  B = P * G responses per step. With a budget the run consumes ceil(N / B) * B responses (up to
  B - 1 over it when B does not divide N; DAPO's extra sampling rounds consume more, but the step
  count, which the LR schedule needs, still follows from B).

  Raises ValueError when neither field is set, or both are set and disagree (naming both)."""
  total_samples, total_steps = train.get("total_samples"), train.get("total_steps")
  if total_samples is None:
    if total_steps is None:
      raise ValueError("set train.total_steps (RL steps) or train.total_samples (a budget in "
                       "responses); both are None")
    return total_steps
  steps = -(-total_samples // batch_size)
  if total_steps is not None and total_steps != steps:
    raise ValueError(f"train.total_samples={total_samples} at B={batch_size} responses per step "
                     f"means {steps} steps, but train.total_steps={total_steps}; set "
                     f"train.total_steps=None (or {steps}), or unset train.total_samples")
  return steps


def check_train_config(config) -> None:
  """Raises ValueError naming the bad train.* / eval.* / sft.* field."""
  for field in ("eval_every", "checkpoint_every", "keep_checkpoints"):
    _check_positive_int(config, field)
  for field in ("total_steps", "total_samples", "eval_every_samples"):
    _check_positive_int(config, field, optional=True)
  if not isinstance(config.eval.pass_k, int) or config.eval.pass_k < 1:
    raise ValueError(f"eval.pass_k must be an int >= 1, got {config.eval.pass_k!r}")
  if config.sft.steps < 0 or (config.sft.steps and config.sft.batch_size < 1):
    raise ValueError(f"sft.steps must be >= 0 and sft.batch_size >= 1, got {config.sft.steps}, "
                     f"{config.sft.batch_size}")
  if not config.sft.learning_rate > 0 or not math.isfinite(config.sft.learning_rate):  # NaN too
    raise ValueError(f"sft.learning_rate must be > 0 and finite, got {config.sft.learning_rate}")
  if not isinstance(config.train.get("measure_noise_scale", False), bool):
    raise ValueError(f"train.measure_noise_scale must be True or False, "
                     f"got {config.train.measure_noise_scale!r}")
  sft_seed = config.sft.get("seed")
  if sft_seed is not None and (isinstance(sft_seed, bool) or not isinstance(sft_seed, int)):
    raise ValueError(f"sft.seed must be an int or None (= seed), got {sft_seed!r}")


def packing_from_config(config, *, routing_replay: bool, processes: int) -> Optional[Packing]:
  """train.max_tokens_per_row / max_tokens_per_microbatch as a `packing.layout.Packing`, or None
  (no packing: train.max_tokens_per_row unset).

  Raises: ValueError naming the field: not an int >= 1, a row shorter than
    rollout.max_prompt_tokens + rollout.max_new_tokens, a budget below one row, a budget without
    packing, routing replay (model.moe_routing_replay) or several processes with packing."""
  for field in ("max_tokens_per_row", "max_tokens_per_microbatch"):
    _check_positive_int(config, field, optional=True)
  width = config.train.get("max_tokens_per_row")
  budget = config.train.get("max_tokens_per_microbatch")
  if width is None:
    if budget is not None:
      raise ValueError("train.max_tokens_per_microbatch needs train.max_tokens_per_row (packing); "
                       "without packing rl.microbatches splits the rows")
    return None
  longest = config.rollout.max_prompt_tokens + config.rollout.max_new_tokens
  if width < longest:
    raise ValueError(f"train.max_tokens_per_row={width} must be >= rollout.max_prompt_tokens + "
                     f"rollout.max_new_tokens = {longest} (a sequence never spans two rows)")
  if budget is not None and budget < width:
    raise ValueError(f"train.max_tokens_per_microbatch={budget} must be >= "
                     f"train.max_tokens_per_row={width} (one packed row)")
  if routing_replay:
    raise ValueError("train.max_tokens_per_row (packing) cannot be combined with "
                     "model.moe_routing_replay: a packed row's positions are not the sampler's")
  if processes > 1:
    raise ValueError(f"train.max_tokens_per_row (packing) runs in one process, not {processes}")
  return Packing(width, budget)


def model_remat(config) -> bool:
  """config.model.remat, or when None (the default) True for HF checkpoints and False for the
  built-in model (its activations are small, and recomputing them costs time). Raises
  ValueError for anything but None, True or False."""
  remat = config.model.get("remat")
  if remat is None:
    return config.model.source == "hf"
  if not isinstance(remat, bool):
    raise ValueError(f"model.remat must be None, True or False, got {remat!r}")
  return remat


def mesh_from_config(config):
  """The Mesh of config.mesh over every device of every process; a config without a mesh
  section gets data parallelism over all of them (`mesh.mesh_config()`).

  Raises: ValueError (one line naming the field) for bad mesh sizes (`mesh.mesh_shape`)."""
  mesh_cfg = config.get("mesh")
  return mesh_lib.make_mesh(mesh_lib.mesh_config() if mesh_cfg is None else mesh_cfg)


@dataclasses.dataclass(frozen=True)
class CheckedConfig:
  """What `check_config` works out from a valid config, without the model or the task.

  Attributes:
    rl: the resolved `rl` section (presets filled, `default_old_logp` applied).
    mesh: the Mesh of config.mesh (`mesh_from_config`).
    batch_parallelism: how many parts a batch's rows are split into (the mesh's batch axes,
      `mesh.batch_parallelism`).
    total_steps: RL steps of the run (`resolve_total_steps`).
    optimizer_args: `make_optimizer` keywords (`update.optimizer_args`).
    optimizer: the policy's optimizer; critic_optimizer: a PPO critic's (None without a critic).
    prompt_buckets: the sampler's prompt lengths (`prompt_buckets`).
    sampling: the rollouts' SamplingConfig; eval_sampling: the sampled held-out metrics'.
    remat: the policy's rematerialisation (`model_remat`).
    routing_replay: the trainer replays the sampler's experts (`routing_replay`).
    packing: train.max_tokens_per_row's `packing.layout.Packing`, or None (`packing_from_config`).
  """
  rl: Any
  mesh: Any
  batch_parallelism: int
  total_steps: int
  optimizer_args: dict
  optimizer: Any
  critic_optimizer: Any
  prompt_buckets: tuple
  sampling: SamplingConfig
  eval_sampling: SamplingConfig
  remat: bool
  routing_replay: bool
  packing: Optional[Packing] = None


def check_config(config) -> CheckedConfig:
  """Validates everything in `config` that can be checked without building the model, the task
  or the tokenizer (cheap: no weights are read, nothing compiles; an HF checkpoint's config.json
  is read for its experts), and returns what it works out (`CheckedConfig`).

  Every config check runs here, once: `rlscale.runner.preflight.check_config` calls it before the
  workdir exists and hands the result to `build_run`, which then checks nothing again (it calls
  this itself only when given no `checked`).

  Raises: ValueError naming the field and its allowed values (rl.*, mesh.*, train.*, eval.*,
  sft.*, optim.*, rollout.*, model.source / model.remat), FileNotFoundError for a missing
  model.checkpoint_path."""
  rl = resolve_rl_config(config.rl)
  mesh = mesh_from_config(config)
  # A batch's rows are split over the mesh's batch axes (data x fsdp [x expert]).
  parallelism = mesh_lib.batch_parallelism(mesh)
  validate_rl_config(rl, num_devices=parallelism)
  hosts = hosts_lib.current()
  hosts_lib.check_rl_config(rl, hosts)
  check_model_source(config)
  rl = default_old_logp(config, rl)
  if rl.loss_agg_mode == "seq-mean-token-sum-norm" and rl.loss_agg_norm is None:
    # Dr. GRPO's constant defaults to the response limit Tr, fixed here because the update step
    # trains on each batch's bucketed response width (`batching.train_widths`), not on Tr.
    rl.loss_agg_norm = float(config.rollout.max_new_tokens)
  remat = model_remat(config)
  check_train_config(config)
  batch_size = rl.prompts_per_step * rl.group_size
  total_steps = resolve_total_steps(config.train, batch_size)
  optimizer_args = update_lib.optimizer_args(rl, total_steps, config.train.get("total_samples"))
  optimizer = make_optimizer(config.optim, **optimizer_args)
  critic_optimizer = None
  if update_lib.uses_critic(rl):
    critic_optimizer = make_optimizer(config.optim, learning_rate=config.optim.critic_learning_rate,
                                      **optimizer_args)
  sampling = rollout_sampling(config, rl)
  replay = routing_replay(config)
  if hosts.count > 1 and config.rollout.host_threads > 1:
    raise ValueError(f"rollout.host_threads={config.rollout.host_threads} splits each process's "
                     f"rows into chunks sampled apart; with {hosts.count} processes it must be 1")
  return CheckedConfig(
      rl=rl, mesh=mesh, batch_parallelism=parallelism, total_steps=total_steps,
      optimizer_args=optimizer_args, optimizer=optimizer, critic_optimizer=critic_optimizer,
      prompt_buckets=prompt_buckets(config.rollout.max_prompt_tokens), sampling=sampling,
      eval_sampling=eval_sampling(sampling, config.eval.get("sampling")), remat=remat,
      routing_replay=replay,
      packing=packing_from_config(config, routing_replay=replay, processes=hosts.count))
