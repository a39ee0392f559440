"""TrainState creation, its shardings over a mesh, and the PPO critic initialised from the policy."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jax.sharding import AbstractMesh, PartitionSpec as P

from rlscale.model.transformer import forward, init_params, param_shardings
from rlscale.parallel import mesh as mesh_lib
from rlscale.parallel import shardings
from rlscale.train import state as state_lib
from tests.train.update_problem import MODEL

AXES = ("data", "fsdp", "tensor")


def specs(tree):
  return jax.tree.map(lambda s: s.spec, tree, is_leaf=lambda x: hasattr(x, "spec"))


def test_create_train_state_and_mesh_round_trip():
  params = {"w": jnp.arange(3.0)}
  state = state_lib.create_train_state(params, optax.adam(1e-3))
  assert int(state.step) == 0 and state.critic_params is None and state.critic_opt_state is None
  mesh = mesh_lib.make_mesh(mesh_lib.mesh_config(), jax.devices()[:1])
  placed = shardings.put_on_mesh(state, param_shardings(state, mesh))
  back = jax.device_get(placed)
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


def test_state_shardings_of_params_and_adam_moments():
  mesh = AbstractMesh((2, 2, 2), AXES)
  abstract, sh = state_lib.state_shardings(MODEL, optax.adam(1e-3), mesh)
  attn = specs(sh.params)["layers_0"]["self_attn"]
  assert attn["q_proj"]["kernel"] == P("fsdp", "tensor")
  assert attn["o_proj"]["kernel"] == P("tensor", "fsdp")
  assert attn["q_norm"]["weight"] == P(None)
  assert specs(sh.params)["embed_tokens"]["embedding"] == P("tensor", "fsdp")
  adam = specs(sh.opt_state)[0]
  assert adam.mu == specs(sh.params) and adam.nu == specs(sh.params)
  assert adam.count == P() and specs(sh).step == P()
  assert jax.tree.structure(abstract) == jax.tree.structure(sh, is_leaf=lambda x: hasattr(x, "spec"))
  critic, critic_sh = state_lib.state_shardings(MODEL, optax.adam(1e-3), mesh, critic=True)
  assert specs(critic_sh.critic_params)["value_head"]["kernel"] == P("fsdp", None)
  assert critic.critic_opt_state is not None


def test_fsdp_mesh_that_shards_nothing_is_refused():
  # fsdp = 3 divides none of hidden 32, kv 16, mlp 64: nearly every byte stays replicated.
  with pytest.raises(ValueError, match=r"leaves \d+\.\d% of the state's bytes replicated along "
                                       r"fsdp") as error:
    state_lib.state_shardings(MODEL, optax.adam(1e-3), AbstractMesh((1, 3, 1), AXES))
  assert "\n" not in str(error.value)
  # fsdp = 2 shards all but the norm weights (about 1% of the bytes).
  state_lib.state_shardings(MODEL, optax.adam(1e-3), AbstractMesh((1, 2, 1), AXES))
  # Without fsdp nothing is checked.
  state_lib.state_shardings(MODEL, optax.adam(1e-3), AbstractMesh((3, 1, 1), AXES))
