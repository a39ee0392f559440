"""The checks run before a run starts (`runner.preflight`): non-finite floats, the memory estimate
(bytes worked out by hand) and hard bounds refuse a config in one line, before any workdir."""

import dataclasses
import json
import math
import os
import subprocess
import sys
import time

import jax
import ml_collections
import pytest

from rlscale.model.config import ModelConfig
from rlscale.runner import validate
from rlscale.runner import preflight
from rlscale.runner.config_files import load_config_file
from rlscale.train import memory
from tests.runner.runner_configs import DEFAULT
from tests.timeouts import hang_timeout

NAN, INF = float("nan"), float("inf")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONFIGS = os.path.join(REPO, "experiments", "configs")


def _smoke(**fields):
  """experiments/configs/default.py:smoke with dotted-path fields set."""
  config = load_config_file(DEFAULT, "smoke")
  for path, value in fields.items():
    *sections, name = path.split(".")
    node = config
    for key in sections:
      node = node[key]
    node[name] = value
  return config


# --- Finite floats.

@pytest.mark.parametrize("path, value, allowed", [
    ("optim.learning_rate", NAN, "a float > 0"),
    ("optim.learning_rate", INF, "a float > 0"),
    ("optim.learning_rate", -INF, "a float > 0"),
    ("optim.b1", NAN, "a float in [0, 1)"),
    ("optim.eps", INF, "a float >= 0"),
    ("optim.weight_decay", -INF, "a float >= 0"),
    ("optim.grad_clip_norm", NAN, "no clipping"),
    ("rl.kl_coef", INF, "a float >= 0"),
    ("rollout.temperature", NAN, "a float >= 0 (0 = greedy)"),
    ("rollout.top_p", NAN, "a float in (0, 1]"),
    ("sft.learning_rate", INF, "a float > 0"),
    # a float field without a listed range still names itself
    ("task.rel_tol", NAN, "a finite float (see experiments/configs/default.py)"),
    # a placeholder (None) set to a float on the command line
    ("rl.clip_eps_high", INF, "a float >= 0, or None"),
])
def test_non_finite_float_names_field_value_and_range(path, value, allowed):
  with pytest.raises(ValueError) as info:
    preflight.check_finite(_smoke(**{path: value}))
  assert str(info.value) == (f"{path}={value} is not a finite number; allowed: "
                             + preflight.FLOAT_RANGES.get(path, allowed))
  assert allowed in str(info.value)


def test_non_finite_floats_walks_nested_sections_and_sequences():
  tree = {"a": 1.0, "b": {"c": INF, "d": [0.5, NAN, "x", None, 3]}, "e": (2.0, -INF)}
  found = preflight.non_finite_floats(tree)
  assert [path for path, _ in found] == ["b.c", "b.d[1]", "e[1]"]
  assert found[0][1] == INF and math.isnan(found[1][1]) and found[2][1] == -INF


def test_rl_temperature_follows_the_rollout_temperature_reference():
  # rl.temperature is a reference to rollout.temperature: the first path met names it.
  with pytest.raises(ValueError, match=r"^rollout\.temperature=nan"):
    preflight.check_finite(_smoke(**{"rollout.temperature": NAN}))


@pytest.mark.parametrize("name", ["default", "ppo", "dapo", "moe", "hf_qwen3"])
@pytest.mark.parametrize("arg", [None, "smoke"])
def test_shipped_configs_hold_only_finite_floats(name, arg):
  assert preflight.non_finite_floats(load_config_file(os.path.join(CONFIGS, f"{name}.py"), arg)) == []


# --- Memory formulas, by hand.

# vocab 100, width 8, 2 layers, 1 kv head of 4, bfloat16 compute (2 bytes).
TINY = ModelConfig(vocab_size=100, hidden_size=8, intermediate_size=16, num_layers=2, num_heads=2,
                   num_kv_heads=1, head_dim=4, dtype="bfloat16")


