"""A tiny random Qwen3 checkpoint and a 12-line GSM8K-style JSONL, written by the test itself (no
download): what a user puts on disk for experiments/configs/hf_qwen3.py, in miniature."""

import json
import pathlib

# Twelve GSM8K-style rows: question, worked answer ending in "#### N".
GSM8K_ROWS = [(f"Ann has {a} apples and buys {b} more. How many apples does she have now?",
               f"She has {a} + {b} = {a + b} apples.\n#### {a + b}")
              for a, b in [(3, 4), (5, 9), (12, 7), (8, 8), (21, 4), (6, 13), (30, 12), (2, 2),
                           (17, 5), (9, 40), (11, 11), (14, 3)]]


def write_gsm8k_jsonl(path: pathlib.Path) -> pathlib.Path:
  """Writes GSM8K_ROWS as {"question", "answer"} JSON lines; returns the path."""
  path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in GSM8K_ROWS))
  return path


# A Qwen3-style ChatML chat template: system turn, a namespace, loop controls, and the thinking
# switch of the generation prompt (Qwen3's enable_thinking).
QWEN3_STYLE_TEMPLATE = (
    "{%- set ns = namespace(turns=0) %}"
    "{%- for message in messages %}"
    "{%- if message.role not in ['system', 'user', 'assistant'] %}{% continue %}{% endif %}"
    "{%- set ns.turns = ns.turns + 1 %}"
    "{{- '<|im_start|>' + message.role + '\n' + message.content | trim + '<|im_end|>\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\n\n</think>\n\n' }}"
    "{%- endif %}"
    "{%- endif %}")


def write_tiny_qwen3(directory: pathlib.Path) -> pathlib.Path:
  """A 2-layer, hidden-64 Qwen3ForCausalLM with random weights and a 300-token byte-level BPE
  tokenizer trained on GSM8K_ROWS with QWEN3_STYLE_TEMPLATE as its chat template, saved by
  transformers (config.json, model.safetensors, generation_config.json, tokenizer.json,
  tokenizer_config.json, chat_template.jinja); returns the directory."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
  bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
  bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  bpe.decoder = tokenizers.decoders.ByteLevel()
  trainer = tokenizers.trainers.BpeTrainer(
      vocab_size=300, special_tokens=specials,
      initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
  bpe.train_from_iterator([q + "\n" + a for q, a in GSM8K_ROWS], trainer)
  tokenizer = transformers.PreTrainedTokenizerFast(
      tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
      chat_template=QWEN3_STYLE_TEMPLATE)
  config = transformers.Qwen3Config(
      vocab_size=bpe.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
      tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
      pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
  torch.manual_seed(0)
  model = transformers.Qwen3ForCausalLM(config)
  model.save_pretrained(directory)
  tokenizer.save_pretrained(directory)
  return directory
