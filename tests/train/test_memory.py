"""Memory of the compiled update step (`train.memory`): what chunked response log-probs and
per-layer rematerialisation save, read from XLA's memory analysis without running the step."""

import pytest

from rlscale.model.config import ModelConfig
from rlscale.rl import logprob
from rlscale.parallel import data
from rlscale.train import update as update_lib
from rlscale.train.memory import abstract_batch, update_step_memory
from tests.train import update_problem as problem

MODEL = ModelConfig(vocab_size=4096, hidden_size=64, intermediate_size=128, num_layers=4,
                    num_heads=4, num_kv_heads=2, head_dim=16)
B, TP, TR = 4, 64, 64
T = TP + TR
F32 = 4
LOGITS = B * TR * MODEL.vocab_size * F32  # [b, Tr, V] float32: 4 MiB
PROBS = B * MODEL.num_heads * T * T * F32  # one layer's attention probabilities: 1 MiB


def _temp(model=MODEL, **rl_fields) -> int:
  rl = problem.rl_config("grpo", prompts=1, group=B, **rl_fields)
  return update_step_memory(model, rl, problem.make_optimizer(rl), batch_size=B,
                            prompt_len=TP, response_len=TR).temp_bytes


@pytest.fixture(scope="module")
def whole_logits_temp():
  patch = pytest.MonkeyPatch()
  patch.setattr(logprob, "LOGITS_CHUNK_ELEMENTS", LOGITS)  # one chunk: [b, Tr, V] at once
  try:
    yield _temp()
  finally:
    patch.undo()


def test_chunked_logits_save_the_response_logits(whole_logits_temp, monkeypatch):
  monkeypatch.setattr(logprob, "LOGITS_CHUNK_ELEMENTS", LOGITS // 8)  # 8 chunks of 8 positions
  chunked = _temp()
  # The whole [b, Tr, V] logits and their gradient no longer exist, only one chunk's.
  assert whole_logits_temp - chunked >= 1.5 * LOGITS * (1 - 1 / 8), (whole_logits_temp, chunked)


def test_remat_keeps_one_layer_of_activations(whole_logits_temp, monkeypatch):
  monkeypatch.setattr(logprob, "LOGITS_CHUNK_ELEMENTS", LOGITS)
  remat = _temp(MODEL.replace(remat=True))
  # Every layer but the one being recomputed drops at least its attention probabilities.
  assert whole_logits_temp - remat >= (MODEL.num_layers - 1) * PROBS, (whole_logits_temp, remat)


def test_abstract_batch_matches_what_the_update_step_checks():
  rl = problem.rl_config("ppo", kl_coef=0.1)
  batch = abstract_batch(rl, 8, 3, 2)
  assert batch["tokens"].shape == (8, 5) and batch["advantages"].shape == (8, 2)
  assert {"old_values", "returns", "ref_logp"} <= set(batch)
  update_lib.check_batch(batch, rl)
  placed = abstract_batch(rl, 8, 3, 2, mesh=problem.one_device_mesh())
  assert placed["tokens"].sharding == data.batch_sharding(problem.one_device_mesh(), 2)
