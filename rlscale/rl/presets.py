"""Algorithm presets (`rl.algorithm`) and validation of the `rl` config section.

A preset is a set of defaults for the algorithm fields of `rl`; `resolve_rl_config` fills every field
that the config leaves unset (missing or None) from the preset of `rl.algorithm`, so a user picks an
algorithm by name and still overrides any single field (`--config.rl.clip_eps_high=0.3`). A field set
in the config file always wins: e.g. experiments/configs/default.py sets kl_coef = 0.0, so its GRPO
runs without the preset's KL penalty.

| preset       | advantage    | loss_agg_mode           | clip eps (low, high) | KL              | other |
|--------------|--------------|-------------------------|----------------------|-----------------|-------|
| grpo         | grpo         | seq-mean-token-mean     | 0.2, 0.2             | k3 loss, 0.04   |       |
| dr_grpo      | dr_grpo      | seq-mean-token-sum-norm | 0.2, 0.2             | none            |       |
| dapo         | grpo         | token-mean              | 0.2, 0.28            | none            | dynamic sampling, overlong shaping (buffer 0.2 of L_max) |
| rloo         | rloo         | token-mean              | 0.2, 0.2             | k1 reward, 0    |       |
| reinforce_pp | reinforce_pp | token-mean              | 0.2, 0.2             | k1 reward, 0    |       |
| ppo          | gae          | token-mean              | 0.2, 0.2             | k1 reward, 0    | critic: vf_coef 0.5, value_clip_eps 0.2, gamma 1, lam 0.95, whitened advantages |

Overlong filtering (`rl.mask_truncated`: responses that hit the length limit without an EOS get
loss mask 0, TRL's `mask_truncated_completions`) is off in every preset, DAPO's included: the DAPO
paper proposes it and soft overlong punishment as two ways to stop truncated samples from adding
reward noise, and its authors' verl recipe notes that most of the paper's runs, the
best-performing one included, used the punishment (the preset's overlong_buffer_frac = 0.2)
without the filtering, since both address learning from the longest outputs. Turn it on with
`--config.rl.mask_truncated=True`.

`rl.old_logp` says where the behaviour policy's log-probabilities (the ratio's denominator) come
from: "sampler" (default) takes the sampler's, "recompute" runs a trainer forward with the current
parameters before the update, as verl and TRL do. In float32 the two agree to ~2e-6 (k3), so the
default saves that extra forward pass (about a third of a training step); in bfloat16 the
sampler's KV-cached decode and the trainer's full forward round differently (1.2% of tokens with
|ratio - 1| > 1e-2 on a random 4-layer model), which clips "on-policy" updates spuriously: use
"recompute" there. Either way the mismatch is logged every step (train/sampler_trainer_k3).

References: GRPO (Shao et al. 2024), Dr. GRPO (Liu et al. 2025), DAPO (Yu et al. 2025), RLOO
(Ahmadian et al. 2024), REINFORCE++ (Hu 2025), PPO (Schulman et al. 2017; Ouyang et al. 2022).
"""

from __future__ import annotations

import ml_collections

from rlscale.rl import aggregation
from rlscale.rl.advantages import ADVANTAGE_ESTIMATORS
from rlscale.rl.kl import KL_ESTIMATORS
from rlscale.rl.losses import POLICY_LOSSES
from rlscale.rl.off_policy import resolve_off_policy, validate_off_policy

# Defaults shared by every preset; each preset below overrides some of them.
_COMMON = dict(
    policy_loss="ppo_clip",
    loss_agg_mode="token-mean",
    # None = the response length limit Tr (only used by seq-mean-token-sum-norm).
    loss_agg_norm=None,
    clip_eps_low=0.2,
    clip_eps_high=0.2,
    # None = dual-clip off.
    dual_clip_c=None,
    kl_coef=0.0,
    kl_estimator="k3",
    kl_mode="loss",
    entropy_coef=0.0,
    dynamic_sampling=False,
    # Overlong filtering (DAPO; TRL mask_truncated_completions): off, see the module docstring.
    mask_truncated=False,
    # Behaviour log-probs: "sampler" or "recompute" (a trainer forward); see the module docstring.
    old_logp="sampler",
    overlong_buffer_frac=0.0,
    overlong_penalty_factor=1.0,
    whiten_advantages=False,
    vf_coef=0.5,
    value_clip_eps=0.2,
    gamma=1.0,
    lam=0.95,
    temperature=1.0,
)

