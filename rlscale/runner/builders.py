"""Config -> the objects one run needs (model, tokenizer, task, sampler, optimizer, update step).

Kept apart from the loop so Colab users can build a run, poke at its parts, and call the loop.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from typing import Any, Callable, Sequence

import jax
import ml_collections
import numpy as np

from rlscale import tokenizers as tokenizers_lib
from rlscale.model import ModelConfig, init_params
from rlscale.model.config import MOE_FIELDS
from rlscale.parallel import mesh as mesh_lib
from rlscale.parallel.data import batch_sharding
from rlscale.parallel.rules import rules_for_mesh
from rlscale.rl.advantages import compute_batch_advantages
from rlscale.rl.presets import resolve_rl_config, validate_rl_config
from rlscale.runner import hosts as hosts_lib
from rlscale.runner import layout as layout_lib
from rlscale.runner import plots
from rlscale.runner import sft
from rlscale.runner.batching import encode_prompts, encode_responses
from rlscale.runner.evaluate import Evaluator, eval_sampling
from rlscale.sampler.sampler import Sampler
from rlscale.sampler.strategies import SamplingConfig
from rlscale.tasks import make_task
from rlscale.tasks import verifier as verifier_lib
from rlscale.train import passes
from rlscale.train import update as update_lib
from rlscale.train import update_fn as update_fn_lib
from rlscale.train.optimizer import make_optimizer, scaled_learning_rate
from rlscale.train.state import create_train_state, critic_params_from_policy

MODEL_SOURCES = ("builtin", "hf")
SFT_DIR = "sft"  # the warm-start cache inside a workdir when sft.cache_dir is unset
DEFAULT_EVAL_SIZE = 256  # held-out prompts when task.eval_size and task.default_eval_size are None
MODEL_FIELDS = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                "head_dim", "param_dtype", "dtype")
# The built-in model's mixture-of-experts fields (`ModelConfig`'s HF names), read when the model
# section has them (experiments/configs/moe.py); absent, the model is dense.
MOE_MODEL_FIELDS = MOE_FIELDS


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


def routing_replay(config, model_config: ModelConfig) -> bool:
  """config.model.moe_routing_replay (False when a config lacks it): the update step and the
  recomputed old_logp pass use the experts the sampler chose for each response position (R3,
  `moe.replayed_routing`) instead of routing again.

  Raises: ValueError when it is on for a model without experts."""
  replay = bool(config.model.get("moe_routing_replay", False))
  if replay and not model_config.moe_layers:
    raise ValueError("model.moe_routing_replay=True needs a model with experts "
                     "(model.num_experts > 0, e.g. experiments/configs/moe.py); this model is dense")
  return replay


@dataclasses.dataclass
class Run:
  """Everything the loop needs for one experiment (see `build_run`)."""
  rl_config: Any
  model_config: ModelConfig
  tokenizer: Any
  task: Any
  sampler: Sampler
  evaluator: Evaluator
  state: Any  # TrainState: global arrays placed by `layout` (the state's shardings)
  update_fn: Callable
  ref_params: Any  # the frozen reference policy (KL) on the mesh, or None
  # (params, batch) -> response log-probs at rl.temperature: ref_logp from ref_params, and
  # old_logp from the current params when rl.old_logp == "recompute"; None when neither is needed.
  logp_fn: Callable | None
  value_fn: Callable | None
  prompt_buckets: Sequence[int]
  num_devices: int
  # Seconds from loading the tokenizer and model to the end of the warm start (SFT, or loading it
  # from the cache) in this process; not part of the RL wall time.
  warm_start_seconds: float
  total_steps: int  # RL steps of the run (train.total_steps, or from train.total_samples)
  # compute_batch_advantages for this run's rl config, jitted: (rewards, response_mask, *,
  # old_logp, ref_logp, values) -> {"advantages", ...}
  advantage_fn: Callable
  export_dtype: str = "float32"  # dtype of the exported policy (see build_model)
  log: Callable[[str], None] = print
  title: str = ""  # what the run is (plots.run_title): algorithm, P x G = B, lr and its rule
  starting_point: str = "warm start"  # starting_point_label: what RL starts from, for logs
  smoke: bool = False  # config.smoke: a smoke variant, which checks the pipeline, not learning
  # Where the arrays live: the mesh and the state's shardings (`layout.MeshLayout`).
  layout: Any = None
  # model.moe_routing_replay: the trainer replays the sampler's experts (`routing_replay`).
  routing_replay: bool = False

  @property
  def export_config(self) -> ModelConfig:
    """The policy's config for export (`save_hf_checkpoint`): parameters stored in
    export_dtype, the source's dtype, while training keeps float32 master weights."""
    return self.model_config.replace(param_dtype=self.export_dtype)