def test_memory_formulas_by_hand():
  assert memory.dtype_bytes("float32") == 4 and memory.dtype_bytes("bfloat16") == 2
  # 3 rows x 2 layers x 2 (k, v) x 1 kv head x 4 x 5 slots x 2 bytes
  assert memory.kv_cache_bytes(TINY, rows=3, slots=5) == 3 * 2 * 2 * 1 * 4 * 5 * 2 == 480
  assert memory.logits_bytes(TINY, 7) == 7 * 100 * 4 == 2800
  # layer inputs 7 tokens x 2 layers x 8 x 2 bytes = 224, + logits of 3 positions 3 x 100 x 4
  assert memory.activation_bytes(TINY, 7, 3) == 224 + 1200
  # 3 rows x (2 x (4 + 5) + 3 x 5) x 4 bytes
  assert memory.host_rollout_bytes(3, 4, 5) == 3 * 33 * 4 == 396
  assert memory.train_state_bytes(1000) == 12_000
  assert memory.train_state_bytes(1000, trained=False) == 4000


@pytest.mark.parametrize("microbatches, rows, platform, noise, expected", [
    (4, 16, "cpu", False, 4),  # 16 / 4
    (None, 16, "cpu", False, 16),  # 16 x 17 = 272 tokens: one slice below 1,024
    (None, 256, "cpu", False, 61),  # ceil(1,024 / 17): the CPU's slices hold >= 1,024 tokens
    (None, 256, "gpu", False, 256),  # one slice on accelerators
    (None, 256, "gpu", True, 1),  # the noise scale's split is not known: one row
])
def test_update_microbatch_rows(microbatches, rows, platform, noise, expected):
  rl = ml_collections.ConfigDict({"microbatches": microbatches})
  assert preflight.update_microbatch_rows(rl, rows, 17, platform, noise) == expected


@pytest.mark.parametrize("n, text", [(0, "0 B"), (512, "512 B"), (1536, "1.5 KiB"),
                                     (int(23.5 * 2**30), "23.5 GiB"), (10 * 2**40, "10 TiB")])
def test_format_bytes(n, text):
  assert preflight.format_bytes(n) == text


# The smoke config's built-in model: vocab 100 (character tokenizer), width 128, MLP 384, 2 layers,
# 4 heads, 2 kv heads of 32, float32. Parameters per layer: q 128 x 128, k and v 2 x 128 x 64,
# o 128 x 128 (49,152), q/k norms 2 x 32, 2 norms 2 x 128, MLP 3 x 128 x 384 (147,456): 196,928;
# x 2 layers + final norm 128 + embedding 100 x 128 = 12,800 (tied).
SMOKE_PARAMS = 2 * 196_928 + 128 + 12_800
# B = 4 x 4 = 16 rows of 16 prompt + 8 response = 24 slots.
SMOKE_STATE = SMOKE_PARAMS * 12
SMOKE_KV = 16 * 24 * 2 * 2 * 2 * 32 * 4  # rows x slots x layers x (k, v) x kv heads x 32 x 4 bytes
SMOKE_LOGITS = 16 * 100 * 4
SMOKE_SAMPLED = 16 * 8 * 12
SMOKE_HOST = 16 * (2 * 24 + 3 * 8) * 4
SMOKE_UPDATE = 272 * 2 * 128 * 4 + 16 * 100 * 4  # 284,928: layer inputs + one logit row each
# The SFT warm start: sft.batch_size 64 rows padded to rollout.max_prompt_tokens 16 + 8 = 24
# tokens (builders.warm_start pads to the largest bucket), jitted on one device.
SMOKE_SFT_GRADS = SMOKE_PARAMS * 4
SMOKE_SFT_ACTIVATIONS = 64 * 24 * 2 * 128 * 4 + 64 * 8 * 100 * 4  # layer inputs + response logits
SMOKE_SFT_HOST = 64 * (2 * 24 + 8) * 4  # tokens, input_mask [64, 24] + response_mask [64, 8]


def _phases(config, pool, platform="cpu"):
  checked = validate.check_config(config)
  model = preflight.estimate_model_config(config)
  return {p.name: p for p in preflight.estimate_memory(config, checked, model, pool,
                                                       platform=platform)}


@pytest.fixture
def one_device():
  if jax.device_count() != 1:
    pytest.skip("hand-computed bytes are for one device")


