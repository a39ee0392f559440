"""Policy and value losses against values worked out by hand."""

import os
import textwrap

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from rlscale.model.transformer import token_logp
from rlscale.rl import kl, losses
from rlscale.rl.logprob import entropy_from_logits
from rlscale.rl.aggregation import aggregate_loss
from rlscale.rl.presets import resolve_rl_config, validate_rl_config
from rlscale.runner import config_files


def _ppo(ratio, advantage, **kwargs):
  logp = jnp.log(jnp.atleast_2d(jnp.asarray(ratio, jnp.float32)))
  adv = jnp.atleast_2d(jnp.asarray(advantage, jnp.float32))
  return losses.ppo_clip(logp, jnp.zeros_like(logp), adv, jnp.ones_like(logp), **kwargs)


def test_ppo_clip_scalar_cases():
  kw = dict(clip_eps_low=0.2, clip_eps_high=0.2)
  loss, aux = _ppo([[1.0]], [[2.0]], **kw)
  np.testing.assert_allclose(loss, [[-2.0]], rtol=1e-6)  # objective 2
  assert float(aux["clip_fraction"][0, 0]) == 0.0
  loss, aux = _ppo([[1.5]], [[1.0]], **kw)  # positive advantage clipped at 1.2
  np.testing.assert_allclose(loss, [[-1.2]], rtol=1e-6)
  assert float(aux["clip_fraction"][0, 0]) == 1.0
  loss, _ = _ppo([[0.5]], [[-1.0]], **kw)  # negative advantage clipped at 0.8
  np.testing.assert_allclose(loss, [[0.8]], rtol=1e-6)
  loss, _ = _ppo([[0.5]], [[1.0]], **kw)  # pessimistic bound keeps the unclipped -0.5
  np.testing.assert_allclose(loss, [[-0.5]], rtol=1e-6)


def test_clip_higher_batched():
  ratio = [[1.25, 1.35, 0.75]]
  loss, aux = _ppo(ratio, [[1.0, 1.0, -1.0]], clip_eps_low=0.2, clip_eps_high=0.28)
  # 1.25 is inside [0.8, 1.28]; 1.35 is clipped to 1.28; 0.75 with A < 0 is clipped to 0.8.
  np.testing.assert_allclose(loss, [[-1.25, -1.28, 0.8]], rtol=1e-6)
  np.testing.assert_array_equal(aux["clip_fraction"], [[0.0, 1.0, 1.0]])


def test_dual_clip_by_hand():
  kw = dict(clip_eps_low=0.2, clip_eps_high=0.2, dual_clip_c=3.0)
  loss, aux = _ppo([[1.0, 5.0, 5.0]], [[2.0, -1.0, 1.0]], **kw)
  # A = +2 at r = 1: objective 2. A = -1 at r = 5: max(5, 1.2) = 5 bounded to c = 3.
  # A = +1 at r = 5: dual-clip never applies to positive advantages: -1.2.
  np.testing.assert_allclose(loss, [[-2.0, 3.0, -1.2]], rtol=1e-6)
  np.testing.assert_array_equal(aux["dual_clip_fraction"], [[0.0, 1.0, 0.0]])


def test_ppo_errors():
  with pytest.raises(AssertionError):
    losses.ppo_clip(jnp.zeros((2, 3)), jnp.zeros((2, 3)), jnp.zeros((2, 4)), jnp.ones((2, 3)),
                    clip_eps_low=0.2, clip_eps_high=0.2)
  with pytest.raises(ValueError, match="dual_clip_c must be > 1"):
    _ppo([[1.0]], [[1.0]], clip_eps_low=0.2, clip_eps_high=0.2, dual_clip_c=0.5)
  with pytest.raises(ValueError, match="clip_eps_low"):
    _ppo([[1.0]], [[1.0]], clip_eps_low=-0.1, clip_eps_high=0.2)


def test_huge_log_ratio_stays_finite():
  loss, _ = losses.ppo_clip(jnp.array([[100.0]]), jnp.array([[-100.0]]), jnp.array([[-1.0]]),
                            jnp.ones((1, 1)), clip_eps_low=0.2, clip_eps_high=0.2)
  np.testing.assert_allclose(loss, [[np.exp(20.0)]], rtol=1e-5)


