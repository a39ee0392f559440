"""The kernel switches (`model.attention_impl`, `model.remat_impl`): each CPU-tuned path equals the
standard one on CPU (forward logits, gradients, KV-cached sampling), "auto" resolves by platform,
and bad values are refused in one line."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.model import init_params
from rlscale.model.config import ModelConfig, resolve_impl
from rlscale.model.transformer import forward
from rlscale.sampler.decode import generate
from rlscale.sampler.strategies import SamplingConfig

BASE = dict(vocab_size=40, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
            num_kv_heads=2, head_dim=8)


def _batch():
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, 40, (3, 9)).astype(np.int32)
  mask = np.ones_like(tokens)
  mask[1, :3] = 0  # left padding
  mask[2, :1] = 0
  return tokens, mask


def _params():
  params = init_params(ModelConfig(**BASE), jax.random.key(0))
  return jax.tree.map(lambda x: x * 3.0 if x.ndim == 2 else x, params)  # sharper logits


def test_auto_resolves_by_platform():
  assert resolve_impl("auto", "cpu", "standard", platform="cpu") == "cpu"
  assert resolve_impl("auto", "cpu", "standard", platform="gpu") == "standard"
  assert resolve_impl("auto", "custom_vjp", "checkpoint", platform="tpu") == "checkpoint"
  assert resolve_impl("standard", "cpu", "standard", platform="cpu") == "standard"
  assert resolve_impl("auto", "cpu", "standard") == "cpu"  # these tests run on CPU


@pytest.mark.parametrize("field, allowed", [
    ("attention_impl", "['auto', 'cpu', 'standard', 'blockwise', 'splash', 'cudnn']"),
    ("remat_impl", "['auto', 'custom_vjp', 'checkpoint']")])
def test_bad_value_refused_in_one_line(field, allowed):
  with pytest.raises(ValueError, match=rf"^model.{field} must be one of {re_escape(allowed)}, "
                                       r"got 'flash'$"):
    ModelConfig(**BASE, **{field: "flash"})


def re_escape(text):
  import re  # pylint: disable=g-import-not-at-top
  return re.escape(text)


def test_standard_attention_equals_cpu_attention_forward():
  tokens, mask = _batch()
  params = _params()
  cpu = forward(params, ModelConfig(**BASE, attention_impl="cpu"), tokens, mask).logits
  standard = forward(params, ModelConfig(**BASE, attention_impl="standard"), tokens, mask).logits
  real = mask.astype(bool)
  assert float(jnp.max(jnp.abs(cpu))) > 1.0  # logits far from 0: the comparison can fail
  np.testing.assert_allclose(np.asarray(standard)[real], np.asarray(cpu)[real], rtol=1e-5, atol=1e-5)


def test_standard_attention_equals_cpu_attention_in_kv_cached_sampling():
  tokens, mask = _batch()
  params = _params()
  outs = {}
  for impl in ("cpu", "standard"):
    outs[impl] = generate(params, tokens, mask, jax.random.key(5),
                          model_config=ModelConfig(**BASE, attention_impl=impl), max_new_tokens=6,
                          sampling=SamplingConfig(temperature=1.0), eos_ids=(), pad_id=0,
                          samples_per_prompt=2)
  np.testing.assert_array_equal(outs["standard"].tokens, outs["cpu"].tokens)
  assert len(np.unique(np.asarray(outs["cpu"].tokens)[:, 9:])) > 3  # not one repeated token
  np.testing.assert_allclose(outs["standard"].logp, outs["cpu"].logp, atol=1e-5)


@pytest.mark.parametrize("attention_impl", ["cpu", "standard"])
def test_checkpoint_remat_equals_custom_vjp_remat(attention_impl):
  tokens, mask = _batch()
  params = _params()

  def loss(p, remat_impl, remat=True):
    config = ModelConfig(**BASE, remat=remat, remat_impl=remat_impl, attention_impl=attention_impl)
    logits = forward(p, config, tokens, mask).logits
    return jnp.sum(jax.nn.log_softmax(logits)[..., 0] * mask)

  grads = {impl: jax.grad(loss)(params, impl) for impl in ("custom_vjp", "checkpoint")}
  plain = jax.grad(loss)(params, "auto", remat=False)
  for a, b, c in zip(jax.tree.leaves(grads["custom_vjp"]), jax.tree.leaves(grads["checkpoint"]),
                     jax.tree.leaves(plain)):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
  assert max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(plain)) > 1e-2