def test_estimate_on_a_cpu_by_hand(one_device):  # pylint: disable=unused-argument
  config = _smoke()
  assert preflight.estimate_model_config(config).num_params() == SMOKE_PARAMS == 406_784
  phases = _phases(config, preflight.Pool("RAM", 2**40, devices=1))
  assert phases["the rollout"].total == (SMOKE_STATE + SMOKE_KV + SMOKE_LOGITS + SMOKE_SAMPLED
                                         + SMOKE_HOST) == 5_287_168
  # 16 held-out prompts x eval.pass_k 2 = 32 rows: twice the rollout's batch arrays.
  assert phases["the held-out evaluation"].total == SMOKE_STATE + 2 * (
      SMOKE_KV + SMOKE_LOGITS + SMOKE_SAMPLED + SMOKE_HOST)
  # Update: gradients 4 bytes per parameter; a microbatch of 16 rows x (16 + 1) tokens = 272
  # (below the CPU's 1,024-token slices) keeps 2 layers x 128 x 4 bytes per token, and logits of
  # one position per row, 16 x 100 x 4 bytes.
  assert phases["the update step"].total == (SMOKE_STATE + SMOKE_PARAMS * 4 + SMOKE_UPDATE
                                             + SMOKE_HOST)


def test_estimate_counts_the_kl_reference_and_the_critic(one_device):  # pylint: disable=unused-argument
  pool = preflight.Pool("RAM", 2**40, devices=1)
  kl = _phases(_smoke(**{"rl.kl_coef": 0.1}), pool)["the rollout"].total
  assert kl - _phases(_smoke(), pool)["the rollout"].total == SMOKE_PARAMS * 4
  ppo = load_config_file(os.path.join(CONFIGS, "ppo.py"), "smoke")
  plain = _phases(ppo, pool)["the rollout"].terms
  critic = dict(plain)[f"critic and its Adam moments {SMOKE_PARAMS + 129:,} x 12 bytes"]
  assert critic == (SMOKE_PARAMS + 128 + 1) * 12  # + the value head's kernel and bias


def test_estimate_beside_an_accelerator(one_device):  # pylint: disable=unused-argument
  config = _smoke()
  device = _phases(config, preflight.Pool("GPU", 2**40, devices=1), platform="gpu")
  # No host arrays on the device; the update's microbatch is the whole batch (16 x 17 tokens).
  assert device["the rollout"].total == SMOKE_STATE + SMOKE_KV + SMOKE_LOGITS + SMOKE_SAMPLED
  assert device["the update step"].total == SMOKE_STATE + SMOKE_PARAMS * 4 + SMOKE_UPDATE
  assert device["the SFT warm start"].total == (SMOKE_STATE + SMOKE_SFT_GRADS
                                                + SMOKE_SFT_ACTIVATIONS)
  host = _phases(config, preflight.Pool("RAM", 2**40, devices=0), platform="gpu")
  assert list(host) == ["the SFT warm start's host arrays", "the rollout's host arrays"]
  assert host["the SFT warm start's host arrays"].total == SMOKE_SFT_HOST
  assert host["the rollout's host arrays"].total == SMOKE_HOST


def test_estimate_counts_the_sft_warm_start_by_hand(one_device):  # pylint: disable=unused-argument
  pool = preflight.Pool("RAM", 2**40, devices=1)
  phases = _phases(_smoke(), pool)
  assert list(phases)[0] == "the SFT warm start"  # it runs first
  # params + Adam 406,784 x 12, gradients x 4, 64 x 24 = 1,536 tokens x 2 layers x 128 x 4 bytes
  # = 1,572,864 + logits 64 x 8 x 100 x 4 = 204,800, host arrays 64 x 56 x 4 = 14,336.
  assert SMOKE_SFT_ACTIVATIONS == 1_777_664 and SMOKE_SFT_HOST == 14_336
  sft = phases["the SFT warm start"]
  assert sft.total == (SMOKE_STATE + SMOKE_SFT_GRADS + SMOKE_SFT_ACTIVATIONS
                       + SMOKE_SFT_HOST) == 8_300_544
  assert sft.sizes == ("sft.batch_size=64 rows of rollout.max_prompt_tokens=16 + "
                       "rollout.max_new_tokens=8 tokens")
  # The prompt width is rollout.max_prompt_tokens itself, not its smallest bucket.
  wide = _phases(_smoke(**{"rollout.max_prompt_tokens": 100}), pool)["the SFT warm start"]
  assert wide.total - sft.total == 64 * 84 * (2 * 128 * 4 + 2 * 4)  # + activations and host
  # Scales with sft.batch_size; skipped without a warm start (sft.steps = 0).
  big = _phases(_smoke(**{"sft.batch_size": 128}), pool)["the SFT warm start"]
  assert big.total - sft.total == SMOKE_SFT_ACTIVATIONS + SMOKE_SFT_HOST
  assert "the SFT warm start" not in _phases(_smoke(**{"sft.steps": 0}), pool)


