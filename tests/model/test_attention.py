"""Attention from segment ids (`rlscale.model.attention`): the description's rule worked out by
hand, every kernel equal to the dense path on CPU in float32 (outputs and q/k/v gradients, 1e-5)
for left padding, packed segments, right padding, rows of padding only, GQA / MQA / MHA and
decode over a cache; the model with each kernel (packed rows equal separate rows, gradients
through remat, KV-cached sampling); splash in Pallas interpret mode, under shard_map on 4 CPU
devices and compiled for a TPU slice; the blockwise kernel's compiled memory at T = 4,096."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.model import attention
from rlscale.model import transformer as tfm
from rlscale.model.config import ModelConfig
from rlscale.sampler.decode import generate
from rlscale.sampler.strategies import SamplingConfig
from tests.timeouts import hang_timeout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T = 37  # not a multiple of any block size: the kernels' padding is exercised


def _rows(*rows):
  return jnp.asarray(np.array(rows, np.int32))


# Segment ids [B, T] per case; 0 is padding.
CASES = {
    "left_padding": _rows([0] * 5 + [1] * 32, [1] * 37, [0] * 30 + [1] * 7),
    "packed": _rows([1] * 10 + [2] * 20 + [0] * 3 + [3] * 4,
                    [0] * 2 + [1] * 3 + [2] * 3 + [3] * 29,
                    [5] * 17 + [6] * 20),
    "right_padding": _rows([1] * 20 + [0] * 17, [0] * 4 + [1] * 30 + [0] * 3, [1] * 37),
    "padding_rows": _rows([0] * 37, [0] * 36 + [1], [1] * 37),
}


def _qkv(heads=4, kv_heads=2, length=T, batch=3, seed=0):
  rng = np.random.default_rng(seed)
  normal = lambda n: jnp.asarray(rng.normal(size=(batch, length, n, 8)), jnp.float32)  # noqa: E731
  # q scaled so the softmax is far from uniform: a wrong mask shows.
  return 2.0 * normal(heads), normal(kv_heads), normal(kv_heads), normal(heads)


def _kernel(impl):
  """fn(q, k, v, segments) -> output for a kernel name (small blocks for blockwise so a row
  spans several query and key blocks; cudnn's wrapper through XLA, as no GPU is here)."""
  return {
      "dense": lambda q, k, v, s: attention.cpu_attention(q, k, v, attention.dense_mask(s)),
      "standard": lambda q, k, v, s: attention.attend(q, k, v, s, impl="standard"),
      "blockwise": lambda q, k, v, s: attention.blockwise_attention(q, k, v, s, block_q=8,
                                                                     block_k=16),
      "splash": attention.splash_attention,
      "cudnn_wrapper": lambda q, k, v, s: attention.cudnn_attention(q, k, v, s,
                                                                     implementation="xla"),
  }[impl]


def _outputs_and_grads(impl, q, k, v, weights, segments):
  fn = _kernel(impl)
  loss = lambda q, k, v: jnp.sum(fn(q, k, v, segments) * weights)  # noqa: E731
  return fn(q, k, v, segments), jax.grad(loss, argnums=(0, 1, 2))(q, k, v)


def _assert_close(got, want):
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# The description, by hand.

def test_dense_mask_by_hand():
  # Row 0: left padding; row 1: two packed sequences then padding.
  segments = attention.segments_from_mask(_rows([0, 1, 1, 1], [1, 1, 2, 0]))
  want = np.array([
      [[1, 0, 0, 0], [0, 1, 0, 0], [0, 1, 1, 0], [0, 1, 1, 1]],
      # The padding query at slot 3 sees only itself (as the dense masks of before).
      [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]], bool)
  np.testing.assert_array_equal(attention.dense_mask(segments), want)


def test_cache_segments_by_hand():
  # A decode query at slot 2 of [pad, real, real (written now), not yet written].
  got = attention.dense_mask(attention.cache_segments(_rows([0, 1, 1, 0]), 2, 1))
  np.testing.assert_array_equal(got, [[[False, True, True, False]]])
  # A prefill of 3 slots into a longer cache attends those slots only.
  segments = attention.cache_segments(_rows([0, 1, 1]), 0, 3)
  np.testing.assert_array_equal(attention.dense_mask(segments),
                                attention.dense_mask(attention.segments_from_mask(_rows([0, 1, 1]))))


def test_left_padded_rows_keep_the_old_causal_mask():
  # The dense mask of before: causal & key is real, or the diagonal.
  input_mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], np.int32)
  old = (np.tril(np.ones((5, 5), bool))[None] & input_mask.astype(bool)[:, None, :]) | np.eye(5, dtype=bool)
  np.testing.assert_array_equal(attention.dense_mask(attention.segments_from_mask(input_mask)), old)


