"""Pre-drawn Gumbel noise gives exactly the tokens of per-step sampling."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.sampler.strategies import SamplingConfig, sample_token, sample_token_from_noise


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=0.7),
                                      SamplingConfig(temperature=1.0, top_k=3),
                                      SamplingConfig(temperature=1.0, top_p=0.8)])
def test_noise_from_the_same_key_gives_the_same_draw(sampling):
  logits = jax.random.normal(jax.random.key(0), (16, 11))
  for seed in range(5):
    rng = jax.random.key(seed)
    token, logp = sample_token(logits, rng, sampling)
    gumbel = jax.random.gumbel(rng, logits.shape, jnp.float32)
    token2, logp2 = sample_token_from_noise(logits, gumbel, sampling)
    np.testing.assert_array_equal(token, token2)
    np.testing.assert_array_equal(logp, logp2)


def test_greedy_ignores_noise_and_bad_noise_is_an_error():
  logits = jnp.array([[0.1, 2.0, -1.0]])
  token, _ = sample_token_from_noise(logits, None, SamplingConfig(temperature=0.0))
  assert int(token[0]) == 1
  with pytest.raises(ValueError, match="gumbel must have the logits shape"):
    sample_token_from_noise(logits, jnp.zeros((1, 2)), SamplingConfig(temperature=1.0))
  with pytest.raises(ValueError, match="gumbel must have the logits shape"):
    sample_token_from_noise(logits, None, SamplingConfig(temperature=1.0))
