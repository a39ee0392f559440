"""Presets fill unset fields; validation names the bad field."""

import ml_collections
import pytest

from experiments.configs.default import get_config
from rlscale.rl.presets import PRESETS, resolve_rl_config, validate_rl_config


def _rl(**fields):
  cfg = get_config().rl
  for key, value in fields.items():
    cfg[key] = value
  return cfg


@pytest.mark.parametrize("algorithm", sorted(PRESETS))
def test_every_preset_resolves_and_validates(algorithm):
  resolved = resolve_rl_config(_rl(algorithm=algorithm))
  validate_rl_config(resolved, num_devices=1)
  for field in PRESETS[algorithm]:
    assert field in resolved


def test_preset_values_and_user_override_wins():
  dapo = resolve_rl_config(_rl(algorithm="dapo"))
  assert (dapo.advantage, dapo.loss_agg_mode, dapo.clip_eps_low, dapo.clip_eps_high) == (
      "grpo", "token-mean", 0.2, 0.28)
  assert dapo.dynamic_sampling and dapo.overlong_buffer_frac == 0.2
  # Overlong filtering stays off in DAPO: its best runs used the soft punishment alone.
  assert dapo.mask_truncated is False
  assert resolve_rl_config(_rl(algorithm="dapo", mask_truncated=True)).mask_truncated is True
  ppo = resolve_rl_config(_rl(algorithm="ppo", lam=1.0))
  assert (ppo.advantage, ppo.lam, ppo.gamma, ppo.value_clip_eps, ppo.vf_coef) == ("gae", 1.0, 1.0, 0.2, 0.5)
  assert resolve_rl_config(_rl(algorithm="dr_grpo")).loss_agg_mode == "seq-mean-token-sum-norm"
  # default.py sets kl_coef = 0.0 explicitly, which beats GRPO's preset 0.04.
  assert resolve_rl_config(_rl(algorithm="grpo")).kl_coef == 0.0
  bare = ml_collections.ConfigDict(dict(algorithm="grpo"))
  assert resolve_rl_config(bare).kl_coef == 0.04


def test_temperature_follows_rollout():
  config = get_config()
  config.rollout.temperature = 0.7
  assert resolve_rl_config(config.rl).temperature == 0.7


@pytest.mark.parametrize("fields, message", [
    (dict(algorithm="ppo2"), r"rl.algorithm='ppo2' is not one of \['dapo', 'dr_grpo', 'grpo'"),
    (dict(advantage="nope"), r"rl.advantage='nope' is not registered; registered: \["),
    (dict(policy_loss="nope"), r"rl.policy_loss='nope' is not registered"),
    (dict(kl_estimator="k9"), r"rl.kl_estimator='k9' is not registered"),
    (dict(loss_agg_mode="sum"), r"rl.loss_agg_mode='sum' is not one of"),
    (dict(group_size=1), r"rl.group_size must be >= 2 for the group-relative advantage 'grpo'"),
    (dict(microbatches=3), r"must be divisible by the mesh's data x fsdp \(1\) x rl.minibatches \(1\) x rl.microbatches \(3\)"),
    (dict(microbatches=0), r"rl.microbatches must be an int >= 1, or unset to choose per batch shape"),
    (dict(kl_mode="both"), r"rl.kl_mode='both' is not one of"),
    (dict(dual_clip_c=0.5), r"rl.dual_clip_c must be > 1"),
    (dict(lam=1.5), r"rl.lam must be in \[0, 1\]"),
    (dict(temperature=0.0), r"rl.temperature must be > 0"),
    (dict(batch_size=7), r"rl.batch_size=7 must equal"),
    (dict(old_logp="both"), r"rl.old_logp='both' is not one of \['sampler', 'recompute'\]"),
])
def test_validation_errors_name_the_field(fields, message):
  with pytest.raises(ValueError, match=message):
    validate_rl_config(resolve_rl_config(_rl(**fields)), num_devices=1)


def test_device_count_divisibility():
  cfg = resolve_rl_config(_rl(prompts_per_step=3, group_size=2))
  validate_rl_config(cfg, num_devices=2)
  with pytest.raises(ValueError, match=r"data x fsdp \(4\)"):
    validate_rl_config(cfg, num_devices=4)
  # B = 3 x 2 = 6 responses over 4 devices x 1 minibatch x unset microbatches: the message says
  # what the unset (automatic) choice counts as, not "rl.microbatches (None)".
  with pytest.raises(ValueError) as error:
    validate_rl_config(cfg, num_devices=4)
  assert str(error.value) == (
      "rl.batch_size=6 (prompts_per_step * group_size) must be divisible by the mesh's data x "
      "fsdp (4) x rl.minibatches (1) x rl.microbatches (unset: chosen to divide the rows, 1 here) "
      "= 4")


def test_reinforce_pp_and_ppo_allow_single_sample():
  for algorithm in ("reinforce_pp", "ppo"):
    validate_rl_config(resolve_rl_config(_rl(algorithm=algorithm, group_size=1)), num_devices=1)


def test_mask_truncated_must_be_a_bool():
  fields = {**resolve_rl_config(_rl(algorithm="dapo")).to_dict(), "mask_truncated": "yes"}
  with pytest.raises(ValueError, match="rl.mask_truncated must be True or False, got 'yes'"):
    validate_rl_config(ml_collections.ConfigDict(fields), num_devices=1)
