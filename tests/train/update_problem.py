"""A small, deterministic RL update problem shared by the update-step tests and their subprocess
workers (simulated devices, jax.distributed): a tiny policy, a left-padded rollout batch with
responses of varied lengths, old_logp (and PPO old values) from the same parameters, and the
update step jitted over a mesh (one device: {data: 1})."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import ml_collections
import numpy as np

from experiments.configs.default import get_config
from rlscale.model.config import ModelConfig
from rlscale.model.transformer import init_params
from rlscale.parallel import data as data_lib
from rlscale.parallel import mesh as mesh_lib
from rlscale.parallel import shardings as shardings_lib
from rlscale.rl.advantages import compute_batch_advantages
from rlscale.rl.presets import resolve_rl_config
from rlscale.train import optimizer as optimizer_lib
from rlscale.train import passes
from rlscale.train import state as state_lib
from rlscale.train import update as update_lib
from rlscale.train import update_fn

MODEL = ModelConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=4,
                    num_kv_heads=2, head_dim=8)
PROMPT_LEN, RESPONSE_LEN = 6, 5


def rl_config(algorithm: str = "grpo", *, prompts: int = 4, group: int = 4, **fields) -> ml_collections.ConfigDict:
  cfg = get_config().rl
  cfg.algorithm, cfg.prompts_per_step, cfg.group_size = algorithm, prompts, group
  for key, value in fields.items():
    cfg[key] = value
  return resolve_rl_config(cfg)


def optim_config(**fields) -> ml_collections.ConfigDict:
  """Adam at lr 1e-3 with eps 1e-4: Adam divides each coordinate's gradient by its own magnitude,
  so float-rounding noise in coordinates whose gradient is near eps would be blown up to the
  order of lr; a larger eps keeps parameter comparisons a test of the gradients."""
  cfg = get_config().optim
  cfg.learning_rate, cfg.eps, cfg.reference_batch = 1e-3, 1e-4, 16
  for key, value in fields.items():
    cfg[key] = value
  return cfg


def rollout_batch(batch_size: int, seed: int = 0) -> dict[str, np.ndarray]:
  """Host arrays: left-padded prompts, responses of 1..Tr tokens, rewards in {0, 1}."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(3, MODEL.vocab_size, (batch_size, PROMPT_LEN + RESPONSE_LEN)).astype(np.int32)
  prompt_lens = rng.integers(2, PROMPT_LEN + 1, (batch_size, 1))
  prompt_mask = (np.arange(PROMPT_LEN)[None] >= PROMPT_LEN - prompt_lens).astype(np.int32)
  response_mask = (np.arange(RESPONSE_LEN)[None] < rng.integers(1, RESPONSE_LEN + 1, (batch_size, 1)))
  response_mask = response_mask.astype(np.int32)
  tokens[:, :PROMPT_LEN] *= prompt_mask  # pad id 0 on the left
  tokens[:, PROMPT_LEN:] *= response_mask
  return {"tokens": tokens, "input_mask": np.concatenate([prompt_mask, response_mask], 1),
          "response_mask": response_mask,
          "rewards": rng.integers(0, 2, batch_size).astype(np.float32)}


def one_device_mesh():
  """The mesh {data: 1} over the first device: the one-device reference layout."""
  return mesh_lib.make_mesh(mesh_lib.mesh_config(), jax.devices()[:1])


def data_mesh(count: int):
  """The mesh {data: count} over the first `count` devices."""
  return mesh_lib.make_mesh(mesh_lib.mesh_config(), jax.devices()[:count])


@functools.lru_cache(maxsize=None)
def _logp_fn(temperature, mesh):
  return passes.make_logp_fn(MODEL, temperature, mesh, None)


@functools.lru_cache(maxsize=None)
def _value_fn(mesh):
  return passes.make_value_fn(MODEL, mesh, None)