def test_hf_model_sizes_come_from_config_json_alone(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps(dict(
      architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=300, hidden_size=64,
      intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
      head_dim=16, tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=10000.0)))
  config = load_config_file(os.path.join(CONFIGS, "hf_qwen3.py"), "smoke")
  config.model.checkpoint_path = str(tmp_path)  # no weights, no tokenizer: not read
  model = preflight.estimate_model_config(config)
  assert (model.vocab_size, model.num_layers, model.num_kv_heads, model.head_dim,
          model.dtype) == (300, 2, 2, 16, "bfloat16")


def test_memory_pools(monkeypatch):
  class Device:
    def __init__(self, platform, stats):
      self.platform, self._stats, self.device_kind = platform, stats, "H100"

    def memory_stats(self):
      return self._stats

  monkeypatch.setattr(preflight, "host_ram_bytes", lambda: 64 * 2**30)
  assert preflight.memory_pools([Device("cpu", None)] * 2) == [
      preflight.Pool("this machine's RAM", 64 * 2**30, 2)]
  gpu, host = preflight.memory_pools([Device("gpu", {"bytes_limit": 80 * 2**30})])
  assert (gpu.limit, gpu.devices, host.limit, host.devices) == (80 * 2**30, 1, 64 * 2**30, 0)
  assert preflight.memory_pools([Device("tpu", None)])[0].limit is None  # unknown: not checked


def test_check_memory_refuses_in_one_line_naming_the_fields(one_device):  # pylint: disable=unused-argument
  # With the warm start, the SFT phase (7.92 MiB) comes first.
  with pytest.raises(ValueError, match=r"^sft\.batch_size=64 rows of rollout\.max_prompt_tokens=16 "
                     r"\+ rollout\.max_new_tokens=8 tokens need ~7\.92 MiB for the SFT warm "
                     r"start, .* lower sft\.batch_size, rollout\.max_prompt_tokens or "
                     r"rollout\.max_new_tokens \(sft\.steps=0 skips the warm start\)"):
    preflight.check_memory(_smoke(), validate.check_config(_smoke()),
                           pools=[preflight.Pool("a 5 MiB test pool", 5 * 2**20, devices=1)])
  config = _smoke(**{"sft.steps": 0})
  checked = validate.check_config(config)
  pool = preflight.Pool("a 5 MiB test pool", 5 * 2**20, devices=1)  # the rollout needs 5.04 MiB
  with pytest.raises(ValueError) as info:
    preflight.check_memory(config, checked, pools=[pool])
  message = str(info.value)
  assert message.startswith("rl.prompts_per_step=4 x rl.group_size=4 responses of "
                            "rollout.max_new_tokens=8 tokens need ~5.04 MiB for the rollout, "
                            "more than a 5 MiB test pool (5 MiB): parameters and Adam moments "
                            "406,784 x 12 bytes = 4.66 MiB + ")
  assert "lower rl.prompts_per_step x rl.group_size or rollout.max_new_tokens" in message
  assert "\n" not in message and preflight.SKIP_MEMORY_ENV in message
  preflight.check_memory(config, checked, pools=[preflight.Pool("big", 2**30, devices=1)])
  preflight.check_memory(config, checked, pools=[preflight.Pool("unknown", None, devices=1)])


def test_hard_bound_on_int32_indices(monkeypatch):
  # 4 x 2^27 rows x 24 tokens = 1.3e10 elements > 2^31 - 1, whatever the memory.
  config = _smoke(**{"rl.group_size": 2**27})
  monkeypatch.setenv(preflight.SKIP_MEMORY_ENV, "1")
  with pytest.raises(ValueError, match=r"rl\.prompts_per_step x rl\.group_size = 536,870,912 rows "
                     r"x \(rollout\.max_prompt_tokens \+ rollout\.max_new_tokens = 24\) tokens = "
                     r"12,884,901,888 elements in one array, more than 2\^31 - 1"):
    preflight.check_config(config)
  monkeypatch.delenv(preflight.SKIP_MEMORY_ENV)
  with pytest.raises(ValueError, match="need ~.* for the rollout"):  # the memory check comes first
    preflight.check_config(config)


