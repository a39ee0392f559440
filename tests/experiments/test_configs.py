"""Every config file in experiments/configs runs its smoke variant end to end.

The HF config runs on a tiny random Qwen3 checkpoint and a 12-line GSM8K-style JSONL written by
the test (tests/experiments/tiny_hf.py), and transformers loads the exported policy with its
tokenizer. Built-in-model configs run their smoke variant with the model and warm start shrunk
further (SHRINK_BUILTIN), which keeps every code path and cuts compile and SFT time.
"""

import glob
import json
import os
import stat

import numpy as np
import pytest

from rlscale.runner.config_files import load_config_file
from rlscale.runner.loop import train_and_evaluate
from tests.experiments import tiny_hf

CONFIG_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "configs")
CONFIG_FILES = sorted(glob.glob(os.path.join(CONFIG_DIR, "*.py")))
# Applied to smoke variants of built-in-model configs only (section.field -> value).
SHRINK_BUILTIN = {"model.hidden_size": 32, "model.intermediate_size": 64, "model.num_layers": 1,
                  "model.num_heads": 2, "model.num_kv_heads": 1, "model.head_dim": 16,
                  "sft.steps": 5, "sft.batch_size": 8}


@pytest.fixture(scope="module")
def hf_files(tmp_path_factory):
  """(checkpoint directory, JSONL path) for configs with model.source='hf'."""
  root = tmp_path_factory.mktemp("hf")
  return (tiny_hf.write_tiny_qwen3(root / "qwen3"),
          tiny_hf.write_gsm8k_jsonl(root / "gsm8k.jsonl"))


def _smoke_config(path, hf_files, data_dir):
  config = load_config_file(path, "smoke")
  if config.model.source == "hf":
    config.model.checkpoint_path = str(hf_files[0])
  else:
    for dotted, value in SHRINK_BUILTIN.items():
      section, field = dotted.split(".")
      config[section][field] = value
  if config.task.source == "local_math":
    config.task.data_path = str(hf_files[1])
    config.task.data_dir = str(data_dir)
  return config


def test_config_files_found():
  names = {os.path.basename(p) for p in CONFIG_FILES}
  assert {"default.py", "ppo.py", "dapo.py", "hf_qwen3.py"} <= names


@pytest.mark.slow
@pytest.mark.parametrize("path", CONFIG_FILES, ids=os.path.basename)
def test_smoke_variant_runs(path, hf_files, tmp_path, capsys):
  config = _smoke_config(path, hf_files, tmp_path / "tfds")
  workdir = tmp_path / "run"
  summary = train_and_evaluate(config, str(workdir))
  if config.model.source == "hf":  # prompts rendered with the checkpoint's template, no BOS (Qwen)
    assert ("prompts: the checkpoint's chat template (kwargs {'enable_thinking': False}), no BOS"
            in capsys.readouterr().out)
  assert summary["steps"] == config.train.total_steps
  assert summary["final_accuracy"] is not None
  policy = workdir / "policy"
  assert (policy / "tokenizer.json").is_file() and (policy / "tokenizer_config.json").is_file()
  # The weights get the usual umask-derived mode, like config.json (safetensors wrote 0600).
  modes = {stat.S_IMODE(os.stat(policy / name).st_mode)
           for name in ("config.json", "model.safetensors")}
  assert len(modes) == 1 and modes.pop() & stat.S_IRGRP, os.stat(policy / "model.safetensors")
  if config.model.source == "hf":
    _check_hf_export(policy, hf_files[0])
  if config.model.get("num_experts"):
    _check_moe_run(workdir, policy)


def _check_moe_run(workdir, policy):
  """A MoE run logs its routing metrics, trains on recomputed old log-probs and exports a
  checkpoint transformers loads as Qwen3-MoE."""
  records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  trained = [r for r in records if "train/moe/aux_loss" in r]
  assert trained and all(r["train/moe/expert_load_max"] >= 1.0 for r in trained)
  assert all(0.0 < r["train/moe/aux_loss"] < 8.0 for r in trained)  # E * sum f P < E
  assert all(0.0 <= r["train/moe/routing_mismatch"] <= 1.0 for r in trained)
  transformers = pytest.importorskip("transformers")
  model = transformers.AutoModelForCausalLM.from_pretrained(str(policy))
  assert type(model).__name__ == "Qwen3MoeForCausalLM"


def _check_hf_export(policy, checkpoint):
  """transformers loads the exported policy with its tokenizer; the tokenizer encodes like the
  original checkpoint's and the model gives finite logits."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  tokenizer = transformers.AutoTokenizer.from_pretrained(str(policy))
  original = transformers.AutoTokenizer.from_pretrained(str(checkpoint))
  text = tiny_hf.GSM8K_ROWS[0][0]
  assert tokenizer(text)["input_ids"] == original(text)["input_ids"]
  assert tokenizer.eos_token == original.eos_token == "<|im_end|>"
  # policy/ keeps the chat template the run's prompts were rendered with.
  assert tokenizer.chat_template == original.chat_template == tiny_hf.QWEN3_STYLE_TEMPLATE
  model = transformers.AutoModelForCausalLM.from_pretrained(str(policy))
  with torch.no_grad():
    logits = model(torch.tensor([tokenizer(text)["input_ids"]])).logits
  assert logits.shape[-1] == json.loads((checkpoint / "config.json").read_text())["vocab_size"]
  assert np.isfinite(logits.float().numpy()).all()


def test_hf_smoke_is_small_in_every_dimension():
  smoke = load_config_file(os.path.join(CONFIG_DIR, "hf_qwen3.py"), "smoke")
  full = load_config_file(os.path.join(CONFIG_DIR, "hf_qwen3.py"))
  assert smoke.rl.prompts_per_step * smoke.rl.group_size <= 8 < full.rl.batch_size
  assert smoke.rl.batch_size == smoke.rl.prompts_per_step * smoke.rl.group_size
  assert smoke.rollout.max_new_tokens <= 32 < full.rollout.max_new_tokens
  assert smoke.train.total_steps <= 2 and smoke.task.default_eval_size <= 4
  for config in (smoke, full):
    assert 0 <= config.optim.warmup_steps <= config.train.total_steps
    assert config.train.eval_every <= config.train.total_steps


@pytest.mark.slow
def test_smoke_warm_start_leaves_reward_variance_for_the_update(tmp_path):
  """The smoke variant unshrunk, with DAPO's dynamic sampling (which keeps only groups with both
  right and wrong answers): its warm start leaves reward variance in most groups, so sampling
  rounds do not run out and the update trains on a signal. With the old smoke warm start (6%
  held-out accuracy) dynamic sampling ran out of rounds in 5 of 6 steps."""
  config = load_config_file(os.path.join(CONFIG_DIR, "dapo.py"), "smoke")
  train_and_evaluate(config, str(tmp_path))
  steps = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")][1:]
  assert len(steps) == config.train.total_steps == 6
  assert np.mean([r["groups/with_variance"] for r in steps]) >= 0.5
  assert sum(r["sampling/out_of_rounds"] for r in steps) <= 1
  assert all(r["train/grad_norm"] > 0 for r in steps)
