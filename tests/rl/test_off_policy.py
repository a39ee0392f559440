"""Off-policy corrections against values worked out by hand, their config fields and checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.rl import losses, off_policy
from rlscale.rl.presets import resolve_rl_config, validate_rl_config
from rlscale.train import update as update_lib
from tests.runner.runner_configs import tiny_config


def _logs(*probabilities):
  return jnp.log(jnp.asarray([probabilities], jnp.float32))


# pi_old / pi_behav per token: 0.5 / 0.25 = 2, 0.3 / 0.6 = 0.5, 0.2 / 0.05 = 4.
OLD = _logs(0.5, 0.3, 0.2)
BEHAVIOUR = _logs(0.25, 0.6, 0.05)
MASK = jnp.ones((1, 3), jnp.float32)


def test_tis_truncates_the_ratio_at_the_cap():
  weights, aux = off_policy.truncated_importance_sampling(OLD, BEHAVIOUR, MASK, tis_cap=2.0)
  np.testing.assert_allclose(weights, [[2.0, 0.5, 2.0]], rtol=1e-6)  # 4 -> 2
  np.testing.assert_array_equal(aux["is_weight_capped"], [[0.0, 0.0, 1.0]])
  np.testing.assert_allclose(aux["is_weight"], weights)


def test_decoupled_weight_is_the_plain_ratio_and_its_cap_drops_tokens():
  weights, aux = off_policy.decoupled_ppo(OLD, BEHAVIOUR, MASK)
  np.testing.assert_allclose(weights, [[2.0, 0.5, 4.0]], rtol=1e-6)
  np.testing.assert_array_equal(aux["is_weight_capped"], [[0.0, 0.0, 0.0]])
  weights, aux = off_policy.decoupled_ppo(OLD, BEHAVIOUR, MASK, decoupled_weight_cap=3.0)
  np.testing.assert_allclose(weights, [[2.0, 0.5, 0.0]], rtol=1e-6)  # 4 > 3: filtered, not 3
  np.testing.assert_array_equal(aux["is_weight_capped"], [[0.0, 0.0, 1.0]])


def test_no_correction_and_equal_policies_give_weight_one():
  weights, aux = off_policy.no_correction(OLD, BEHAVIOUR, MASK)
  np.testing.assert_array_equal(weights, np.ones((1, 3)))
  assert aux == {}
  for fn, kw in ((off_policy.decoupled_ppo, {}),
                 (off_policy.truncated_importance_sampling, {"tis_cap": 2.0})):
    np.testing.assert_allclose(fn(OLD, OLD, MASK, **kw)[0], np.ones((1, 3)))


def test_decoupled_ppo_clips_around_the_proximal_policy():
  """AReaL's objective per token: w = pi_prox / pi_behav times PPO's clipped loss of
  r = pi_theta / pi_prox (eps 0.2). Token 0: pi_theta = pi_prox = 0.5, pi_behav = 0.25, A = 1:
  r = 1 is inside the clip, loss -1 x w 2 = -2 (a clip around pi_behav, r = 2 -> 1.2, would give
  -1.2). Token 1: pi_theta 0.6, pi_prox 0.3 (r = 2, clipped to 1.2), pi_behav 0.6 (w = 0.5),
  A = 1: -1.2 x 0.5 = -0.6. Token 2: pi_theta 0.1, pi_prox 0.2 (r = 0.5), pi_behav 0.05 (w =
  4), A = -1: max(0.5, 0.8) = 0.8, x 4 = 3.2."""
  logp = _logs(0.5, 0.6, 0.1)
  advantages = jnp.asarray([[1.0, 1.0, -1.0]])
  loss, aux = losses.ppo_clip(logp, OLD, advantages, MASK, clip_eps_low=0.2, clip_eps_high=0.2)
  rl = {"off_policy_correction": "decoupled", "decoupled_weight_cap": None}
  loss, aux = off_policy.corrected(loss, aux, OLD, BEHAVIOUR, MASK, rl)
  np.testing.assert_allclose(loss, [[-2.0, -0.6, 3.2]], rtol=1e-6)
  np.testing.assert_array_equal(aux["clip_fraction"], [[0.0, 1.0, 1.0]])  # the loss's aux kept
  np.testing.assert_allclose(aux["is_weight"], [[2.0, 0.5, 4.0]], rtol=1e-6)


def test_the_weight_scales_the_gradient_and_has_none_itself():
  """Token 0 above, unclipped: loss = -w A exp(logp - old_logp), so d loss / d logp = -w A r =
  -2; the weight is data: no gradient reaches old_logp or behaviour_logp through it."""
  rl = {"off_policy_correction": "tis", "tis_cap": 2.0}

  def loss(logp, old, behaviour):
    per_token, aux = losses.ppo_clip(logp, old, jnp.ones_like(logp), jnp.ones_like(logp),
                                     clip_eps_low=0.2, clip_eps_high=0.2)
    return off_policy.corrected(per_token, aux, old, behaviour, jnp.ones_like(logp), rl)[0].sum()

  g_logp, _, g_behaviour = jax.grad(loss, argnums=(0, 1, 2))(_logs(0.5), _logs(0.5), _logs(0.25))
  np.testing.assert_allclose(g_logp, [[-2.0]], rtol=1e-6)
  np.testing.assert_array_equal(g_behaviour, [[0.0]])


def test_shape_mismatch_is_refused():
  with pytest.raises(AssertionError):
    off_policy.truncated_importance_sampling(OLD, BEHAVIOUR[:, :2], MASK, tis_cap=2.0)


def test_bad_caps_are_refused_by_the_functions():
  with pytest.raises(ValueError, match=r"rl.tis_cap must be >= 1"):
    off_policy.truncated_importance_sampling(OLD, BEHAVIOUR, MASK, tis_cap=0.5)
  with pytest.raises(ValueError, match=r"rl.decoupled_weight_cap must be > 1"):
    off_policy.decoupled_ppo(OLD, BEHAVIOUR, MASK, decoupled_weight_cap=1.0)


def _resolved(**rl_fields):
  config = tiny_config()
  for field, value in rl_fields.items():
    config.rl[field] = value
  return resolve_rl_config(config.rl)


def test_defaults_follow_k():
  sync = _resolved()
  assert (sync.max_off_policy_steps, sync.off_policy_correction, sync.old_logp) == (
      0, "none", "sampler")
  assert (sync.tis_cap, sync.decoupled_weight_cap) == (2.0, None)
  ahead = _resolved(max_off_policy_steps=2)
  assert (ahead.off_policy_correction, ahead.old_logp) == ("decoupled", "recompute")
  # A correction at k = 0 (TIS against the sampler-trainer mismatch) recomputes too.
  assert _resolved(off_policy_correction="tis").old_logp == "recompute"
  # Explicit "none" at k >= 1 keeps the sampler's log-probs.
  plain = _resolved(max_off_policy_steps=1, off_policy_correction="none")
  assert plain.old_logp == "sampler"
  for rl in (sync, ahead, plain):
    validate_rl_config(rl, num_devices=1)


def test_a_config_without_the_fields_reads_as_synchronous():
  config = tiny_config()
  for field in ("max_off_policy_steps", "off_policy_correction", "tis_cap",
                "decoupled_weight_cap"):
    del config.rl[field]
  rl = resolve_rl_config(config.rl)
  validate_rl_config(rl, num_devices=1)
  assert (rl.max_off_policy_steps, rl.off_policy_correction) == (0, "none")
  assert not off_policy.uses_behaviour_logp({})  # an rl section that never heard of it


@pytest.mark.parametrize("fields, message", [
    ({"max_off_policy_steps": -1}, r"rl.max_off_policy_steps must be an int >= 0 .*got -1"),
    ({"max_off_policy_steps": True}, r"rl.max_off_policy_steps must be an int >= 0 .*got True"),
    ({"off_policy_correction": "vtrace"},
     r"rl.off_policy_correction='vtrace' is not registered; registered: "
     r"\['decoupled', 'none', 'tis'\]"),
    ({"tis_cap": 0.5}, r"rl.tis_cap must be a finite number >= 1 .*got 0.5"),
    ({"decoupled_weight_cap": 1.0}, r"rl.decoupled_weight_cap must be None \(no cap\) or a "
                                    r"number > 1, got 1.0"),
    ({"max_off_policy_steps": 1, "old_logp": "sampler"},
     r"rl.off_policy_correction='decoupled' needs rl.old_logp='recompute'"),
])
def test_bad_values_are_one_error_naming_the_field(fields, message):
  rl = _resolved(**fields)
  with pytest.raises(ValueError, match=message):
    validate_rl_config(rl, num_devices=1)


def test_the_update_batch_must_carry_behaviour_logp_with_a_correction():
  rl = _resolved(max_off_policy_steps=1)
  b, t, tr = 2, 6, 3
  batch = {"tokens": np.zeros((b, t), np.int32), "input_mask": np.ones((b, t), np.int32),
           "response_mask": np.ones((b, tr), np.int32), "old_logp": np.zeros((b, tr), np.float32),
           "advantages": np.zeros((b,), np.float32)}
  with pytest.raises(ValueError, match=r"update batch lacks \['behaviour_logp'\]"):
    update_lib.check_batch(batch, rl)
  with pytest.raises(ValueError, match=r"batch\['behaviour_logp'\] has shape \(2, 2\)"):
    update_lib.check_batch({**batch, "behaviour_logp": np.zeros((b, 2), np.float32)}, rl)
  update_lib.check_batch({**batch, "behaviour_logp": np.zeros((b, tr), np.float32)}, rl)


def test_a_registered_correction_is_selectable():
  @off_policy.register_correction("half_test", overwrite=True)
  def half(old_logp, behaviour_logp, response_mask, *, tis_cap):  # pylint: disable=unused-argument
    return jnp.full_like(old_logp, 0.5), {}

  try:
    loss, _ = off_policy.corrected(jnp.ones((1, 3)), {}, OLD, BEHAVIOUR, MASK,
                                   {"off_policy_correction": "half_test", "tis_cap": 2.0})
    np.testing.assert_allclose(loss, [[0.5, 0.5, 0.5]])
    with pytest.raises(ValueError, match=r"rl.off_policy_correction='half_test' needs "
                                         r"hyperparameter rl.tis_cap"):
      off_policy.corrected(jnp.ones((1, 3)), {}, OLD, BEHAVIOUR, MASK,
                           {"off_policy_correction": "half_test"})
  finally:  # other tests list the registered names
    off_policy.OFF_POLICY_CORRECTIONS._entries.pop("half_test")  # pylint: disable=protected-access