def initial_params(rl, seed: int = 0):
  """(policy params, critic params or None) for `rl`; the critic copies the policy and gets a
  nonzero value head so the clipped value loss has something to clip."""
  params = init_params(MODEL, jax.random.key(seed))
  if not update_lib.uses_critic(rl):
    return params, None
  critic = state_lib.critic_params_from_policy(params, MODEL, jax.random.key(seed + 1))
  critic["value_head"]["kernel"] = critic["value_head"]["kernel"] + 0.1
  return params, critic


def host_batch(rl, params, critic, *, mesh=None, seed: int = 0, ref_shift: float = 0.3):
  """The full rollout batch as host arrays [B, ...]: old_logp (and old values) from `params`
  (and `critic`) computed on `mesh` (default `one_device_mesh()`), ref_logp = old_logp -
  ref_shift, advantages (and returns) from `compute_batch_advantages`."""
  mesh = mesh or one_device_mesh()
  host = rollout_batch(rl.prompts_per_step * rl.group_size, seed)
  rewards = host.pop("rewards")
  old_logp = np.asarray(_logp_fn(rl.temperature, mesh)(params, host))
  host["old_logp"] = old_logp
  host["ref_logp"] = (old_logp - ref_shift) * host["response_mask"]
  values = None
  if critic is not None:
    host["old_values"] = values = np.asarray(_value_fn(mesh)(critic, host))
  host.update({k: np.asarray(v) for k, v in compute_batch_advantages(
      rl, rewards, host["response_mask"], old_logp=old_logp, ref_logp=host["ref_logp"],
      values=values).items()})
  return host


def make_optimizer(rl, optim=None):
  return optimizer_lib.make_optimizer(optim or optim_config(),
                                      **update_lib.optimizer_args(rl, rl_steps=4))


def placed_state(fn, params, tx, critic=None):
  """A fresh TrainState placed on `fn`'s mesh by its state shardings, from host copies (the step
  donates its state: `params` stay usable)."""
  state = jax.device_get(state_lib.create_train_state(params, tx, critic_params=critic))
  return shardings_lib.put_on_mesh(state, fn.state_shardings)


def setup(rl, optim=None, *, mesh=None, seed: int = 0, ref_shift: float = 0.3, model=None,
          **fn_kwargs):
  """(update_fn, state on the mesh, host batch [B, ...]) for `rl` on `mesh` (default
  `one_device_mesh()`); the batch's old_logp is computed on the same mesh."""
  mesh = mesh or one_device_mesh()
  tx = make_optimizer(rl, optim)
  params, critic = initial_params(rl, seed)
  host = host_batch(rl, params, critic, mesh=mesh, seed=seed, ref_shift=ref_shift)
  fn = update_fn.make_update_fn(model or MODEL, rl, tx, mesh, **fn_kwargs)
  return fn, placed_state(fn, params, tx, critic), host


class Run(NamedTuple):
  """The update function, its latest state and batch, host params after the last step, and the
  metrics of every step (host numpy scalars)."""
  fn: object
  state: object
  batch: dict
  params: dict
  critic_params: object
  metrics: list


def run_updates(rl, steps: int = 2, *, mesh=None, optim=None, batch_mesh=None) -> Run:
  """`steps` update-step calls on the problem's batch (a fresh key each) on `mesh` (default
  `one_device_mesh()`); the batch's old_logp computed on `batch_mesh` (default: one device, so
  every mesh trains on the same numbers)."""
  mesh = mesh or one_device_mesh()
  tx = make_optimizer(rl, optim)
  params, critic = initial_params(rl)
  host = host_batch(rl, params, critic, mesh=batch_mesh)
  fn = update_fn.make_update_fn(MODEL, rl, tx, mesh)
  state = placed_state(fn, params, tx, critic)
  batch = data_lib.global_batch(host, mesh)
  history = []
  for i in range(steps):
    state, metrics = fn(state, batch, jax.random.key(100 + i))
    history.append({k: np.asarray(v) for k, v in jax.device_get(metrics).items()})
  host_state = jax.device_get(state)
  return Run(fn, state, host, host_state.params, host_state.critic_params, history)
