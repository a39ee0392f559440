"""The Sampler on this process's one device: buckets, compile counts, the key, host-thread
chunks, shared prefill, the argument checks. Meshes of several devices:
test_sampler_mesh.py."""

import jax
import numpy as np
import pytest

from rlscale.model import init_params
from rlscale.model.transformer import param_shardings
from rlscale.parallel import mesh as mesh_lib
from rlscale.parallel.rules import DEFAULT_RULES
from rlscale.sampler.decode import generate, pad_to_bucket
from rlscale.sampler.sampler import Sampler
from rlscale.sampler.strategies import SamplingConfig
from tests.sampler.test_decode import (CONFIG, GARBLED_PROMPTS, GREEDY, MOE, TR, model_params,
                                      prompts, run_generate)


def _four_prompts():
  """prompts() and its first row again: P = 4."""
  tokens, mask = prompts()
  return np.concatenate([tokens, tokens[:1]]), np.concatenate([mask, mask[:1]])


def test_sampler_defaults_to_a_data_mesh_over_every_device():
  sampler = Sampler(CONFIG, TR, GREEDY, eos_ids=(), pad_id=0)
  assert dict(sampler.mesh.shape) == {"data": len(jax.devices()), "fsdp": 1, "tensor": 1}
  assert sampler.num_devices == len(jax.devices())
  assert sampler.param_shardings is None  # derived on the first call
  tokens, mask = prompts()
  sampler(model_params(), tokens, mask, jax.random.key(0))
  expected = param_shardings(model_params(), sampler.mesh)
  assert jax.tree.leaves(sampler.param_shardings) == jax.tree.leaves(expected)


def test_sampler_buckets_and_compiles_once_per_bucket():
  sampler = Sampler(CONFIG, TR, SamplingConfig(), eos_ids=(), pad_id=0, prompt_buckets=(8, 16))
  tokens, mask = prompts()
  rng = jax.random.key(5)
  out = sampler(model_params(), tokens, mask, rng)
  assert isinstance(out.tokens, np.ndarray) and out.tokens.shape == (3, 8 + TR)
  assert out.experts is None
  # One key for the batch: generate on the prompt padded to the bucket, with fold_in(rng, 0).
  padded, padded_mask = pad_to_bucket(tokens, mask, (8,), pad_id=0)
  expected = run_generate(padded, padded_mask, rng=jax.random.fold_in(rng, 0),
                       sampling=SamplingConfig())
  np.testing.assert_array_equal(out.tokens, expected.tokens)
  np.testing.assert_allclose(out.logp, expected.logp, atol=1e-6)
  np.testing.assert_array_equal(out.num_steps, expected.num_steps)
  sampler(model_params(), tokens[:, 1:], mask[:, 1:], jax.random.key(6))  # Tp 4 -> same bucket 8
  sampler(model_params(), tokens[:, 2:], mask[:, 2:], jax.random.key(7))
  assert sampler.num_traces == 1
  wide = np.pad(tokens, ((0, 0), (7, 0)))
  sampler(model_params(), wide, (wide != 0).astype(np.int32), rng)  # Tp 12 -> bucket 16
  assert sampler.num_traces == 2
  sampler(model_params(), tokens, mask, rng, sampling=GREEDY)  # another strategy compiles once more
  sampler(model_params(), tokens, mask, rng, sampling=GREEDY)
  assert sampler.num_traces == 3


