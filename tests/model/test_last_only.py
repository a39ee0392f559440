"""`last_only=True` (the sampler's prefill) gives the last position's logits and the same cache."""

import jax
import jax.numpy as jnp
import numpy as np

from rlscale.model import (Transformer, cache_segments, init_cache, init_params,
                           positions_from_mask, tiny_config)


def test_last_only_matches_the_full_forward():
  config = tiny_config(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                       num_heads=4, num_kv_heads=2, head_dim=8)
  params = init_params(config, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (3, 7), 0, 64)
  input_mask = jnp.ones((3, 7), jnp.int32).at[0, :3].set(0)  # a left-padded row
  positions = positions_from_mask(input_mask)
  segments = cache_segments(input_mask, 0, 7)  # a prefill into an empty cache
  model = Transformer(config)
  full = model.apply({"params": params}, tokens, positions, segments, init_cache(config, 3, 7), 0)
  last = model.apply({"params": params}, tokens, positions, segments, init_cache(config, 3, 7), 0,
                     last_only=True)
  assert last.logits.shape == (3, 1, 64)
  np.testing.assert_allclose(last.logits[:, 0], full.logits[:, -1], atol=1e-5)
  for a, b in zip(jax.tree.leaves(last.cache), jax.tree.leaves(full.cache)):
    np.testing.assert_allclose(a, b, atol=1e-6)
