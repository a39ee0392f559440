"""Parity with transformers' Qwen3-MoE: tiny random Qwen3MoeForCausalLM checkpoints written by
transformers in the test, loaded by our loader: logits on a left-padded batch (float32), the
load-balancing loss, KV-cached greedy generation by our sampler against `generate`, config.json
round trips, and our writer read back by transformers."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.model import hf_checkpoint as hc
from rlscale.model import moe
from rlscale.model import transformer as tfm
from rlscale.sampler.decode import generate
from rlscale.sampler.strategies import SamplingConfig

torch = pytest.importorskip("torch", reason="parity tests need the hf extra (torch)")
transformers = pytest.importorskip("transformers", reason="parity tests need the hf extra (transformers)")

pytestmark = pytest.mark.hf

V, PROMPT, NEW = 64, 7, 6
SIZES = dict(vocab_size=V, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
             num_experts=4, num_experts_per_tok=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=8)
CASES = {
    # Every layer MoE, renormalised top-k (as the Qwen3-MoE checkpoints), untied.
    "all_moe_norm": dict(num_hidden_layers=2, norm_topk_prob=True, tie_word_embeddings=False),
    # Layers 0 and 2 dense: decoder_sparse_step 2 makes 1 and 3 MoE, mlp_only_layers drops 3.
    "mixed_sparse_step": dict(num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[3],
                              norm_topk_prob=False, tie_word_embeddings=True),
    # mlp_only_layers alone: layer 0 dense, layers 1, 2 MoE; attention bias; top-1.
    "mlp_only_bias_top1": dict(num_hidden_layers=3, mlp_only_layers=[0], num_experts_per_tok=1,
                               norm_topk_prob=True, attention_bias=True, tie_word_embeddings=False),
}
MOE_LAYERS = {"all_moe_norm": (0, 1), "mixed_sparse_step": (1,), "mlp_only_bias_top1": (1, 2)}


def _hf_model(overrides: dict, seed: int = 0):
  """A tiny float32 Qwen3MoeForCausalLM with every weight random (router and experts included;
  norms near 1), eager attention, no eos (generate runs to the end)."""
  torch.manual_seed(seed)
  config = transformers.Qwen3MoeConfig(**{**SIZES, **overrides})
  model = transformers.Qwen3MoeForCausalLM(config)
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "norm" in name:
        p.copy_(1.0 + 0.1 * torch.randn_like(p))
      else:
        p.copy_(torch.randn_like(p) / (1.0 if "embed" in name else np.sqrt(p.shape[-1])))
  model.config._attn_implementation = "eager"
  model.generation_config.eos_token_id = None
  return model.eval()


def _prompts():
  """[3, PROMPT] left-padded prompts (lengths 7, 4, 2) and their mask."""
  rng = np.random.default_rng(0)
  tokens = np.zeros((3, PROMPT), np.int64)
  mask = np.zeros((3, PROMPT), np.int64)
  for row, n in enumerate([7, 4, 2]):
    tokens[row, PROMPT - n:] = rng.integers(1, V, size=n)
    mask[row, PROMPT - n:] = 1
  return tokens, mask


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_aux_loss_generation_and_writer_match_transformers(case, tmp_path, v4_layout):
  model = _hf_model(CASES[case])
  model.save_pretrained(tmp_path / "v5")
  config, params = hc.load_hf_checkpoint(tmp_path / "v5")
  assert config.model_type == "qwen3_moe" and config.moe_layers == MOE_LAYERS[case]
  assert config.num_experts_per_tok == CASES[case].get("num_experts_per_tok", 2)
  shapes = jax.eval_shape(lambda k: tfm.init_params(config, k), jax.random.key(0))
  assert sum(x.size for x in jax.tree.leaves(shapes)) == config.num_params()
  assert config.num_params() == sum(p.numel() for p in model.parameters())  # tied: once

  tokens, mask = _prompts()
  ids, attn = torch.tensor(tokens), torch.tensor(mask)
  positions = torch.clamp(attn.cumsum(-1) - 1, min=0)  # the same positions as ours
  with torch.no_grad():
    hf = model(input_ids=ids, attention_mask=attn, position_ids=positions,
               output_router_logits=True)
    hf_generated = model.generate(ids, attention_mask=attn, max_new_tokens=NEW,
                                  min_new_tokens=NEW, do_sample=False, pad_token_id=0)
  real = mask[:, :, None].astype(bool)
  for dispatch in ("dense", "ragged"):
    out = tfm.forward(params, config.replace(moe_dispatch=dispatch), jnp.asarray(tokens, jnp.int32),
                      jnp.asarray(mask, jnp.int32))
    logits = np.where(real, np.asarray(out.logits), 0)
    hf_logits = np.where(real, hf.logits.numpy(), 0)
    np.testing.assert_allclose(logits, hf_logits, atol=1e-4, rtol=1e-4, err_msg=dispatch)
    print(f"{case} {dispatch}: max |logits - hf| = {np.abs(logits - hf_logits).max():.2e}")
  assert np.abs(hf.logits.numpy()).max() > 1.0  # logits large enough for 1e-4 to be a check
  # HF's aux loss pools the MoE layers' router statistics over the unmasked tokens, as ours does.
  np.testing.assert_allclose(moe.load_balancing_loss(out.moe, config.num_experts),
                             hf.aux_loss.item(), rtol=1e-5)

  # KV-cached greedy generation by the sampler (prefill, then one token per step).
  rollout = generate(params, jnp.asarray(tokens, jnp.int32), jnp.asarray(mask, jnp.int32),
                     jax.random.key(0), model_config=config, max_new_tokens=NEW,
                     sampling=SamplingConfig(temperature=0.0), eos_ids=(), pad_id=0)
  np.testing.assert_array_equal(np.asarray(rollout.tokens)[:, PROMPT:],
                                hf_generated[:, PROMPT:].numpy())

  raw = json.loads((tmp_path / "v5" / "config.json").read_text())
  model.save_pretrained(tmp_path / "v4")
  (tmp_path / "v4" / "config.json").write_text(json.dumps(v4_layout(raw)))
  assert hc.load_hf_config(tmp_path / "v4") == config

  # Our writer (per-expert tensors unstacked), read back by transformers: the same weights.
  hc.save_hf_checkpoint(tmp_path / "ours", config, params)
  assert hc.load_hf_config(tmp_path / "ours") == config
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ours",
                                                               attn_implementation="eager")
  assert type(reloaded) is type(model)
  reference = model.state_dict()
  assert set(reloaded.state_dict()) == set(reference)
  for name, tensor in reloaded.state_dict().items():
    np.testing.assert_array_equal(tensor.numpy(), reference[name].numpy(), err_msg=name)


def test_experts_are_stacked_in_expert_order(tmp_path):
  """Expert e's HF gate_proj [I, hidden] is slice [e] of our [E, hidden, I] kernel, transposed."""
  model = _hf_model(CASES["all_moe_norm"])
  model.save_pretrained(tmp_path)
  import safetensors  # pylint: disable=g-import-not-at-top
  with safetensors.safe_open(tmp_path / "model.safetensors", framework="numpy") as f:
    expert2 = f.get_tensor("model.layers.1.mlp.experts.2.gate_proj.weight")
    router = f.get_tensor("model.layers.1.mlp.gate.weight")
  _, params = hc.load_hf_checkpoint(tmp_path)
  np.testing.assert_array_equal(params["layers_1"]["mlp"]["experts"]["gate_proj"][2], expert2.T)
  np.testing.assert_array_equal(params["layers_1"]["mlp"]["gate"]["kernel"], router.T)


def test_saving_experts_under_a_dense_family_is_refused(tmp_path):
  from rlscale.model.config import ModelConfig  # pylint: disable=g-import-not-at-top
  config = ModelConfig(num_experts=4, moe_intermediate_size=8, model_type="qwen3")
  with pytest.raises(ValueError, match="model.num_experts=4 needs model.model_type 'qwen3_moe'"):
    hc.config_to_hf_dict(config)