def test_sampler_takes_host_or_placed_params_explicit_shardings_and_list_rules():
  tokens, mask = prompts()
  sampler = Sampler(CONFIG, TR, SamplingConfig(), eos_ids=(7,), pad_id=0, prompt_buckets=(8,))
  expected = sampler(model_params(), tokens, mask, jax.random.key(2))
  host = jax.tree.map(np.asarray, model_params())
  np.testing.assert_array_equal(sampler(host, tokens, mask, jax.random.key(2)).tokens,
                                expected.tokens)
  mesh = mesh_lib.make_mesh(mesh_lib.mesh_config(), jax.devices()[:1])
  shardings = param_shardings(model_params(), mesh)
  # Rules as a ConfigDict gives them (lists), shardings given, params already on the mesh.
  other = Sampler(CONFIG, TR, SamplingConfig(), eos_ids=(7,), pad_id=0, mesh=mesh,
                  prompt_buckets=(8,), param_shardings=shardings,
                  rules=[[name, list(axes) if isinstance(axes, tuple) else axes]
                         for name, axes in DEFAULT_RULES])
  assert other.param_shardings is shardings
  placed = jax.device_put(model_params(), shardings)
  out = other(placed, tokens, mask, jax.random.key(2))
  np.testing.assert_array_equal(out.tokens, expected.tokens)
  np.testing.assert_allclose(out.logp, expected.logp, atol=1e-6)


@pytest.mark.parametrize("edit, message", GARBLED_PROMPTS)
def test_sampler_rejects_prompts_it_would_garble(edit, message):
  tokens, mask = edit(*prompts())
  sampler = Sampler(CONFIG, TR, GREEDY, eos_ids=(), pad_id=0, prompt_buckets=(8,))
  with pytest.raises(ValueError, match=message):
    sampler(model_params(), tokens, mask, jax.random.key(0))


@pytest.mark.parametrize("edit, rng, message", [
    # A float id would be truncated to an int without a word.
    (lambda t, m: (t + 0.7, m), jax.random.key(0), r"prompt_tokens must hold integer token ids"),
    (lambda t, m: (t, m * 1.0), jax.random.key(0), r"prompt_mask must be of an integer or bool"),
    (lambda t, m: (t, m), 0, r"rng must be one PRNG key \(jax.random.key\(seed\)\), got int"),
    (lambda t, m: (t, m), jax.random.PRNGKey(0), r"rng must be one PRNG key .* uint32 \(2,\)"),
])
def test_sampler_rejects_wrong_dtypes_and_keys_in_one_line(edit, rng, message):
  tokens, mask = edit(*prompts())
  sampler = Sampler(CONFIG, TR, GREEDY, eos_ids=(), pad_id=0, prompt_buckets=(8,))
  with pytest.raises(ValueError, match=message):
    sampler(model_params(), tokens, mask, rng)


def test_sampler_rejects_long_prompts_bad_groups_and_strategies():
  sampler = Sampler(CONFIG, TR, GREEDY, eos_ids=(), pad_id=0, prompt_buckets=(8,))
  tokens, mask = prompts()
  with pytest.raises(ValueError, match="exceeds the largest prompt bucket 8"):
    sampler(model_params(), np.full((3, 9), 5, np.int32), np.ones((3, 9), np.int32),
            jax.random.key(0))
  with pytest.raises(ValueError, match="samples_per_prompt must be an int >= 1, got 0"):
    sampler(model_params(), tokens, mask, jax.random.key(0), samples_per_prompt=0)
  with pytest.raises(ValueError, match="must both be"):
    sampler(model_params(), tokens, mask[:, 1:], jax.random.key(0))
  with pytest.raises(ValueError, match="sampling must be a SamplingConfig, got dict"):
    sampler(model_params(), tokens, mask, jax.random.key(0), sampling={"temperature": 1.0})
  assert sampler.num_traces == 0  # every check runs before anything is compiled


