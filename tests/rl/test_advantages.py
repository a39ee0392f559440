"""Advantage estimators against values worked out by hand."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from rlscale.rl import advantages as adv
from rlscale.rl.presets import resolve_rl_config


def test_grpo_single_group_by_hand():
  # mean 0.25, unbiased std sqrt(0.75 / 3) = 0.5.
  out = adv.grpo(jnp.array([1.0, 0.0, 0.0, 0.0]), group_size=4)
  np.testing.assert_allclose(out, [0.75 / (0.5 + 1e-6), -0.25 / (0.5 + 1e-6),
                                   -0.25 / (0.5 + 1e-6), -0.25 / (0.5 + 1e-6)], rtol=1e-6)


def test_grpo_batched_groups_are_independent():
  rewards = jnp.array([1.0, 0.0, 2.0, 4.0, 0.5, 0.5])
  out = adv.grpo(rewards, group_size=2)
  s = np.sqrt(0.5)  # unbiased std of two values 1 apart
  np.testing.assert_allclose(out, [0.5 / (s + 1e-6), -0.5 / (s + 1e-6),
                                   -1 / (2 * s + 1e-6), 1 / (2 * s + 1e-6), 0, 0], rtol=1e-6)


@pytest.mark.parametrize("value", [0.35, 0.9])
def test_equal_rewards_give_exact_zero_despite_cancellation(value):
  rewards = jnp.full((7,), value, jnp.float32)
  for name in ("grpo", "dr_grpo", "rloo"):
    out = np.asarray(adv.compute_advantages(name, rewards, group_size=7))
    assert np.all(out == 0.0), (name, out)
  out = adv.reinforce_pp(adv.outcome_token_rewards(rewards, jnp.ones((7, 3))), jnp.ones((7, 3)),
                         gamma=1.0)
  assert np.all(np.asarray(out) == 0.0), out


def test_cancellation_case_is_real():
  # Seven rewards of 0.9: the float32 group mean is off by ~1e-7, so a plain
  # (r - mean) / (std + eps) would give advantages of about -0.1 instead of 0.
  groups = jnp.full((1, 7), 0.9, jnp.float32)
  centered = groups - jnp.mean(groups, axis=1, keepdims=True)
  naive = centered / (jnp.std(groups, axis=1, keepdims=True, ddof=1) + adv.STD_EPS)
  assert np.max(np.abs(naive)) > 0.05
  assert np.all(np.asarray(adv.grpo(groups.reshape(-1), group_size=7)) == 0.0)


def test_dr_grpo_no_std_division():
  out = adv.dr_grpo(jnp.array([1.0, 0.0, 0.0, 0.0, 3.0, 1.0]), group_size=2)
  np.testing.assert_allclose(out, [0.5, -0.5, 0.0, 0.0, 1.0, -1.0])


def test_rloo_leave_one_out():
  np.testing.assert_allclose(adv.rloo(jnp.array([1.0, 0.0, 0.0, 0.0]), group_size=4),
                             [1.0, -1 / 3, -1 / 3, -1 / 3], rtol=1e-6)
  # Two groups: [2, 4] -> [2 - 4, 4 - 2].
  np.testing.assert_allclose(adv.rloo(jnp.array([2.0, 4.0, 1.0, 1.0]), group_size=2),
                             [-2.0, 2.0, 0.0, 0.0])


def test_reinforce_pp_whitens_returns_over_tokens():
  mask = jnp.array([[1, 0, 0], [1, 1, 1]])  # lengths [1, 3]
  out = adv.reinforce_pp(adv.outcome_token_rewards(jnp.array([1.0, 0.0]), mask), mask, gamma=1.0)
  # Returns [1 | 0, 0, 0]: mean 0.25, unbiased std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5.
  s = 0.5 + 1e-6
  np.testing.assert_allclose(out, [[0.75 / s, 0, 0], [-0.25 / s] * 3], rtol=1e-6)


@pytest.mark.parametrize("kl_coef", [0.0, 1e-9])
def test_reinforce_pp_is_continuous_in_kl_coef(kl_coef):
  # Issue 13 item 4: kl_coef = 0 gave per-response [0.707, -0.707] (whitened over the 2 rewards),
  # kl_coef = 1e-9 per-token [1.5, -0.5, -0.5, -0.5]. Both must be the token-level whitening.
  cfg = _rl("reinforce_pp", kl_coef=kl_coef)
  mask = jnp.array([[1, 0, 0], [1, 1, 1]])
  old_logp = jnp.array([[-1.0, 0.0, 0.0], [-1.0, -2.0, -0.5]])
  ref_logp = jnp.array([[-1.2, 0.0, 0.0], [-1.0, -1.5, -0.8]])
  out = adv.compute_batch_advantages(cfg, jnp.array([1.0, 0.0]), mask, old_logp=old_logp,
                                     ref_logp=ref_logp)["advantages"]
  np.testing.assert_allclose(out, [[1.5, 0, 0], [-0.5, -0.5, -0.5]], rtol=1e-5, atol=1e-6)


def test_reinforce_pp_with_kl_in_reward_by_hand():
  cfg = _rl("reinforce_pp", kl_coef=0.5)
  mask = jnp.array([[1, 0, 0], [1, 1, 1]])
  old_logp = jnp.array([[-1.0, 0.0, 0.0], [-1.0, -2.0, -0.5]])
  ref_logp = jnp.array([[-1.2, 0.0, 0.0], [-1.0, -1.6, -0.7]])
  out = adv.compute_batch_advantages(cfg, jnp.array([1.0, 0.0]), mask, old_logp=old_logp,
                                     ref_logp=ref_logp)["advantages"]
  # k1 = old - ref: [0.2 | 0, -0.4, 0.2]; token rewards = outcome - 0.5 k1: [0.9 | 0, 0.2, -0.1];
  # returns-to-go: [0.9 | 0.1, 0.1, -0.1]; mean 0.25, deviations [0.65 | -0.15, -0.15, -0.35].
  returns = np.array([0.9, 0.1, 0.1, -0.1])
  whitened = (returns - returns.mean()) / (returns.std(ddof=1) + 1e-6)
  np.testing.assert_allclose(out, [[whitened[0], 0, 0], whitened[1:]], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_group_relative_needs_two_samples(name):
  with pytest.raises(ValueError, match="group_size must be an int >= 2"):
    adv.compute_advantages(name, jnp.ones(4), group_size=1)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_shape_errors(name):
  with pytest.raises(ValueError, match=r"rewards must be \[B\]"):
    adv.compute_advantages(name, jnp.ones((2, 4)), group_size=2)


def test_batch_not_multiple_of_group():
  with pytest.raises(ValueError, match="do not split into groups"):
    adv.compute_advantages("grpo", jnp.ones(5), group_size=2)


def test_unknown_name_lists_registered():
  with pytest.raises(ValueError, match=r"rl.advantage='nope'.*'dr_grpo', 'gae', 'grpo'"):
    adv.compute_advantages("nope", jnp.ones(4), group_size=2)
  for name in ("gae", "reinforce_pp"):
    with pytest.raises(ValueError, match="token-level"):
      adv.compute_advantages(name, jnp.ones(4), group_size=2)


def test_estimators_jit():
  rewards = jnp.array([1.0, 0.0, 0.0, 1.0])
  for name in ("grpo", "dr_grpo", "rloo"):
    jitted = jax.jit(lambda r, n=name: adv.compute_advantages(n, r, group_size=2))
    np.testing.assert_allclose(jitted(rewards), adv.compute_advantages(name, rewards, group_size=2))


def test_register_custom_estimator():
  @adv.register_advantage("test_sign", group_relative=False, overwrite=True)
  def sign(rewards, *, group_size):  # pylint: disable=unused-argument
    return jnp.sign(rewards - 0.5)

  np.testing.assert_allclose(adv.compute_advantages("test_sign", jnp.array([1.0, 0.0]), group_size=2),
                             [1.0, -1.0])
  with pytest.raises(ValueError, match="already registered"):
    adv.register_advantage("test_sign")(sign)


def test_gae_by_hand():
  a, r = adv.gae(jnp.array([[0.0, 1.0]]), jnp.array([[0.5, 0.8]]), jnp.array([[1, 1]]),
                 gamma=1.0, lam=1.0)
  np.testing.assert_allclose(a, [[0.5, 0.2]], rtol=1e-6)
  np.testing.assert_allclose(r, [[1.0, 1.0]], rtol=1e-6)


def test_gae_discount_and_mask_batched():
  # Row 0 ends after two tokens (third is padding); row 1 has three tokens.
  rewards = jnp.array([[0.0, 1.0, 9.0], [0.0, 0.0, 2.0]])
  values = jnp.array([[0.5, 0.8, 7.0], [1.0, 1.0, 1.0]])
  mask = jnp.array([[1, 1, 0], [1, 1, 1]])
  gamma, lam = 0.9, 0.5
  a, r = adv.gae(rewards, values, mask, gamma=gamma, lam=lam)
  # Row 0: delta1 = 1 - 0.8 = 0.2 (episode ends); delta0 = 0 + 0.9*0.8 - 0.5 = 0.22,
  # A0 = 0.22 + 0.45 * 0.2 = 0.31.
  # Row 1: d2 = 2 - 1 = 1; d1 = 0.9 - 1 = -0.1, A1 = -0.1 + 0.45 = 0.35; d0 = -0.1, A0 = -0.1 + 0.45*0.35.
  np.testing.assert_allclose(a, [[0.31, 0.2, 0.0], [-0.1 + 0.45 * 0.35, 0.35, 1.0]], rtol=1e-5)
  np.testing.assert_allclose(r, [[0.81, 1.0, 0.0], [0.9 + 0.45 * 0.35, 1.35, 2.0]], rtol=1e-5)


def test_gae_shape_and_range_errors():
  with pytest.raises(AssertionError):
    adv.gae(jnp.zeros((2, 3)), jnp.zeros((2, 4)), jnp.ones((2, 3)), gamma=1.0, lam=1.0)
  with pytest.raises(ValueError, match="rl.lam"):
    adv.gae(jnp.zeros((2, 3)), jnp.zeros((2, 3)), jnp.ones((2, 3)), gamma=1.0, lam=1.5)


def test_discounted_returns():
  out = adv.discounted_returns(jnp.array([[1.0, 0.0, 2.0, 5.0]]), jnp.array([[1, 1, 1, 0]]), gamma=0.5)
  np.testing.assert_allclose(out, [[1.5, 1.0, 2.0, 0.0]])


def test_masked_whiten():
  out = adv.masked_whiten(jnp.array([[1.0, 3.0, 100.0]]), jnp.array([[1, 1, 0]]))
  s = np.sqrt(2.0)  # unbiased std of [1, 3]
  np.testing.assert_allclose(out, [[-1 / (s + 1e-6), 1 / (s + 1e-6), 0.0]], rtol=1e-6)
  np.testing.assert_array_equal(adv.masked_whiten(jnp.full((2, 3), 0.35), jnp.ones((2, 3))), 0.0)


def test_outcome_token_rewards_on_last_real_token():
  out = adv.outcome_token_rewards(jnp.array([2.0, 3.0, 4.0]),
                                  jnp.array([[1, 1, 0], [1, 1, 1], [0, 0, 0]]))
  np.testing.assert_array_equal(out, [[0, 2, 0], [0, 0, 3], [0, 0, 0]])


def test_outcome_token_rewards_on_the_last_real_token_of_a_mask_with_gaps():
  # The last position whose mask is 1, not sum(mask) - 1 (index 1 for [1, 0, 0, 1]: a masked slot).
  out = adv.outcome_token_rewards(jnp.array([1.0, 2.0, 3.0]),
                                  jnp.array([[1, 0, 0, 1], [0, 1, 1, 0], [1, 1, 0, 0]]))
  np.testing.assert_array_equal(out, [[0, 0, 0, 1], [0, 0, 2, 0], [0, 3, 0, 0]])


def test_reinforce_pp_with_k1_kl_in_reward_and_a_mask_with_gaps_by_hand():
  cfg = _rl("reinforce_pp", kl_coef=1.0, kl_estimator="k1", gamma=1.0)
  mask = jnp.array([[1, 0, 0, 1], [1, 1, 0, 0]])
  old_logp = jnp.full((2, 4), -1.0)
  ref_logp = jnp.array([[-2.0] * 4, [-1.0] * 4])
  out = adv.compute_batch_advantages(cfg, jnp.array([1.0, 0.0]), mask, old_logp=old_logp,
                                     ref_logp=ref_logp)["advantages"]
  # k1 = old - ref: row 0 = 1 per real token, row 1 = 0. Token rewards: row 0 [-1, _, _, 1 - 1 = 0]
  # (the outcome 1 on index 3, the last real token), row 1 [0, 0, _, _]. Returns-to-go (gamma 1,
  # masked slots skipped): [-1, _, _, 0] and [0, 0, _, _]. Over the 4 real tokens: mean -0.25,
  # deviations [-0.75, 0.25, 0.25, 0.25], unbiased var (0.5625 + 3 * 0.0625) / 3 = 0.25, std 0.5:
  # A = [-1.5, 0.5 | 0.5, 0.5]. (The reward on index 1 = sum(mask) - 1, masked, gave returns
  # [-2, _, _, -1].)
  np.testing.assert_allclose(out, [[-1.5, 0, 0, 0.5], [0.5, 0.5, 0, 0]], rtol=1e-5, atol=1e-6)


def _rl(algorithm, **overrides):
  cfg = ml_collections.ConfigDict(dict(algorithm=algorithm, group_size=2, prompts_per_step=1))
  cfg.update(overrides)
  return resolve_rl_config(cfg)


def test_batch_advantages_ppo_gae_with_kl_in_reward():
  cfg = _rl("ppo", kl_coef=0.1, gamma=1.0, lam=1.0, whiten_advantages=False)
  mask = jnp.array([[1, 1], [1, 0]])
  old_logp = jnp.array([[-1.0, -2.0], [-1.0, -9.0]])
  ref_logp = jnp.array([[-1.5, -2.0], [-0.5, 0.0]])
  values = jnp.array([[0.5, 0.8], [0.2, 0.0]])
  out = adv.compute_batch_advantages(cfg, jnp.array([1.0, 0.0]), mask, old_logp=old_logp,
                                     ref_logp=ref_logp, values=values)
  # k1 = old - ref: row 0 [0.5, 0] -> token rewards [-0.05, 1]; row 1 [-0.5] -> [0.05].
  # Row 0: d1 = 1 - 0.8 = 0.2, d0 = -0.05 + 0.8 - 0.5 = 0.25 -> A = [0.45, 0.2].
  np.testing.assert_allclose(out["advantages"], [[0.45, 0.2], [-0.15, 0.0]], rtol=1e-5)
  np.testing.assert_allclose(out["returns"], [[0.95, 1.0], [0.05, 0.0]], rtol=1e-5)


def test_batch_advantages_group_estimator_with_kl_in_reward():
  cfg = _rl("rloo", kl_coef=1.0)
  mask = jnp.array([[1, 1], [1, 0]])
  old_logp = jnp.array([[-1.0, -1.0], [-1.0, -5.0]])
  ref_logp = jnp.array([[-1.5, -1.5], [-1.0, 0.0]])
  out = adv.compute_batch_advantages(cfg, jnp.array([1.0, 1.0]), mask, old_logp=old_logp,
                                     ref_logp=ref_logp)
  # Sequence KL sums: row 0 = 1.0, row 1 = 0 -> rewards [0, 1] -> RLOO [-1, 1].
  np.testing.assert_allclose(out["advantages"], [-1.0, 1.0], rtol=1e-6)


def test_batch_advantages_missing_inputs():
  with pytest.raises(ValueError, match="old values"):
    adv.compute_batch_advantages(_rl("ppo"), jnp.ones(2), jnp.ones((2, 2)))
  with pytest.raises(ValueError, match="needs old_logp and ref_logp"):
    adv.compute_batch_advantages(_rl("rloo", kl_coef=0.1), jnp.ones(2), jnp.ones((2, 2)))