def test_pg_loss():
  loss, aux = losses.policy_gradient(jnp.log(jnp.array([[2.0]])), jnp.zeros((1, 1)),
                                     jnp.array([[3.0]]), jnp.ones((1, 1)))
  np.testing.assert_allclose(loss, [[-6.0]], rtol=1e-6)
  np.testing.assert_allclose(aux["ratio"], [[2.0]], rtol=1e-6)


def test_value_loss_by_hand():
  loss, aux = losses.clipped_value_loss(jnp.array([[1.0]]), jnp.array([[0.0]]), jnp.array([[1.0]]),
                                        value_clip_eps=0.2)
  np.testing.assert_allclose(loss, [[0.32]], rtol=1e-6)
  assert float(aux["value_clip_fraction"][0, 0]) == 1.0


def test_value_loss_batched_and_unclipped():
  values = jnp.array([[1.0, 0.1], [0.5, 2.0]])
  old = jnp.array([[0.0, 0.0], [0.5, 0.0]])
  returns = jnp.array([[1.0, 1.0], [0.0, 0.0]])
  loss, _ = losses.clipped_value_loss(values, old, returns, value_clip_eps=0.2)
  # [0.5 max(0, .64), 0.5 max(.81, .81), 0.5 max(.25, .25), 0.5 max(4, .04)]
  np.testing.assert_allclose(loss, [[0.32, 0.405], [0.125, 2.0]], rtol=1e-6)
  loss, _ = losses.clipped_value_loss(values, old, returns, value_clip_eps=None)
  np.testing.assert_allclose(loss, [[0.0, 0.405], [0.125, 2.0]], rtol=1e-6)
  with pytest.raises(AssertionError):
    losses.clipped_value_loss(values, old[:, :1], returns, value_clip_eps=0.2)


def test_bind_policy_loss_fills_hyperparameters_from_config():
  cfg = ml_collections.ConfigDict(dict(clip_eps_low=0.2, clip_eps_high=0.28, dual_clip_c=None,
                                       unrelated=1))
  fn = losses.bind_policy_loss("ppo_clip", cfg)
  loss, _ = fn(jnp.log(jnp.array([[1.35]])), jnp.zeros((1, 1)), jnp.ones((1, 1)), jnp.ones((1, 1)))
  np.testing.assert_allclose(loss, [[-1.28]], rtol=1e-6)
  with pytest.raises(ValueError, match="needs hyperparameter rl.clip_eps_high"):
    losses.bind_policy_loss("ppo_clip", ml_collections.ConfigDict(dict(clip_eps_low=0.2)))
  with pytest.raises(ValueError, match=r"rl.policy_loss='nope' is not registered; registered: \["):
    losses.bind_policy_loss("nope", cfg)


def test_user_registered_loss_selected_by_name():
  """The extension path from the README: a pure per-token loss, registered, picked by name."""

  @losses.register_policy_loss("test_linear", overwrite=True)
  def linear_loss(logp, old_logp, advantages, response_mask, *, scale):  # pylint: disable=unused-argument
    return -scale * advantages * logp, {}

  fn = losses.bind_policy_loss("test_linear", ml_collections.ConfigDict(dict(scale=2.0)))
  token_loss, _ = fn(jnp.array([[-1.0, -2.0]]), jnp.zeros((1, 2)), jnp.ones((1, 2)),
                     jnp.array([[1, 0]]))
  np.testing.assert_allclose(aggregate_loss(token_loss, jnp.array([[1, 0]]), "token-mean"), 2.0)


def test_unregistered_loss_error_says_how_to_register_one_for_the_command_line():
  with pytest.raises(ValueError) as error:
    losses.POLICY_LOSSES.get("my_pg")
  assert str(error.value) == (
      f"rl.policy_loss='my_pg' is not registered; registered: {losses.POLICY_LOSSES.names()}. To "
      "use your own, register it with @rlscale.rl.losses.register_policy_loss('my_pg') in the "
      "config file passed to --config (or in a module that file imports), so the run's process "
      "defines it before the run starts")


