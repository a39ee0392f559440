"""TrainState creation and the PPO critic initialised from the policy."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlscale.model.transformer import forward, init_params
from rlscale.train import state as state_lib
from rlscale.train.devices import replicate, unreplicate
from tests.train.update_problem import MODEL


def test_create_train_state_and_replicate_round_trip():
  params = {"w": jnp.arange(3.0)}
  state = state_lib.create_train_state(params, optax.adam(1e-3))
  assert int(state.step) == 0 and state.critic_params is None and state.critic_opt_state is None
  back = jax.device_get(unreplicate(replicate(state)))
  np.testing.assert_array_equal(back.params["w"], [0.0, 1.0, 2.0])
  assert jax.tree.structure(back) == jax.tree.structure(state)
  with pytest.raises(ValueError, match="critic_optimizer given without critic_params"):
    state_lib.create_train_state(params, optax.adam(1e-3), critic_optimizer=optax.sgd(1.0))


def test_critic_copies_the_policy_and_starts_at_zero_value():
  params = init_params(MODEL, jax.random.key(0))
  critic = state_lib.critic_params_from_policy(params, MODEL, jax.random.key(1))
  assert set(critic) == set(params) | {"value_head"}
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves({k: critic[k] for k in params})):
    np.testing.assert_array_equal(a, b)
  tokens = jnp.array([[3, 4, 5]])
  out = forward(critic, state_lib.critic_config(MODEL), tokens, jnp.ones_like(tokens))
  np.testing.assert_array_equal(out.values, jnp.zeros((1, 3)))
  state = state_lib.create_train_state(params, optax.adam(1e-3), critic_params=critic)
  assert state.critic_opt_state is not None