def test_positions_restart_per_segment():
  ids = _rows([0, 0, 1, 1, 1, 2, 2, 0, 3], [1, 1, 0, 0, 0, 0, 0, 0, 0])
  np.testing.assert_array_equal(attention.positions_from_segments(ids),
                                [[0, 0, 0, 1, 2, 0, 1, 0, 0], [0, 1, 0, 0, 0, 0, 0, 0, 0]])


def test_positions_of_left_padded_rows_are_those_of_before():
  mask = CASES["left_padding"]
  real = np.asarray(mask).astype(bool)
  np.testing.assert_array_equal(np.asarray(attention.positions_from_segments(mask))[real],
                                np.asarray(tfm.positions_from_mask(mask))[real])


# ---------------------------------------------------------------------------------------------
# Each kernel against the dense path.

@pytest.mark.parametrize("impl", ["standard", "blockwise", "splash", "cudnn_wrapper"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_kernel_equals_dense_with_gradients(impl, case):
  q, k, v, weights = _qkv()
  segments = attention.segments_from_mask(CASES[case])
  got = _outputs_and_grads(impl, q, k, v, weights, segments)
  want = _outputs_and_grads("dense", q, k, v, weights, segments)
  assert float(jnp.max(jnp.abs(want[1][0]))) > 1e-2  # gradients reach q: the test can fail
  _assert_close(got, want)


@pytest.mark.parametrize("impl", ["blockwise", "splash"])
@pytest.mark.parametrize("heads, kv_heads", [(4, 1), (2, 2)])
def test_kernel_equals_dense_for_mqa_and_mha(impl, heads, kv_heads):
  q, k, v, weights = _qkv(heads, kv_heads, seed=1)
  segments = attention.segments_from_mask(CASES["packed"])
  _assert_close(_outputs_and_grads(impl, q, k, v, weights, segments),
                _outputs_and_grads("dense", q, k, v, weights, segments))


@pytest.mark.parametrize("impl", ["blockwise", "splash"])
def test_a_padding_query_gets_its_own_value(impl):
  q, k, v, _ = _qkv()
  out = _kernel(impl)(q, k, v, attention.segments_from_mask(CASES["padding_rows"]))
  own = jnp.repeat(v[0], 2, axis=1)  # query head h reads KV head h // 2
  np.testing.assert_allclose(out[0], own, rtol=1e-5, atol=1e-5)


def _cache_layout(k, v):
  """[B, S, K, D] keys and values in the KV cache's layout ([B, K, D, S], [B, K, S, D])."""
  return k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)


@pytest.mark.parametrize("impl", ["standard", "blockwise"])
@pytest.mark.parametrize("slot", [5, 16, 36])
def test_decode_over_a_cache_equals_dense(impl, slot):
  q, k, v, weights = _qkv(seed=2)
  slot_ids = CASES["left_padding"]  # every slot written; the causal rule hides slots > slot
  segments = attention.cache_segments(slot_ids, slot, 1)
  q1, w1 = q[:, slot:slot + 1], weights[:, slot:slot + 1]
  ck, cv = _cache_layout(k, v)

  def run(name):
    fn = lambda q, ck, cv: attention.attend(q, ck, cv, segments, impl=name, cache_layout=True)  # noqa: E731
    loss = lambda *a: jnp.sum(fn(*a) * w1)  # noqa: E731
    return fn(q1, ck, cv), jax.grad(loss, argnums=(0, 1, 2))(q1, ck, cv)

  _assert_close(run(impl), run("cpu"))


def test_blockwise_skips_nothing_it_needs_at_any_offset():
  # Queries 10..19 of a cache of 37 slots (a chunk after a prefix), blocks smaller than both.
  q, k, v, weights = _qkv(seed=3)
  segments = attention.cache_segments(CASES["packed"], 10, 10)
  qc, wc = q[:, 10:20], weights[:, 10:20]
  fn = lambda q, k, v: attention.blockwise_attention(q, k, v, segments, block_q=4, block_k=8)  # noqa: E731
  ref = lambda q, k, v: attention.cpu_attention(q, k, v, attention.dense_mask(segments))  # noqa: E731
  grads = lambda f: jax.grad(lambda *a: jnp.sum(f(*a) * wc), argnums=(0, 1, 2))(qc, k, v)  # noqa: E731
  _assert_close((fn(qc, k, v), grads(fn)), (ref(qc, k, v), grads(ref)))


def test_cudnn_refuses_float32():
  q, k, v, _ = _qkv()
  with pytest.raises(ValueError, match=r"model.attention_impl 'cudnn' needs model.dtype bfloat16"):
    attention.cudnn_attention(q, k, v, attention.segments_from_mask(CASES["packed"]))


def test_auto_resolves_by_platform_and_phase():
  resolve = attention.resolve_attention_impl
  assert resolve("auto", decode=False, dtype=jnp.float32, platform="cpu") == "cpu"
  assert resolve("auto", decode=False, dtype=jnp.float32) == "cpu"  # these tests run on CPU
  assert resolve("auto", decode=False, dtype=jnp.float32, platform="tpu") == "splash"
  assert resolve("auto", decode=True, dtype=jnp.bfloat16, platform="tpu") == "standard"
  assert resolve("auto", decode=False, dtype=jnp.bfloat16, platform="gpu") == "cudnn"
  assert resolve("auto", decode=False, dtype=jnp.float32, platform="gpu") == "standard"
  assert resolve("splash", decode=True, dtype=jnp.float32, platform="tpu") == "standard"
  assert resolve("blockwise", decode=True, dtype=jnp.float32, platform="cpu") == "blockwise"
  # A query window without a cache (the last layer of a scoring pass): never dense scores off CPU.
  for setting in ("splash", "cudnn", "auto"):
    assert resolve(setting, decode=True, window=True, dtype=jnp.bfloat16,
                   platform="tpu") == "blockwise"
  assert resolve("auto", decode=True, window=True, dtype=jnp.float32, platform="cpu") == "cpu"
  assert resolve("standard", decode=True, window=True, dtype=jnp.float32,
                 platform="tpu") == "standard"


# ---------------------------------------------------------------------------------------------
# The model with each kernel.

BASE = dict(vocab_size=40, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
            num_kv_heads=2, head_dim=8)


@pytest.mark.parametrize("impl", ["cpu", "standard", "blockwise", "splash"])
def test_a_packed_row_equals_its_sequences_in_rows_of_their_own(impl, random_params):
  config = ModelConfig(**BASE, attention_impl=impl)
  params = random_params(config)
  rng = np.random.default_rng(4)
  a, b = rng.integers(1, 40, 5), rng.integers(1, 40, 7)
  packed = jnp.asarray(np.r_[a, b, [0, 0]][None], jnp.int32)
  packed_ids = _rows([1] * 5 + [2] * 7 + [0] * 2)
  separate = jnp.asarray(np.stack([np.r_[[0] * 2, a], b]), jnp.int32)  # a left-padded
  separate_mask = _rows([0] * 2 + [1] * 5, [1] * 7)
  got = tfm.forward(params, config, packed, packed_ids).logits[0]
  want = tfm.forward(params, config, separate, separate_mask).logits
  np.testing.assert_allclose(got[:5], want[0, 2:], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got[5:12], want[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", ["blockwise", "splash"])
def test_model_gradients_through_remat_equal_dense(impl, random_params, monkeypatch):
  monkeypatch.setattr(attention, "BLOCK_Q", 4)  # several blocks per row inside the model
  monkeypatch.setattr(attention, "BLOCK_K", 8)
  params = random_params(ModelConfig(**BASE))
  tokens = jnp.asarray(np.random.default_rng(5).integers(0, 40, (2, 13)), jnp.int32)
  ids = _rows([0] * 3 + [1] * 10, [1] * 6 + [2] * 7)

  def grads(name):
    config = ModelConfig(**BASE, attention_impl=name, remat=True)
    loss = lambda p: jnp.sum(jax.nn.log_softmax(tfm.forward(p, config, tokens, ids).logits)[..., 0]  # noqa: E731
                             * (ids > 0))
    return jax.grad(loss)(params)

  got, want = grads(impl), grads("cpu")
  assert max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(want)) > 1e-2
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", ["blockwise", "splash"])
def test_a_query_window_equals_dense_with_gradients(impl, random_params, monkeypatch):
  """forward(outputs=(start, stop)): the last layer's window of queries over every key (splash
  runs it blockwise), values and gradients equal to the dense path's."""
  monkeypatch.setattr(attention, "BLOCK_Q", 4)
  monkeypatch.setattr(attention, "BLOCK_K", 8)
  params = random_params(ModelConfig(**BASE))
  tokens = jnp.asarray(np.random.default_rng(7).integers(0, 40, (2, 13)), jnp.int32)
  ids = _rows([0] * 3 + [1] * 10, [1] * 6 + [2] * 7)
  start, stop = 5, 12

  def grads(name):
    config = ModelConfig(**BASE, attention_impl=name, remat=True)
    loss = lambda p: jnp.sum(  # noqa: E731
        jax.nn.log_softmax(tfm.forward(p, config, tokens, ids, outputs=(start, stop)).logits)[..., 1]
        * (ids[:, start:stop] > 0))
    return jax.value_and_grad(loss)(params)

  got, want = grads(impl), grads("cpu")
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_kv_cached_sampling_with_blockwise_equals_cpu(random_params):
  tokens = jnp.asarray(np.random.default_rng(6).integers(1, 40, (3, 9)), jnp.int32)
  mask = _rows([1] * 9, [0] * 3 + [1] * 6, [0] + [1] * 8)
  params = random_params(ModelConfig(**BASE))
  outs = {impl: generate(params, tokens, mask, jax.random.key(5),
                         model_config=ModelConfig(**BASE, attention_impl=impl), max_new_tokens=6,
                         sampling=SamplingConfig(temperature=1.0), eos_ids=(), pad_id=0,
                         samples_per_prompt=2)
          for impl in ("cpu", "blockwise")}
  np.testing.assert_array_equal(outs["blockwise"].tokens, outs["cpu"].tokens)
  np.testing.assert_allclose(outs["blockwise"].logp, outs["cpu"].logp, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Splash on a mesh, and for a TPU.

def test_splash_under_shard_map_on_four_cpu_devices_equals_dense():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu",
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, "-m", "tests.model.splash_mesh_worker"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=hang_timeout(60), check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  result = json.loads(out.stdout.strip().splitlines()[-1])
  assert result["manual_computations"] >= 1  # the kernel ran per shard
  assert result["out"] < 1e-5 and max(result["grads"]) < 1e-5, result


@pytest.mark.filterwarnings("ignore:Error reading persistent compilation cache entry:UserWarning")
def test_splash_compiles_for_a_tpu_slice_under_shard_map():
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  from jax.sharding import NamedSharding, PartitionSpec  # pylint: disable=g-import-not-at-top
  from rlscale.aot.topology import libtpu_unavailable_reason, topology_devices  # pylint: disable=g-import-not-at-top
  from rlscale.parallel.rules import DEFAULT_RULES  # pylint: disable=g-import-not-at-top
  reason = libtpu_unavailable_reason()
  if reason is not None:
    pytest.skip(f"libtpu cannot load here: {reason}")
  devices = np.array(topology_devices("v5e:2x4")).reshape(4, 1, 2)
  mesh = jax.sharding.Mesh(devices, ("data", "fsdp", "tensor"),
                           axis_types=(jax.sharding.AxisType.Auto,) * 3)

  def grads(q, k, v, ids):
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(DEFAULT_RULES):
      assert attention.current_platform() == "tpu"  # so "auto" would pick splash here
      segments = attention.segments_from_mask(ids)
      loss = lambda *qkv: jnp.sum(attention.splash_attention(*qkv, segments).astype(jnp.float32))  # noqa: E731
      return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

  rows = NamedSharding(mesh, PartitionSpec(("data", "fsdp")))
  shapes = [(8, 1000, 8, 128), (8, 1000, 4, 128), (8, 1000, 4, 128)]
  args = [jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=rows) for s in shapes]
  args.append(jax.ShapeDtypeStruct((8, 1000), jnp.int32, sharding=rows))
  lowered = jax.jit(grads).lower(*args)
  text = lowered.as_text()
  assert "tpu_custom_call" in text and "sdy.manual_computation" in text  # Mosaic, per shard
  assert lowered.compile().memory_analysis() is not None


# ---------------------------------------------------------------------------------------------
# Memory.

def test_blockwise_forward_and_backward_stay_within_blocks_at_4096_tokens():
  b, t, h, kv, d = 1, 4096, 4, 2, 32
  args = [jax.ShapeDtypeStruct((b, t, h, d), jnp.float32),
          jax.ShapeDtypeStruct((b, t, kv, d), jnp.float32),
          jax.ShapeDtypeStruct((b, t, kv, d), jnp.float32), jax.ShapeDtypeStruct((b, t), jnp.int32)]

  def temp_bytes(kernel):
    def loss(q, k, v, ids):
      return jnp.sum(kernel(q, k, v, attention.segments_from_mask(ids)))
    compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(*args).compile()
    return compiled.memory_analysis().temp_size_in_bytes

  dense = temp_bytes(_kernel("dense"))
  blockwise = temp_bytes(attention.blockwise_attention)
  # Dense holds at least one [B, H, T, T] float32 score tensor (256 MiB here; measured 772 MiB).
  assert dense >= b * h * t * t * 4
  # Blockwise: a few [B, bq, H, bk] float32 block buffers (4 MiB each at 512 x 512; scores,
  # probabilities, dp, ds) and [B, T, H, D]-sized ones (2 MiB in float32: the padded inputs,
  # the dq accumulator, the output, stacked dk / dv): measured 23.4 MiB.
  block = b * h * attention.BLOCK_Q * attention.BLOCK_K * 4
  row = b * t * h * d * 4
  assert blockwise <= 8 * block + 16 * row, (blockwise, dense)
  assert blockwise * 10 < dense