def test_hard_bound_on_the_sft_batch(monkeypatch):
  # 2^27 SFT rows x 24 tokens = 3.2e9 elements > 2^31 - 1; nothing else is that wide.
  monkeypatch.setenv(preflight.SKIP_MEMORY_ENV, "1")
  with pytest.raises(ValueError, match=r"^sft\.batch_size = 134,217,728 rows x \(rollout\."
                     r"max_prompt_tokens \+ rollout\.max_new_tokens = 24\) tokens = "
                     r"3,221,225,472 elements .* lower sft\.batch_size, rollout\.max_prompt_tokens "
                     r"or rollout\.max_new_tokens$"):
    preflight.check_config(_smoke(**{"sft.batch_size": 2**27}))
  preflight.check_config(_smoke(**{"sft.batch_size": 2**27, "sft.steps": 0}))  # no warm start


@pytest.mark.parametrize("path", ["seed", "sft.seed", "task.eval_seed"])
@pytest.mark.parametrize("value", [2**63, 10**20, -2**63 - 1])
def test_seeds_outside_what_jax_random_key_takes_are_refused(path, value):
  with pytest.raises(ValueError) as info:
    preflight.check_config(_smoke(**{path: value}))
  assert str(info.value) == (f"{path}={value!r} is not a valid seed; allowed: an int in "
                             "[-2**63, 2**63 - 1] (what jax.random.key takes)")


@pytest.mark.parametrize("path", ["seed", "sft.seed", "task.eval_seed"])
@pytest.mark.parametrize("value", [0, 2**63 - 1, -1, -2**63])
def test_seeds_jax_random_key_takes_pass(path, value):
  jax.random.key(value)  # what the range is taken from
  preflight.check_config(_smoke(**{path: value}))


def test_seed_fields_walk_every_section():
  config = ml_collections.ConfigDict({"seed": 1, "a": {"seed": None, "b": {"data_seed": 2}},
                                      "seeds": 3, "seed_count": 4})
  assert sorted(preflight.seed_fields(config)) == [("a.b.data_seed", 2), ("a.seed", None),
                                                   ("seed", 1)]


def test_a_critic_seeds_its_head_with_seed_plus_one():
  ppo = load_config_file(os.path.join(CONFIGS, "ppo.py"), "smoke")
  ppo.seed = 2**63 - 1
  with pytest.raises(ValueError, match=r"^seed=9223372036854775807 is not a valid seed with a "
                     r"critic .* allowed: an int in \[-2\*\*63, 2\*\*63 - 2\]$"):
    preflight.check_config(ppo)


@pytest.mark.parametrize("name", ["default", "ppo", "dapo", "moe"])
@pytest.mark.parametrize("arg", [None, "smoke"])
def test_shipped_configs_pass_and_are_cheap(name, arg):
  config = load_config_file(os.path.join(CONFIGS, f"{name}.py"), arg)
  preflight.check_config(config)  # backend started
  start = time.perf_counter()
  preflight.check_config(config)
  assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize("arg", [None, "smoke"])
def test_hf_qwen3_at_qwen3_0_6b_sizes_passes_on_24_gib(tmp_path, arg, monkeypatch):
  """hf_qwen3 with Qwen3-0.6B's config.json on a 24 GiB machine is not refused: the full config's
  rollout counts 23.4 GiB from below (float32 weights + Adam + KL reference 8.9 GiB, the bf16 KV
  cache of 256 rows x 528 slots 14.4 GiB), under 24 GiB. (The real run needs more: temporaries,
  longer prompt buckets; the check refuses only what cannot fit.)"""
  (tmp_path / "config.json").write_text(json.dumps(dict(
      architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=151_936,
      hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
      num_key_value_heads=8, head_dim=128, tie_word_embeddings=True, rms_norm_eps=1e-6,
      rope_theta=1_000_000.0)))
  config = load_config_file(os.path.join(CONFIGS, "hf_qwen3.py"), arg)
  config.model.checkpoint_path = str(tmp_path)
  config.task.data_path = str(tmp_path / "unused.jsonl")
  monkeypatch.setattr(preflight, "host_ram_bytes", lambda: 24 * 2**30)
  preflight.check_config(config)


