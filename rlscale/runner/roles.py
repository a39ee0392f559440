"""What a run is made of, by role: the sampler draws responses, the task scores them, the trainer
turns a scored batch into a new train state, the evaluator measures the policy; `Run` holds
them with the run's static facts (`builders.build_run` makes one; `loop` drives it).

The trainer's parts are the functions of `rlscale.train` bound to the run's mesh: a reader follows
`run.trainer.update` into `train.update_fn` and the pure step of `train.update`, `logp` and
`values` into `train.passes`, `advantages` into `rl.advantages`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

from rlscale.model import ModelConfig
from rlscale.runner.hosts import Hosts


@dataclasses.dataclass
class Trainer:
  """The trainer role: a scored rollout batch -> its update batch -> a new TrainState, on the
  mesh of `layout` (`update_batch.make_update_batch`, then `update`).

  Attributes:
    layout: `layout.MeshLayout`: the mesh and the train state's shardings; places host rows and
      states on the mesh.
    update: fn(state, batch, key) -> (state, metrics): one RL update step on a batch of global
      arrays [B, ...] (`train.update_fn.make_update_fn`; the state is donated).
    advantages: fn(rewards [B], response_mask [B, Tr], *, old_logp, ref_logp, values) ->
      {"advantages": [B] or [B, Tr], "returns" for GAE}: `rl.advantages.compute_batch_advantages`
      for the run's rl config, jitted on the mesh (`builders.advantage_function`).
    logp: fn(params, batch) -> [B, Tr] float32 log-probs of the response tokens at rl.temperature
      (`train.passes.make_logp_fn`): ref_logp from `ref_params`, and old_logp from the current
      params when rl.old_logp == "recompute"; None when neither is needed.
    values: fn(critic_params, batch) -> [B, Tr] float32, the PPO critic's values before each
      response token (`train.passes.make_value_fn`); None without a critic.
    ref_params: the frozen reference policy (KL) on the mesh, or None.
    routing_replay: model.moe_routing_replay: the update and the recomputed old_logp replay the
      sampler's experts (`validate.routing_replay`).
  """
  layout: Any
  update: Callable
  advantages: Callable
  logp: Optional[Callable] = None
  values: Optional[Callable] = None
  ref_params: Any = None
  routing_replay: bool = False


@dataclasses.dataclass
class Run:
  """Everything the loop needs for one experiment (see `builders.build_run`).

  Roles: `sampler` (`sampler.Sampler` on the mesh: prompts -> Rollout), `task` (prompts and
  their scorer), `trainer` (`Trainer`), `evaluator` (`evaluate.Evaluator`: held-out metrics).
  `state` is the TrainState on the mesh (`trainer.layout`'s shardings); `hosts` is this
  process's place among the run's processes (`hosts.Hosts`), passed to every part that shares
  work between processes."""
  rl_config: Any
  model_config: ModelConfig
  tokenizer: Any
  task: Any
  sampler: Any
  trainer: Trainer
  evaluator: Any
  state: Any
  prompt_buckets: Sequence[int]
  num_devices: int  # this process's devices
  # Seconds from loading the tokenizer and model to the end of the warm start (SFT, or loading it
  # from the cache) in this process; not part of the RL wall time.
  warm_start_seconds: float
  total_steps: int  # RL steps of the run (train.total_steps, or from train.total_samples)
  hosts: Hosts = Hosts()
  export_dtype: str = "float32"  # dtype of the exported policy (see build_model)
  log: Callable[[str], None] = print
  title: str = ""  # what the run is (plots.run_title): algorithm, P x G = B, lr and its rule
  starting_point: str = "warm start"  # starting_point_label: what RL starts from, for logs
  smoke: bool = False  # config.smoke: a smoke variant, which checks the pipeline, not learning

  @property
  def layout(self):
    """Where the run's arrays live: `trainer.layout`."""
    return self.trainer.layout

  @property
  def export_config(self) -> ModelConfig:
    """The policy's config for export (`save_hf_checkpoint`): parameters stored in
    export_dtype, the source's dtype, while training keeps float32 master weights."""
    return self.model_config.replace(param_dtype=self.export_dtype)