def _env_int(name: str) -> int | None:
  """The integer environment variable `name`, or None when unset; ValueError when not an int."""
  value = os.environ.get(name)
  if value is None or value == "":
    return None
  try:
    return int(value)
  except ValueError:
    raise ValueError(f"environment variable {name}={value!r} must be an integer") from None


def maybe_initialize_distributed(setting) -> None:
  """Calls `jax.distributed.initialize()` when asked: setting True, or "auto" with
  JAX_COORDINATOR_ADDRESS set in the environment (see README, multi-host); nothing when this
  process already joined (so the runner and a caller may both call it).

  JAX reads JAX_COORDINATOR_ADDRESS itself; JAX_NUM_PROCESSES and JAX_PROCESS_ID are passed on as
  num_processes / process_id (JAX detects them on Cloud TPU, SLURM and similar clusters only)."""
  if setting not in (True, False, "auto", None):
    raise ValueError(f"config.distributed must be True, False or 'auto', got {setting!r}")
  wanted = setting is True or (setting == "auto" and os.environ.get("JAX_COORDINATOR_ADDRESS"))
  if wanted and not jax.distributed.is_initialized():
    jax.distributed.initialize(num_processes=_env_int("JAX_NUM_PROCESSES"),
                               process_id=_env_int("JAX_PROCESS_ID"))


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
  (or the double overlong shaping: task.overlong_max_len together with rl.overlong_buffer_frac)."""
  rollout = config.rollout
  for name in ("max_new_tokens", "host_threads"):
    value = rollout[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:  # True is an int
      raise ValueError(f"rollout.{name} must be an int >= 1, got {value!r}")
  if config.task.get("overlong_max_len") and rl.overlong_buffer_frac > 0:
    raise ValueError("overlong shaping is on twice: task.overlong_max_len and "
                     "rl.overlong_buffer_frac; set task.overlong_max_len=None or "
                     "rl.overlong_buffer_frac=0")
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


def held_out_examples(config, task, log) -> list:
  """The held-out evaluation prompts: exactly `task.eval_size` when set (the source raises
  ValueError when it has fewer), else `task.default_eval_size` (256 when absent), shrunk with a
  warning to what a data file holds (`task.num_eval`) when it holds fewer.

  Raises:
    ValueError: eval_size None and the file holds no held-out rows (names holdout_fraction).
  """
  if config.task.get("eval_size") is not None:
    return task.eval_examples(config.task.eval_size)
  wanted = config.task.get("default_eval_size") or DEFAULT_EVAL_SIZE
  available = getattr(task, "num_eval", None)  # sources that generate prompts never run short
  if available is not None and available < wanted:
    fraction = config.task.get("holdout_fraction")
    if available == 0:
      raise ValueError(f"task.data_path={config.task.data_path!r} gives no held-out rows at "
                       f"task.holdout_fraction={fraction}; raise it (e.g. "
                       "--config.task.holdout_fraction=0.3) or use a larger file")
    log(f"warning: {config.task.data_path} holds {available} held-out rows at "
        f"task.holdout_fraction={fraction}, fewer than task.default_eval_size={wanted}: "
        f"evaluating on {available} (set task.eval_size to require a number)")
    wanted = available
  return task.eval_examples(wanted)


def unscorable_references_warning(config, examples) -> str | None:
  """A warning when held-out reference answers are longer than the verifier reads
  (`task.max_answer_chars`, 512 when absent): an answer that long scores 0 unparsed, so those
  prompts can never be answered right (reasoning-gym's tower_of_hanoi: about half of its
  references). None when every reference fits.

  Args:
    config: the run's ConfigDict (reads task.max_answer_chars).
    examples: the held-out examples (`.answer` strings).
  """
  limit = config.task.get("max_answer_chars") or verifier_lib.VerifierConfig().max_answer_chars
  lengths = [len(str(e.answer)) for e in examples]
  too_long = sum(n > limit for n in lengths)
  if not too_long:
    return None
  return (f"warning: {too_long} of {len(lengths)} held-out reference answers are longer than "
          f"task.max_answer_chars={limit} (the longest {max(lengths)} characters): a correct "
          "answer that long scores 0 unparsed; set config.task.max_answer_chars above it in the "
          "config file")


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


def kernel_switches(config) -> dict[str, str]:
  """{"attention_impl", "remat_impl"} from config.model ("auto" when a config lacks them);
  `ModelConfig` checks the values."""
  return {name: config.model.get(name, "auto") for name in ("attention_impl", "remat_impl")}


def build_model(config, tokenizer, log, *,
                remat: bool | None = None) -> tuple[ModelConfig, Any, str]:
  """The policy to train: built-in (random init from the warm start's seed,
  `sft.effective_sft_seed`) or an HF checkpoint from config.model.checkpoint_path.

  Mixed precision for every source (as MaxText, verl's FSDP actor and TRL with bf16 compute):
  float32 master parameters (and so float32 Adam moments), computation in config.model.dtype.
  A bf16 HF checkpoint is upcast: trained in bf16, optax rounds p + u back to bf16, so an update
  of 1e-6 moves almost no weight and no RMSNorm scale (~1, bf16 spacing 2^-7).

  Returns:
    (model_config with param_dtype float32, dtype config.model.dtype and remat from
    `model_remat`; params, float32; export_dtype: the dtype to export the trained policy in,
    the checkpoint's own for HF, config.model.param_dtype for the built-in model).

  `remat`: `CheckedConfig.remat` when `check_config` has checked `config` (as `build_run`
  passes it): nothing is checked again. None (the default, a direct call): checks model.source
  (`check_model_source`) and works out remat (`model_remat`) here.
  """
  if remat is None:
    check_model_source(config)
    remat = model_remat(config)
  if config.model.source == "hf":
    from rlscale.model.hf_checkpoint import load_hf_checkpoint  # pylint: disable=g-import-not-at-top
    path = config.model.checkpoint_path
    model_config, params = load_hf_checkpoint(path)
    if config.model.get("moe_dispatch") is not None:
      model_config = model_config.replace(moe_dispatch=config.model.moe_dispatch)
    export_dtype = model_config.param_dtype
    params = jax.tree.map(lambda x: np.asarray(x, np.float32), params)
    log(f"model: loaded {model_config.model_type} checkpoint from {path} ({export_dtype} "
        f"weights, trained as float32, computing in {config.model.dtype})")
    return (model_config.replace(param_dtype="float32", dtype=config.model.dtype, remat=remat,
                                 **kernel_switches(config)), params, export_dtype)
  fields = {name: config.model[name] for name in MODEL_FIELDS}
  fields.update({name: config.model[name] for name in MOE_MODEL_FIELDS if name in config.model})
  if fields.get("num_experts"):
    fields["model_type"] = "qwen3_moe"  # exported as a HF Qwen3-MoE checkpoint
  export_dtype = fields.pop("param_dtype")
  model_config = ModelConfig(vocab_size=tokenizer.vocab_size, param_dtype="float32", remat=remat,
                             **fields, **kernel_switches(config))
  model_config.replace(param_dtype=export_dtype)  # validates model.param_dtype now
  params = init_params(model_config, jax.random.key(sft.effective_sft_seed(config)))
  log(f"model: built-in {model_config.num_params() / 1e6:.2f}M-parameter transformer")
  return model_config, params, export_dtype


def starting_point_label(config) -> str:
  """What RL starts from, in log lines: "warm start" when SFT runs (built-in model, sft.steps > 0),
  else "base checkpoint (no SFT)" (an HF checkpoint, or sft.steps = 0), as warm_start decides."""
  if config.model.source == "hf" or config.sft.steps == 0:
    return "base checkpoint (no SFT)"
  return "warm start"


def warm_start(config, workdir, model_config, params, tokenizer, task, log):
  """SFT on the task's reference answers (cached); skipped for HF checkpoints or sft.steps == 0."""
  if starting_point_label(config) != "warm start":
    return params, 0.0
  buckets = prompt_buckets(config.rollout.max_prompt_tokens)
  cache_dir = config.sft.cache_dir or os.path.join(workdir, SFT_DIR)
  # remat and its implementation change memory, not the numbers, and "auto" kernels are the
  # ones caches were made with before the switches existed; the MoE fields of a dense model
  # change nothing there: all left out so caches made before these fields existed stay valid.
  model_fields = {k: v for k, v in dataclasses.asdict(model_config).items()
                  if k not in ("remat", "remat_impl") and not (k == "attention_impl" and v == "auto")
                  and not (k in MOE_FIELDS and not model_config.num_experts)}
  sft_seed = sft.effective_sft_seed(config)
  key = sft.warm_start_key({"model": model_fields, "task": config.task.to_dict(),
                            "sft": sft.warm_start_sft_fields(config.sft.to_dict()),
                            "seed": sft_seed, "rollout": config.rollout.to_dict()})
  batch_size = config.sft.batch_size
  # SFT data: the training stream under the sft seed (RL's own task when the seeds agree; built
  # on a cache miss only).
  sft_task = functools.cache(
      lambda: task if sft_seed == config.seed else make_task(config.task, seed=sft_seed))

  def make_batch(step):
    # SFT reads its own stretch of the stream, far past what RL consumes first.
    examples = [sft_task().train_example(10**8 + step * batch_size + i) for i in range(batch_size)]
    prompt_tokens, prompt_mask = encode_prompts(
        tokenizer, [task.format_prompt(e) for e in examples], buckets[-1:])
    response_tokens, response_mask = encode_responses(
        tokenizer, [task.format_target(e) for e in examples], config.rollout.max_new_tokens)
    return {"tokens": np.concatenate([prompt_tokens, response_tokens], 1),
            "input_mask": np.concatenate([prompt_mask, response_mask], 1),
            "response_mask": response_mask}

  params, info = sft.supervised_warm_start(
      params, model_config, make_batch, steps=config.sft.steps,
      learning_rate=config.sft.learning_rate,
      cache_path=os.path.join(cache_dir, f"warm_start_{key}.msgpack"), log=log)
  return params, info["seconds"]


def mesh_from_config(config):
  """The Mesh of config.mesh over every device of every process; a config without a mesh
  section gets data parallelism over all of them (`mesh.mesh_config()`).

  Raises: ValueError (one line naming the field) for bad mesh sizes (`mesh.mesh_shape`)."""
  mesh_cfg = config.get("mesh")
  return mesh_lib.make_mesh(mesh_lib.mesh_config() if mesh_cfg is None else mesh_cfg)


def build_parts(mesh, config, rl, model_config, optimizer, critic_optimizer, host_state, *,
                sampling, buckets, tokenizer, measure_noise_scale) -> dict:
  """The run's device parts on `mesh` (`build_run`): the update step (whose state shardings,
  from the abstract state, place everything else), the state on the mesh, the sampler and the
  forward passes the config needs (reference / recomputed behaviour log-probs, PPO's values)."""
  update_fn = update_fn_lib.make_update_fn_from_checked(  # rl is check_config's
      model_config, rl, optimizer, mesh, critic_optimizer=critic_optimizer,
      measure_noise_scale=measure_noise_scale)
  shardings = update_fn.state_shardings
  logp_fn = None
  if update_lib.uses_ref_logp(rl) or rl.old_logp == "recompute":
    logp_fn = passes.make_logp_fn(model_config, rl.temperature, mesh, shardings.params,
                                  microbatches=rl.microbatches)
  value_fn = None
  if update_lib.uses_critic(rl):
    value_fn = passes.make_value_fn(model_config, mesh, shardings.critic_params,
                                    microbatches=rl.microbatches)
  layout = layout_lib.MeshLayout(mesh, shardings)
  return {
      "sampler": Sampler(model_config, config.rollout.max_new_tokens, sampling,
                         tuple(tokenizer.eos_ids), tokenizer.pad_id, mesh,
                         prompt_buckets=buckets, param_shardings=shardings.params,
                         rules=rules_for_mesh(mesh), host_threads=config.rollout.host_threads),
      "state": layout.place_state(host_state),
      "update_fn": update_fn, "logp_fn": logp_fn, "value_fn": value_fn, "layout": layout,
  }


def advantage_function(rl, mesh) -> Callable:
  """`compute_batch_advantages` for the resolved `rl`, jitted on global arrays of `mesh`: its
  outputs ([B] or [B, Tr]) come back with their rows over the mesh's batch axes, as the update
  step takes its batch."""
  rows = batch_sharding(mesh, 1)  # dimension 0 split, any further dimension replicated
  return jax.jit(functools.partial(compute_batch_advantages, rl), out_shardings=rows)


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
  hosts_lib.check_rl_config(rl, hosts_lib.current())
  check_model_source(config)
  rl = default_old_logp(config, rl)
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
  return CheckedConfig(
      rl=rl, mesh=mesh, batch_parallelism=parallelism, total_steps=total_steps,
      optimizer_args=optimizer_args, optimizer=optimizer, critic_optimizer=critic_optimizer,
      prompt_buckets=prompt_buckets(config.rollout.max_prompt_tokens), sampling=sampling,
      eval_sampling=eval_sampling(sampling, config.eval.get("sampling")), remat=remat)


def build_run(config, workdir: str, log: Callable[[str], None] = print,
              checked: CheckedConfig | None = None) -> Run:
  """Builds a `Run` (warm start included) from `config` and `checked`, what `check_config` (or
  `preflight.check_config`, as `loop.train_and_evaluate` does) made of it. With `checked` None
  (a direct call: a notebook, a test) it calls `check_config(config)` first, once. No config
  check runs twice: the model and update-step builders are handed the checked results.

  Every part lives on the mesh of config.mesh (`mesh_from_config`; `layout.MeshLayout`): the
  update step, the sampler, the forward passes, the state and the reference (`build_parts`)."""
  maybe_initialize_distributed(config.get("distributed", "auto"))
  num_devices = jax.local_device_count()
  # Everything that can be checked without the model is checked before the (slow) warm start.
  if checked is None:
    checked = check_config(config)
  rl, mesh, total_steps = checked.rl, checked.mesh, checked.total_steps
  optimizer_args, optimizer = checked.optimizer_args, checked.optimizer
  buckets, sampling, sampled_eval = checked.prompt_buckets, checked.sampling, checked.eval_sampling
  if rl.loss_agg_mode == "seq-mean-token-sum-norm" and rl.loss_agg_norm is None:
    # Dr. GRPO's constant defaults to the response limit Tr; fixed here because the update step
    # trains on each batch's bucketed response width (rl_step.rl_step), not on Tr. On a copy:
    # `checked` is the caller's.
    rl = ml_collections.ConfigDict(rl.to_dict())
    rl.loss_agg_norm = float(config.rollout.max_new_tokens)
  task = make_task(config.task, seed=config.seed)
  eval_examples = held_out_examples(config, task, log)
  warning = unscorable_references_warning(config, eval_examples)
  if warning:
    log(warning)
  t0 = time.perf_counter()
  tokenizer = tokenizers_lib.load_tokenizer(
      config.model.checkpoint_path if config.model.source == "hf" else "char",
      chat_format=task.chat_format)
  if config.model.source == "hf":
    log(tokenizers_lib.describe_prompts(tokenizer))
  model_config, params, export_dtype = build_model(config, tokenizer, log, remat=checked.remat)
  params, _ = warm_start(config, workdir, model_config, params, tokenizer, task, log)
  critic_params, critic_optimizer = None, checked.critic_optimizer
  if update_lib.uses_critic(rl):
    critic_params = critic_params_from_policy(params, model_config, jax.random.key(config.seed + 1))
  host_state = create_train_state(params, optimizer, critic_params=critic_params,
                                  critic_optimizer=critic_optimizer)
  measure_noise_scale = config.train.get("measure_noise_scale", False)
  parts = build_parts(mesh, config, rl, model_config, optimizer, critic_optimizer, host_state,
                      sampling=sampling, buckets=buckets, tokenizer=tokenizer,
                      measure_noise_scale=measure_noise_scale)
  sampler, state, update_fn, layout = parts["sampler"], parts["state"], parts["update_fn"], parts["layout"]
  logp_fn, value_fn = parts["logp_fn"], parts["value_fn"]
  warning = measure_noise_scale and update_lib.noise_scale_split_warning(rl)
  if warning:
    log(warning)
  ref_params = None
  if update_lib.uses_ref_logp(rl):
    ref_params = layout.copy_of(params)
  if model_config.dtype == "bfloat16" and rl.old_logp == "sampler":
    log("note: bfloat16 compute with rl.old_logp='sampler': the sampler's and the trainer's "
        "log-probs differ by rounding (watch train/sampler_trainer_k3); "
        "--config.rl.old_logp=recompute takes old_logp from a trainer forward")
  evaluator = Evaluator(task=task, tokenizer=tokenizer, sampler=sampler,
                        examples=eval_examples, prompt_buckets=buckets,
                        num_devices=layout.num_devices, pass_k=config.eval.pass_k,
                        sampling=sampled_eval)
  warm_start_seconds = time.perf_counter() - t0
  title = plots.run_title(
      algorithm=config.rl.algorithm, prompts_per_step=rl.prompts_per_step,
      group_size=rl.group_size, update_batch=optimizer_args["batch_size"],
      learning_rate=scaled_learning_rate(config.optim, optimizer_args["batch_size"]),
      base_learning_rate=config.optim.learning_rate, lr_scaling=config.optim.lr_scaling,
      reference_batch=config.optim.reference_batch, schedule=config.optim.schedule)
  processes = jax.process_count()
  where = f" on each of {processes} processes" if processes > 1 else ""
  if mesh.size > 1:
    where += f", mesh {dict(mesh.shape)}"
  log(f"setup: {num_devices} device(s){where}, {title}; {total_steps} steps; model load and warm start "
      f"{warm_start_seconds:.1f} s (not in the RL wall time)")
  return Run(rl_config=rl, model_config=model_config, tokenizer=tokenizer, task=task,
             sampler=sampler, evaluator=evaluator, state=state, update_fn=update_fn,
             ref_params=ref_params, logp_fn=logp_fn, value_fn=value_fn,
             prompt_buckets=buckets, num_devices=num_devices,
             warm_start_seconds=warm_start_seconds, total_steps=total_steps,
             advantage_fn=advantage_function(rl, mesh),
             export_dtype=export_dtype, log=log,
             title=title, smoke=bool(config.get("smoke", False)),
             starting_point=starting_point_label(config), layout=layout,
             routing_replay=routing_replay(config, model_config))