def test_sampler_checks_its_arguments_at_construction_naming_them():
  # eos_ids=tokenizer.eos_id (an int, not the tuple eos_ids) raised "'int' object is not iterable".
  with pytest.raises(ValueError, match=r"eos_ids must be a sequence of token ids .*got 2"):
    Sampler(CONFIG, TR, GREEDY, eos_ids=2, pad_id=0)
  # max_new_tokens=0 was only rejected at the first call.
  with pytest.raises(ValueError, match="max_new_tokens must be an int >= 1, got 0"):
    Sampler(CONFIG, 0, GREEDY, eos_ids=(), pad_id=0)
  with pytest.raises(ValueError, match="host_threads must be an int >= 1, got True"):
    Sampler(CONFIG, TR, GREEDY, eos_ids=(), pad_id=0, host_threads=True)
  with pytest.raises(ValueError, match="host_threads must be an int >= 1, got 0"):
    Sampler(CONFIG, TR, GREEDY, eos_ids=(), pad_id=0, host_threads=0)
  with pytest.raises(ValueError, match=r"pad_id -1 is outside"):
    Sampler(CONFIG, TR, GREEDY, eos_ids=(), pad_id=-1)
  with pytest.raises(ValueError, match=r"eos_ids \(64,\) must lie in the model's vocabulary"):
    Sampler(CONFIG, TR, GREEDY, eos_ids=(64,), pad_id=0)
  with pytest.raises(ValueError, match="prompt_buckets"):
    Sampler(CONFIG, TR, GREEDY, eos_ids=(), pad_id=0, prompt_buckets=())
  with pytest.raises(ValueError, match="sampling must be a SamplingConfig"):
    Sampler(CONFIG, TR, 1.0, eos_ids=(), pad_id=0)


def test_sampler_takes_numpy_integer_counts():
  # Counts computed with numpy (np.int64) were rejected as "must be an int".
  tokens, mask = prompts()
  expected = Sampler(CONFIG, TR, SamplingConfig(), eos_ids=(), pad_id=0, prompt_buckets=(8,))(
      model_params(), tokens, mask, jax.random.key(3), samples_per_prompt=2)
  sampler = Sampler(CONFIG, np.int64(TR), SamplingConfig(), eos_ids=np.array([], np.int32),
                    pad_id=np.int32(0), prompt_buckets=(8,))
  out = sampler(model_params(), tokens, mask, jax.random.key(3), samples_per_prompt=np.int64(2))
  np.testing.assert_array_equal(out.tokens, expected.tokens)
  assert type(sampler.max_new_tokens) is int


def test_sampler_samples_per_prompt_shares_prefill_and_equals_repeated_prompts():
  sampler = Sampler(CONFIG, TR, SamplingConfig(), eos_ids=(7,), pad_id=0, prompt_buckets=(8,))
  tokens, mask = prompts()
  rng = jax.random.key(5)
  grouped = sampler(model_params(), tokens, mask, rng, samples_per_prompt=3)
  repeated = sampler(model_params(), np.repeat(tokens, 3, 0), np.repeat(mask, 3, 0), rng)
  assert grouped.tokens.shape == (9, 8 + TR)
  np.testing.assert_array_equal(grouped.tokens, repeated.tokens)
  # Prefills of 3 and 9 rows sum in other orders: float rounding only.
  np.testing.assert_allclose(grouped.logp, repeated.logp, atol=1e-5)
  np.testing.assert_array_equal(grouped.response_mask, repeated.response_mask)
  np.testing.assert_array_equal(grouped.prompt_mask, repeated.prompt_mask)
  assert sampler.num_traces == 2  # one per G


def test_sampler_host_threads_split_rows_into_chunks_with_their_own_keys():
  sampler = Sampler(CONFIG, TR, SamplingConfig(), eos_ids=(), pad_id=0, prompt_buckets=(8,),
                    host_threads=2)
  tokens, mask = _four_prompts()  # B = 4
  rng = jax.random.key(8)
  first = sampler(model_params(), tokens, mask, rng)  # compiles on the calling thread
  again = sampler(model_params(), tokens, mask, rng)  # the two chunks run concurrently
  np.testing.assert_array_equal(again.tokens, first.tokens)
  assert sampler.num_traces == 1
  padded, padded_mask = pad_to_bucket(tokens, mask, (8,), pad_id=0)
  for chunk in range(2):  # chunk c samples with fold_in(fold_in(rng, c), 0)
    rows = slice(2 * chunk, 2 * chunk + 2)
    key = jax.random.fold_in(jax.random.fold_in(rng, chunk), 0)
    expected = run_generate(padded[rows], padded_mask[rows], rng=key, sampling=SamplingConfig())
    np.testing.assert_array_equal(again.tokens[rows], expected.tokens)
    np.testing.assert_allclose(again.logp[rows], expected.logp, atol=1e-6)
  # B = 3 has no 2-way split: one chunk, the plain key.
  odd = sampler(model_params(), tokens[:3], mask[:3], rng)
  expected = run_generate(padded[:3], padded_mask[:3], rng=jax.random.fold_in(rng, 0),
                       sampling=SamplingConfig())
  np.testing.assert_array_equal(odd.tokens, expected.tokens)