def test_a_config_file_that_registers_a_loss_can_select_it(tmp_path):
  """What that error advises: the config file registers the loss, so loading it (as
  `python -m rlscale.main --config=<file>` does, in the run's process) makes the name valid."""
  default = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "configs",
                         "default.py")
  path = tmp_path / "my_pg_config.py"
  path.write_text(textwrap.dedent(f"""
      from rlscale.rl.losses import register_policy_loss
      from rlscale.runner.config_files import load_config_file

      @register_policy_loss("config_file_pg", overwrite=True)
      def config_file_pg(logp, old_logp, advantages, response_mask):
        return -advantages * logp * response_mask, {{}}

      def get_config(arg=None):
        config = load_config_file({os.path.abspath(default)!r}, arg)
        config.rl.policy_loss = "config_file_pg"
        return config
  """))
  assert "config_file_pg" not in losses.POLICY_LOSSES
  config = config_files.load_config_file(str(path), "smoke")
  rl = resolve_rl_config(config.rl)
  validate_rl_config(rl, num_devices=1)
  assert rl.policy_loss == "config_file_pg" and "config_file_pg" in losses.POLICY_LOSSES


def test_ratio_of_a_token_impossible_under_both_policies_is_one():
  logp, old = jnp.array([[-jnp.inf, -1.0]]), jnp.array([[-jnp.inf, -1.0]])
  np.testing.assert_array_equal(losses.importance_ratio(logp, old), [[1.0, 1.0]])
  grad = jax.grad(lambda x: jnp.sum(losses.importance_ratio(x, old)))(logp)
  np.testing.assert_array_equal(grad, [[0.0, 1.0]])  # d exp(x - old) / dx = 1 on-policy


@pytest.mark.parametrize("temperature", [1.0, 1e-9, 1e-40])
def test_whole_loss_is_finite_with_masked_vocabulary_and_tiny_temperature(temperature):
  # Every logits -> probabilities step of a loss (logp, ratio, PPO clip, k3 KL, entropy,
  # aggregation) with -inf vocabulary entries: the loss and its gradient stay finite. Row 1's last
  # position is padding whose token is masked under every policy (logp = old = ref = -inf).
  logits = jnp.array([[[2.0, 0.0, -jnp.inf], [0.5, 1.0, -jnp.inf]],
                      [[1.0, -jnp.inf, 0.0], [0.0, 0.0, -jnp.inf]]])
  targets = jnp.array([[0, 1], [0, 2]])
  mask = jnp.array([[1.0, 1.0], [1.0, 0.0]])
  old = token_logp(logits, targets, temperature)
  ref = jnp.where(mask > 0, old - 0.1, -jnp.inf)
  advantages = jnp.array([[1.0, 1.0], [-1.0, -1.0]])

  def total(z):
    logp = token_logp(z, targets, temperature)
    pg, _ = losses.ppo_clip(logp, old, advantages, mask, clip_eps_low=0.2, clip_eps_high=0.28)
    per_token = (pg + 0.1 * kl.kl_divergence("k3", logp, ref)
                 - 0.01 * entropy_from_logits(z, temperature))
    return aggregate_loss(per_token, mask, "token-mean")

  loss, grad = jax.value_and_grad(total)(logits)
  assert np.isfinite(float(loss)) and np.all(np.isfinite(grad))
  # On-policy at T = 1: ratio 1, so the PG part is -mean(A) over real tokens = -1/3, the k3 term
  # of d = -0.1 is 0.1 (exp(-0.1) + 0.1 - 1), and the entropy is that of the finite entries.
  if temperature == 1.0:
    def h(z):
      p = np.exp(z - np.log(np.exp(z).sum()))
      return -(p * np.log(p)).sum()
    entropies = [h(np.array([2.0, 0.0])), h(np.array([0.5, 1.0])), h(np.array([1.0, 0.0]))]
    k3 = np.exp(-0.1) + 0.1 - 1
    np.testing.assert_allclose(loss, -1 / 3 + 0.1 * k3 - 0.01 * np.mean(entropies), rtol=1e-5)