# --- The command line: one line, exit 2, no workdir, before the warm start.

def _run_main(workdir, override):
  env = {k: v for k, v in os.environ.items() if k not in ("RLSCALE_VERBOSE",
                                                           preflight.SKIP_MEMORY_ENV)}
  start = time.perf_counter()
  result = subprocess.run(
      [sys.executable, "-m", "rlscale.main", "--config=experiments/configs/default.py:smoke",
       f"--workdir={workdir}", f"--config.{override}"],
      cwd=REPO, env=dict(env, JAX_PLATFORMS="cpu"), capture_output=True, text=True,
      timeout=hang_timeout(30))
  return result, time.perf_counter() - start


@pytest.mark.parametrize("override, starts", [
    ("optim.learning_rate=nan", "error: optim.learning_rate=nan is not a finite number; "
                                "allowed: a float > 0"),
    ("rl.group_size=100000000", "error: rl.prompts_per_step=4 x rl.group_size=100000000 "
                                "responses of rollout.max_new_tokens=8 tokens need ~"),
    # the warm start runs first, at the widest rows: it is refused first
    ("rollout.max_new_tokens=100000000", "error: sft.batch_size=64 rows of "
                                         "rollout.max_prompt_tokens=16 + "
                                         "rollout.max_new_tokens=100000000 tokens need ~"),
    ("sft.batch_size=100000000", "error: sft.batch_size=100000000 rows of "
                                 "rollout.max_prompt_tokens=16 + rollout.max_new_tokens=8 tokens "
                                 "need ~2.55 TiB for the SFT warm start"),
    ("rollout.max_prompt_tokens=10000000", "error: sft.batch_size=64 rows of "
                                           "rollout.max_prompt_tokens=10000000 + "
                                           "rollout.max_new_tokens=8 tokens need ~615 GiB for "
                                           "the SFT warm start"),
    ("seed=9223372036854775808", "error: seed=9223372036854775808 is not a valid seed; allowed: "
                                 "an int in [-2**63, 2**63 - 1]"),
])
def test_refused_before_the_workdir_in_one_line(tmp_path, override, starts):
  workdir = tmp_path / "w"
  result, seconds = _run_main(workdir, override)
  assert result.returncode == 2, result.stderr
  lines = [line for line in result.stderr.splitlines()
           if line.strip() and not line.startswith(("W1", "I1", "WARNING"))]
  assert len(lines) == 1 and lines[0].startswith(starts), result.stderr
  assert "Traceback" not in result.stderr and result.stdout == ""  # no "model:" or SFT lines
  assert not workdir.exists()
  # Imports take ~2 s on an idle 2-core machine; the smoke run's warm start alone takes ~10 s.
  assert seconds < hang_timeout(3), seconds


def test_an_fsdp_axis_that_leaves_the_state_replicated_is_refused_before_the_warm_start():
  """fsdp = 3 divides none of the default model's dimensions (hidden 128, MLP 384 = 3 x 128 is
  split over tensor, not fsdp): every parameter stays whole on each device, refused in one line
  from the abstract state (an AbstractMesh of 3 devices: none is needed)."""
  config = load_config_file(DEFAULT, "smoke")
  checked = validate.check_config(config)
  mesh = jax.sharding.AbstractMesh((1, 3, 1), ("data", "fsdp", "tensor"))
  with pytest.raises(ValueError, match=r"leaves 100.0% of the state's bytes replicated along "
                                       r"fsdp .*choose an fsdp size that divides"):
    preflight.check_sharding(config, dataclasses.replace(checked, mesh=mesh))
  preflight.check_sharding(config, checked)  # the one-device mesh: nothing to refuse


def test_host_threads_with_several_processes_is_refused_in_one_line(monkeypatch):
  monkeypatch.setattr(validate.hosts_lib, "current", lambda: validate.hosts_lib.Hosts(0, 2))
  config = load_config_file(DEFAULT, "smoke")
  config.rollout.host_threads = 2
  with pytest.raises(ValueError, match=r"^rollout.host_threads=2 splits each process's rows into "
                                       r"chunks sampled apart; with 2 processes it must be 1$"):
    validate.check_config(config)