def test_sampler_samples_per_prompt_shares_prefill_within_chunks():
  sampler = Sampler(CONFIG, TR, SamplingConfig(), eos_ids=(), pad_id=0, prompt_buckets=(8,),
                    host_threads=2)
  tokens, mask = _four_prompts()  # P = 4
  rng = jax.random.key(9)
  sampler(model_params(), tokens, mask, rng, samples_per_prompt=2)
  out = sampler(model_params(), tokens, mask, rng, samples_per_prompt=2)  # chunks concurrently
  assert out.tokens.shape == (8, 8 + TR)
  padded, padded_mask = pad_to_bucket(tokens, mask, (8,), pad_id=0)
  # Chunk c: prompts 2c, 2c+1 -> rows 4c..4c+3, key fold_in(fold_in(rng, c), 0).
  for chunk in range(2):
    key = jax.random.fold_in(jax.random.fold_in(rng, chunk), 0)
    chunk_prompts = slice(2 * chunk, 2 * chunk + 2)
    expected = run_generate(np.repeat(padded[chunk_prompts], 2, 0),
                         np.repeat(padded_mask[chunk_prompts], 2, 0), rng=key,
                         sampling=SamplingConfig())
    np.testing.assert_array_equal(out.tokens[4 * chunk:4 * chunk + 4], expected.tokens)
    np.testing.assert_allclose(out.logp[4 * chunk:4 * chunk + 4], expected.logp, atol=1e-6)


@pytest.mark.parametrize("host_threads,num_prompts,group",
                         [(2, 3, 2), (2, 1, 2), (3, 1, 3), (3, 2, 3)])
def test_sampler_samples_per_prompt_equals_repeated_prompts_with_host_threads(
    host_threads, num_prompts, group):
  # P x G rows split into more chunks than P allows (P = 3, G = 2, 2 threads: 6 rows in 2 chunks
  # of 3) gave other samples than the repeated prompts (1 chunk of 3 prompts, the plain key).
  sampler = Sampler(CONFIG, TR, SamplingConfig(), eos_ids=(7,), pad_id=0, prompt_buckets=(8,),
                    host_threads=host_threads)
  tokens, mask = prompts()
  tokens, mask = tokens[:num_prompts], mask[:num_prompts]
  rng = jax.random.key(5)
  grouped = sampler(model_params(), tokens, mask, rng, samples_per_prompt=group)
  repeated = sampler(model_params(), np.repeat(tokens, group, 0), np.repeat(mask, group, 0), rng)
  np.testing.assert_array_equal(grouped.tokens, repeated.tokens)
  np.testing.assert_allclose(grouped.logp, repeated.logp, atol=1e-6)
  np.testing.assert_array_equal(grouped.response_mask, repeated.response_mask)


def test_sampler_returns_the_experts_of_a_moe_model():
  params = init_params(MOE, jax.random.key(1))
  tokens, mask = prompts()
  sampler = Sampler(MOE, TR, SamplingConfig(), eos_ids=(), pad_id=0, prompt_buckets=(8,))
  rng = jax.random.key(2)
  out = sampler(params, tokens, mask, rng, samples_per_prompt=2)
  padded, padded_mask = pad_to_bucket(tokens, mask, (8,), pad_id=0)
  expected = generate(params, padded, padded_mask, jax.random.fold_in(rng, 0), model_config=MOE,
                      max_new_tokens=TR, sampling=SamplingConfig(), eos_ids=(), pad_id=0,
                      samples_per_prompt=2)
  assert isinstance(out.experts, np.ndarray) and out.experts.shape == (6, TR, 2, 2)
  np.testing.assert_array_equal(out.experts, expected.experts)
  np.testing.assert_array_equal(out.tokens, expected.tokens)
