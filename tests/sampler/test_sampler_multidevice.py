"""Sampler pmapped over 2 simulated CPU devices (run in a subprocess so XLA_FLAGS applies)."""

import os
import pathlib
import subprocess
import sys
from tests.timeouts import hang_timeout

REPO = pathlib.Path(__file__).resolve().parents[2]


def _child():
  """Runs inside the subprocess with 2 host devices."""
  # pylint: disable=g-import-not-at-top  (imported only here, after XLA_FLAGS is set)
  import jax
  import numpy as np
  from rlscale.model import ModelConfig, init_params
  from rlscale.sampler.sampler import Sampler, generate, pad_to_bucket
  from rlscale.sampler.strategies import SamplingConfig

  assert jax.local_device_count() == 2, jax.devices()
  config = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                       num_heads=4, num_kv_heads=2, head_dim=8)
  params = init_params(config, jax.random.key(0))
  params = jax.tree.map(lambda x: x * 20 if x.ndim == 2 else x, params)  # as in test_sampler.py
  tokens = np.array([[11, 12, 13], [0, 21, 22], [0, 0, 31], [41, 42, 43]], np.int32)
  mask = (tokens != 0).astype(np.int32)
  sampler = Sampler(config, 6, SamplingConfig(), eos_ids=(5,), pad_id=0, prompt_buckets=(4,))
  rng = jax.random.key(3)
  out = sampler(params, tokens, mask, rng)
  assert out.tokens.shape == (4, 10) and out.logp.shape == (4, 6), out.tokens.shape
  padded, padded_mask = pad_to_bucket(tokens, mask, (4,), pad_id=0)
  for device in range(2):  # rows 2d, 2d+1 live on device d and sample with fold_in(rng, d)
    rows = slice(2 * device, 2 * device + 2)
    expected = generate(params, padded[rows], padded_mask[rows], jax.random.fold_in(rng, device),
                        model_config=config, max_new_tokens=6, sampling=SamplingConfig(),
                        eos_ids=(5,), pad_id=0)
    np.testing.assert_array_equal(out.tokens[rows], expected.tokens)
    np.testing.assert_allclose(out.logp[rows], expected.logp, atol=1e-6)
    np.testing.assert_array_equal(out.response_mask[rows], expected.response_mask)
  # The devices draw with different keys: the two shards differ on the same prompt.
  same = np.repeat(tokens[:1], 4, axis=0)
  twin = sampler(params, same, np.ones_like(same), rng)
  assert not np.array_equal(twin.tokens[0], twin.tokens[2])
  # Params already replicated over the 2 devices (a pmapped TrainState's layout) give the same.
  replicated = jax.tree.map(lambda x: np.stack([x, x]), params)
  again = sampler(replicated, tokens, mask, rng, params_replicated=True)
  np.testing.assert_array_equal(again.tokens, out.tokens)
  assert sampler.num_traces == 2  # one per params layout
  try:
    sampler(params, tokens[:3], mask[:3], rng)
  except ValueError as e:
    assert "divisible by the number of devices (2)" in str(e), e
  else:
    raise AssertionError("B=3 on 2 devices must raise")
  # Shared prefill: P = 4 prompts x G = 2 over 2 devices (prompts 2d, 2d+1 on device d) equals
  # the prompts repeated on the host; P = 1 x G = 2 (not a whole prompt per device) falls back to
  # repeating, with the same result.
  grouped = sampler(params, tokens, mask, rng, samples_per_prompt=2)
  repeated = sampler(params, np.repeat(tokens, 2, 0), np.repeat(mask, 2, 0), rng)
  np.testing.assert_array_equal(grouped.tokens, repeated.tokens)
  np.testing.assert_allclose(grouped.logp, repeated.logp, atol=1e-6)
  single = sampler(params, tokens[:1], mask[:1], rng, samples_per_prompt=2)
  np.testing.assert_array_equal(single.tokens, sampler(params, tokens[[0, 0]], mask[[0, 0]], rng).tokens)
  print("MULTIDEVICE_OK")


def test_sampler_on_two_devices():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
  result = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True,
                          timeout=hang_timeout(300), check=False)
  assert result.returncode == 0 and "MULTIDEVICE_OK" in result.stdout, result.stdout + result.stderr


if __name__ == "__main__":
  _child()