PRESETS: dict[str, dict] = {
    "grpo": dict(_COMMON, advantage="grpo", loss_agg_mode="seq-mean-token-mean", kl_coef=0.04),
    "dr_grpo": dict(_COMMON, advantage="dr_grpo", loss_agg_mode="seq-mean-token-sum-norm"),
    "dapo": dict(_COMMON, advantage="grpo", clip_eps_high=0.28, dynamic_sampling=True,
                 overlong_buffer_frac=0.2),
    "rloo": dict(_COMMON, advantage="rloo", kl_mode="reward", kl_estimator="k1"),
    "reinforce_pp": dict(_COMMON, advantage="reinforce_pp", kl_mode="reward", kl_estimator="k1"),
    "ppo": dict(_COMMON, advantage="gae", kl_mode="reward", kl_estimator="k1",
                whiten_advantages=True),
}

KL_MODES = ("loss", "reward")
OLD_LOGP_SOURCES = ("sampler", "recompute")


def resolve_rl_config(rl_cfg: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A copy of `rl_cfg` with every unset (missing or None) preset field filled from
  PRESETS[rl_cfg.algorithm]. Fields the preset leaves None (loss_agg_norm, dual_clip_c) stay None.
  The asynchronous-rollout fields (max_off_policy_steps, off_policy_correction, tis_cap,
  decoupled_weight_cap) are filled by `off_policy.resolve_off_policy`: a correction, the default
  with rl.max_off_policy_steps >= 1, makes an unset old_logp "recompute".

  Raises:
    ValueError: when rl.algorithm is missing or not a preset (listing the presets).
  """
  algorithm = rl_cfg.get("algorithm")
  if algorithm not in PRESETS:
    raise ValueError(f"rl.algorithm={algorithm!r} is not one of {sorted(PRESETS)}")
  resolved = ml_collections.ConfigDict(rl_cfg.to_dict())
  for field, value in PRESETS[algorithm].items():
    if resolved.get(field) is None:
      # Assigning through the dict keeps a None placeholder's declared type out of the way.
      resolved[field] = value
  resolve_off_policy(resolved, rl_cfg)
  return resolved


def _require(condition: bool, message: str) -> None:
  if not condition:
    raise ValueError(message)


def _check_positive_int(rl_cfg, field: str) -> None:
  value = rl_cfg.get(field)
  _require(isinstance(value, int) and value >= 1, f"rl.{field} must be an int >= 1, got {value!r}")


def validate_rl_config(rl_cfg: ml_collections.ConfigDict, *, num_devices: int) -> None:
  """Checks a resolved `rl` section; raises ValueError naming the first bad field.

  Checks: registered names (advantage, policy_loss, kl_estimator) and loss_agg_mode / kl_mode;
  positive prompts_per_step, group_size, epochs, minibatches, microbatches (or None: chosen per
  batch shape by `rlscale.train.update.microbatch_count`); group_size >= 2 for
  group-relative estimators and dynamic sampling; batch_size == prompts_per_step * group_size and
  divisible by num_devices (the parts of the mesh's batch axes, data x fsdp) * minibatches *
  microbatches; ranges of clip eps, dual_clip_c, kl_coef, entropy_coef, gamma, lam,
  value_clip_eps, vf_coef, temperature, overlong_buffer_frac; mask_truncated is a bool; old_logp is
  one of OLD_LOGP_SOURCES; the asynchronous-rollout fields (`off_policy.validate_off_policy`).
  """
  _require(rl_cfg.get("algorithm") in PRESETS,
           f"rl.algorithm={rl_cfg.get('algorithm')!r} is not one of {sorted(PRESETS)}")
  estimator = ADVANTAGE_ESTIMATORS.get(rl_cfg.advantage)
  POLICY_LOSSES.get(rl_cfg.policy_loss)
  KL_ESTIMATORS.get(rl_cfg.kl_estimator)
  if rl_cfg.loss_agg_mode == "seq-mean-token-sum-norm" and rl_cfg.loss_agg_norm is None:
    aggregation.check_mode(rl_cfg.loss_agg_mode, 1.0)  # None means "use Tr", known later
  else:
    aggregation.check_mode(rl_cfg.loss_agg_mode, rl_cfg.loss_agg_norm)
  _require(rl_cfg.kl_mode in KL_MODES, f"rl.kl_mode={rl_cfg.kl_mode!r} is not one of {list(KL_MODES)}")
  for field in ("prompts_per_step", "group_size", "epochs", "minibatches"):
    _check_positive_int(rl_cfg, field)
  microbatches = rl_cfg.get("microbatches")  # None: chosen per batch shape (update.microbatch_count)
  _require(microbatches is None or (isinstance(microbatches, int) and microbatches >= 1),
           f"rl.microbatches must be an int >= 1, or unset to choose per batch shape (on a CPU "
           f"slices of >= 1,024 tokens), got {microbatches!r}")
  group_size = rl_cfg.group_size
  _require(not estimator.group_relative or group_size >= 2,
           f"rl.group_size must be >= 2 for the group-relative advantage {rl_cfg.advantage!r}, "
           f"got {group_size}")
  _require(not rl_cfg.dynamic_sampling or group_size >= 2,
           f"rl.dynamic_sampling needs rl.group_size >= 2, got {group_size}")
  batch_size = rl_cfg.prompts_per_step * group_size
  _require(rl_cfg.get("batch_size", batch_size) == batch_size,
           f"rl.batch_size={rl_cfg.get('batch_size')} must equal rl.prompts_per_step * "
           f"rl.group_size = {batch_size}")
  _require(isinstance(num_devices, int) and num_devices >= 1,
           f"num_devices must be an int >= 1, got {num_devices!r}")
  split = num_devices * rl_cfg.minibatches * (rl_cfg.get("microbatches") or 1)
  # Unset microbatches are chosen among the divisors of the minibatch's rows, so they count as 1.
  microbatches = (f"rl.microbatches ({rl_cfg.microbatches})" if rl_cfg.get("microbatches")
                  else "rl.microbatches (unset: chosen to divide the rows, 1 here)")
  _require(batch_size % split == 0,
           f"rl.batch_size={batch_size} (prompts_per_step * group_size) must be divisible by "
           f"the mesh's data x fsdp ({num_devices}) x rl.minibatches ({rl_cfg.minibatches}) x "
           f"{microbatches} = {split}")
  _require(rl_cfg.clip_eps_low >= 0 and rl_cfg.clip_eps_high >= 0,
           f"rl.clip_eps_low / rl.clip_eps_high must be >= 0, got {rl_cfg.clip_eps_low}, "
           f"{rl_cfg.clip_eps_high}")
  _require(rl_cfg.clip_eps_low < 1, f"rl.clip_eps_low must be < 1, got {rl_cfg.clip_eps_low}")
  _require(not rl_cfg.dual_clip_c or rl_cfg.dual_clip_c > 1,
           f"rl.dual_clip_c must be > 1 (or None/0 for off), got {rl_cfg.dual_clip_c}")
  _require(rl_cfg.kl_coef >= 0, f"rl.kl_coef must be >= 0, got {rl_cfg.kl_coef}")
  _require(rl_cfg.entropy_coef >= 0, f"rl.entropy_coef must be >= 0, got {rl_cfg.entropy_coef}")
  for field in ("gamma", "lam"):
    _require(0 <= rl_cfg[field] <= 1, f"rl.{field} must be in [0, 1], got {rl_cfg[field]}")
  _require(not rl_cfg.value_clip_eps or rl_cfg.value_clip_eps > 0,
           f"rl.value_clip_eps must be > 0 (or 0 for no clipping), got {rl_cfg.value_clip_eps}")
  _require(rl_cfg.vf_coef > 0, f"rl.vf_coef must be > 0, got {rl_cfg.vf_coef}")
  _require(rl_cfg.temperature > 0, f"rl.temperature must be > 0 (the sampling temperature the "
           f"log-probabilities are taken at), got {rl_cfg.temperature}")
  _require(rl_cfg.old_logp in OLD_LOGP_SOURCES,
           f"rl.old_logp={rl_cfg.old_logp!r} is not one of {list(OLD_LOGP_SOURCES)}")
  _require(isinstance(rl_cfg.mask_truncated, bool),
           f"rl.mask_truncated must be True or False, got {rl_cfg.mask_truncated!r}")
  _require(0 <= rl_cfg.overlong_buffer_frac < 1,
           f"rl.overlong_buffer_frac must be in [0, 1), got {rl_cfg.overlong_buffer_frac}")
  validate_off_policy(rl_cfg)
