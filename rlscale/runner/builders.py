"""A checked config -> the objects one run needs (`roles.Run`: model, tokenizer, task, sampler,
trainer, evaluator, state). Builds only: every config check is `validate.check_config`'s.

Kept apart from the loop so Colab users can build a run, poke at its parts, and call the loop.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from typing import Any, Callable

import jax
import numpy as np

from rlscale import tokenizers as tokenizers_lib
from rlscale.model import ModelConfig, init_params
from rlscale.model.config import MOE_FIELDS
from rlscale.packing.layout import packed_update_fn
from rlscale.parallel.data import batch_sharding
from rlscale.parallel.rules import rules_for_mesh
from rlscale.rl.advantages import compute_batch_advantages
from rlscale.runner import layout as layout_lib
from rlscale.runner import plots
from rlscale.runner import sft
from rlscale.runner.batching import encode_prompts, encode_responses
from rlscale.runner import hosts as hosts_lib
from rlscale.runner import validate
from rlscale.runner.evaluate import Evaluator
from rlscale.runner.roles import Run, Trainer
from rlscale.sampler.sampler import Sampler
from rlscale.tasks import make_task
from rlscale.tasks import verifier as verifier_lib
from rlscale.train import passes
from rlscale.train import update as update_lib
from rlscale.train import update_fn as update_fn_lib
from rlscale.train.optimizer import scaled_learning_rate
from rlscale.train.state import create_train_state, critic_params_from_policy

SFT_DIR = "sft"  # the warm-start cache inside a workdir when sft.cache_dir is unset
DEFAULT_EVAL_SIZE = 256  # held-out prompts when task.eval_size and task.default_eval_size are None
MODEL_FIELDS = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                "head_dim", "param_dtype", "dtype")
# The built-in model's mixture-of-experts fields (`ModelConfig`'s HF names), read when the model
# section has them (experiments/configs/moe.py); absent, the model is dense.
MOE_MODEL_FIELDS = MOE_FIELDS



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
    validate.check_model_source(config)
    remat = validate.model_remat(config)
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
  buckets = validate.prompt_buckets(config.rollout.max_prompt_tokens)
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



def build_trainer(checked: validate.CheckedConfig, model_config: ModelConfig, params, *,
                  measure_noise_scale: bool = False) -> Trainer:
  """The trainer role on `checked.mesh`: the update step (whose state shardings, from the
  abstract state, place everything else), the forward passes the config needs (reference /
  recomputed behaviour log-probs, PPO's values), the jitted advantages and the frozen
  reference (a copy of `params`, the warm start, when the KL is on)."""
  rl, mesh = checked.rl, checked.mesh
  update = update_fn_lib.make_update_fn_from_checked(  # rl is check_config's
      model_config, rl, checked.optimizer, mesh, critic_optimizer=checked.critic_optimizer,
      measure_noise_scale=measure_noise_scale)
  if checked.packing is not None:
    update = packed_update_fn(update, checked.packing, rl, parts=checked.batch_parallelism,
                              measure_noise_scale=measure_noise_scale)
  shardings = update.state_shardings
  layout = layout_lib.MeshLayout(mesh, shardings)
  trainer = Trainer(layout=layout, update=update, advantages=advantage_function(rl, mesh),
                    routing_replay=checked.routing_replay)
  if update_lib.uses_ref_logp(rl) or rl.old_logp == "recompute":
    trainer.logp = passes.make_logp_fn(model_config, rl.temperature, mesh, shardings.params,
                                       microbatches=rl.microbatches, packing=checked.packing)
  if update_lib.uses_ref_logp(rl):
    trainer.ref_params = layout.copy_of(params)
  if update_lib.uses_critic(rl):
    trainer.values = passes.make_value_fn(model_config, mesh, shardings.critic_params,
                                          microbatches=rl.microbatches, packing=checked.packing)
  return trainer


def advantage_function(rl, mesh) -> Callable:
  """`compute_batch_advantages` for the resolved `rl`, jitted on global arrays of `mesh`: its
  outputs ([B] or [B, Tr]) come back with their rows over the mesh's batch axes, as the update
  step takes its batch."""
  rows = batch_sharding(mesh, 1)  # dimension 0 split, any further dimension replicated
  return jax.jit(functools.partial(compute_batch_advantages, rl), out_shardings=rows)


def build_run(config, workdir: str, log: Callable[[str], None] = print,
              checked: validate.CheckedConfig | None = None) -> Run:
  """Builds a `roles.Run` (warm start included) from `config` and `checked`, what
  `validate.check_config` (or `preflight.check_config`, as `loop.train_and_evaluate` does) made
  of it. With `checked` None (a direct call: a notebook, a test) it calls
  `validate.check_config(config)` first, once; nothing here checks the config again.

  Every part lives on the mesh of config.mesh (`validate.mesh_from_config`): the sampler, the
  trainer (`build_trainer`) and the state."""
  maybe_initialize_distributed(config.get("distributed", "auto"))
  num_devices = jax.local_device_count()
  # Everything that can be checked without the model is checked before the (slow) warm start.
  if checked is None:
    checked = validate.check_config(config)
  rl, mesh, buckets = checked.rl, checked.mesh, checked.prompt_buckets
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
  critic_params = None
  if update_lib.uses_critic(rl):
    critic_params = critic_params_from_policy(params, model_config, jax.random.key(config.seed + 1))
  measure_noise_scale = config.train.get("measure_noise_scale", False)
  trainer = build_trainer(checked, model_config, params, measure_noise_scale=measure_noise_scale)
  state = trainer.layout.place_state(create_train_state(
      params, checked.optimizer, critic_params=critic_params,
      critic_optimizer=checked.critic_optimizer))
  sampler = Sampler(model_config, config.rollout.max_new_tokens, checked.sampling,
                    tuple(tokenizer.eos_ids), tokenizer.pad_id, mesh, prompt_buckets=buckets,
                    param_shardings=trainer.layout.state_shardings.params,
                    rules=rules_for_mesh(mesh), host_threads=config.rollout.host_threads)
  warning = measure_noise_scale and update_lib.noise_scale_split_warning(rl)
  if warning:
    log(warning)
  if model_config.dtype == "bfloat16" and rl.old_logp == "sampler":
    log("note: bfloat16 compute with rl.old_logp='sampler': the sampler's and the trainer's "
        "log-probs differ by rounding (watch train/sampler_trainer_k3); "
        "--config.rl.old_logp=recompute takes old_logp from a trainer forward")
  hosts = hosts_lib.current()
  evaluator = Evaluator(task=task, tokenizer=tokenizer, sampler=sampler,
                        examples=eval_examples, prompt_buckets=buckets,
                        num_devices=trainer.layout.num_devices, pass_k=config.eval.pass_k,
                        sampling=checked.eval_sampling, hosts=hosts)
  warm_start_seconds = time.perf_counter() - t0
  update_batch = checked.optimizer_args["batch_size"]
  title = plots.run_title(
      algorithm=config.rl.algorithm, prompts_per_step=rl.prompts_per_step,
      group_size=rl.group_size, update_batch=update_batch,
      learning_rate=scaled_learning_rate(config.optim, update_batch),
      base_learning_rate=config.optim.learning_rate, lr_scaling=config.optim.lr_scaling,
      reference_batch=config.optim.reference_batch, schedule=config.optim.schedule)
  where = f" on each of {hosts.count} processes" if hosts.count > 1 else ""
  if mesh.size > 1:
    where += f", mesh {dict(mesh.shape)}"
  log(f"setup: {num_devices} device(s){where}, {title}; {checked.total_steps} steps; model load "
      f"and warm start {warm_start_seconds:.1f} s (not in the RL wall time)")
  return Run(rl_config=rl, model_config=model_config, tokenizer=tokenizer, task=task,
             sampler=sampler, trainer=trainer, evaluator=evaluator, state=state,
             prompt_buckets=buckets, num_devices=num_devices,
             warm_start_seconds=warm_start_seconds, total_steps=checked.total_steps,
             hosts=hosts, export_dtype=export_dtype, log=log, title=title,
             smoke=bool(config.get("smoke", False)), starting_point=starting_point_label(config))
