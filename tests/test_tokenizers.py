"""Character and HF tokenizers: round trips, unknown characters, specials, left padding."""

import json

import numpy as np
import pytest
import tokenizers as hf_tokenizers

from rlscale import tokenizers as tok


def test_char_round_trip_and_ids_by_hand():
  t = tok.CharTokenizer()
  assert (t.vocab_size, t.pad_id, t.bos_id, t.eos_id, t.eos_ids) == (100, 0, 1, 2, (2,))
  # Digits come first after the 4 specials: "0" -> 4, "7" -> 11; "a" -> 14; " " -> 98, "\n" -> 99.
  assert t.encode("07a \n") == [4, 11, 14, 98, 99]
  assert t.encode("1", add_bos=True) == [1, 5]
  text = "Q: What is 12*(3-4)/5? Answer with a number.\nA: -2.4"
  assert t.decode(t.encode(text)) == text


def test_char_unknown_characters_and_specials_in_decode():
  t = tok.CharTokenizer()
  assert t.encode("é1→") == [3, 5, 3]
  assert t.decode(t.encode("é1")) == "\ufffd1"
  # pad and bos are skipped, decoding stops at eos, ids past the vocabulary (model V > 100) are unk.
  assert t.decode([0, 1, 5, 6, 2, 7]) == "12"
  assert t.decode([5, 100, 511]) == "1\ufffd\ufffd"
  assert t.decode(np.array([5, 6], np.int32)) == "12"


def test_left_padding_and_left_truncation():
  t = tok.CharTokenizer()
  tokens, mask = tok.encode_batch_left_padded(t, ["12", "é", "123456"], 4)
  assert tokens.dtype == np.int32 and mask.dtype == np.int32
  np.testing.assert_array_equal(tokens, [[0, 0, 5, 6], [0, 0, 0, 3], [7, 8, 9, 10]])
  np.testing.assert_array_equal(mask, [[0, 0, 1, 1], [0, 0, 0, 1], [1, 1, 1, 1]])
  with pytest.raises(ValueError, match=r"texts\[1\] \(''\) encodes to no tokens"):
    tok.encode_batch_left_padded(t, ["1", ""], 4)
  tokens, mask = tok.encode_batch_left_padded(t, ["1", "12345"], 3, add_bos=True)
  np.testing.assert_array_equal(tokens, [[0, 1, 5], [7, 8, 9]])  # truncation drops the bos too
  np.testing.assert_array_equal(mask, [[0, 1, 1], [1, 1, 1]])
  for bad in (0, -1, 2.0):
    with pytest.raises(ValueError, match="length must be a positive int"):
      tok.encode_batch_left_padded(t, ["1"], bad)


def _write_hf_tokenizer(directory, specials=("<|endoftext|>", "<|im_end|>", "<|im_start|>")):
  """A byte-level BPE trained on a few lines, saved as tokenizer.json; returns the Tokenizer."""
  tokenizer = hf_tokenizers.Tokenizer(hf_tokenizers.models.BPE())
  tokenizer.pre_tokenizer = hf_tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  tokenizer.decoder = hf_tokenizers.decoders.ByteLevel()
  trainer = hf_tokenizers.trainers.BpeTrainer(
      vocab_size=300, special_tokens=list(specials),
      initial_alphabet=hf_tokenizers.pre_tokenizers.ByteLevel.alphabet())
  tokenizer.train_from_iterator(["What is 12 plus 30? The answer is 42."] * 5, trainer)
  directory.mkdir(parents=True, exist_ok=True)
  tokenizer.save(str(directory / "tokenizer.json"))
  return tokenizer


def test_hf_tokenizer_specials_from_generation_config(tmp_path):
  raw = _write_hf_tokenizer(tmp_path)
  endoftext, im_end = raw.token_to_id("<|endoftext|>"), raw.token_to_id("<|im_end|>")
  (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [im_end, endoftext]}))
  (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 7, "bos_token_id": None}))
  (tmp_path / "tokenizer_config.json").write_text(json.dumps({"pad_token": "<|endoftext|>"}))
  t = tok.load_tokenizer(str(tmp_path))
  assert isinstance(t, tok.HFTokenizer)
  assert (t.eos_id, t.eos_ids, t.pad_id, t.bos_id) == (im_end, (im_end, endoftext), endoftext, None)
  assert t.vocab_size == raw.get_vocab_size(with_added_tokens=True)
  text = "What is 12 plus 30?\nThe answer is 42 ü"  # ü and \n are not in the training text
  ids = t.encode(text)
  assert ids == raw.encode(text).ids
  assert t.decode(ids) == text
  # Decoding drops leading pads (here pad = an eos id, as in Qwen), skips other specials and
  # stops at any eos id.
  im_start = raw.token_to_id("<|im_start|>")
  assert t.decode([endoftext, endoftext, im_start] + ids + [im_end] + t.encode("more")) == text
  assert t.decode(ids[:3] + [endoftext] + ids[3:]) == t.decode(ids[:3])
  with pytest.raises(ValueError, match="no bos id"):
    t.encode("x", add_bos=True)
  tokens, mask = tok.encode_batch_left_padded(t, ["42", text], 6)
  np.testing.assert_array_equal(tokens[1], ids[-6:])
  np.testing.assert_array_equal(tokens[0, :6 - len(t.encode("42"))], endoftext)
  np.testing.assert_array_equal(mask.sum(axis=1), [len(t.encode("42")), 6])


def test_hf_tokenizer_fallbacks_and_errors(tmp_path):
  raw = _write_hf_tokenizer(tmp_path / "a", specials=("<s>", "</s>"))
  (tmp_path / "a" / "tokenizer_config.json").write_text(json.dumps({"bos_token": {"content": "<s>"}}))
  t = tok.HFTokenizer.from_dir(tmp_path / "a")
  # eos from the known spellings, pad falls back to eos, bos from tokenizer_config's dict form.
  eos, bos = raw.token_to_id("</s>"), raw.token_to_id("<s>")
  assert (t.eos_ids, t.pad_id, t.bos_id) == ((eos,), eos, bos)
  assert t.encode("42", add_bos=True) == [bos] + raw.encode("42").ids
  _write_hf_tokenizer(tmp_path / "b", specials=("<x>",))
  with pytest.raises(ValueError, match="no eos id"):
    tok.HFTokenizer.from_dir(tmp_path / "b")
  with pytest.raises(FileNotFoundError, match=r"tokenizer file .*tokenizer\.json not found"):
    tok.load_tokenizer(tmp_path)
  with pytest.raises(FileNotFoundError, match=r"must be 'char' or a checkpoint directory"):
    tok.load_tokenizer("chars")
  assert isinstance(tok.load_tokenizer("char"), tok.CharTokenizer)


def test_char_tokenizer_saved_loads_with_the_same_ids(tmp_path):
  """The character vocabulary written as tokenizer.json: load_tokenizer and transformers'
  AutoTokenizer encode and decode like CharTokenizer."""
  char = tok.CharTokenizer()
  char.save(tmp_path)
  text = "7 - 3 + 2 = 6\nA {b}!~"
  loaded = tok.load_tokenizer(str(tmp_path))
  assert (loaded.eos_ids, loaded.pad_id, loaded.bos_id) == ((2,), 0, 1)
  assert loaded.encode(text) == char.encode(text) and loaded.vocab_size == char.vocab_size
  assert loaded.decode([0, 1] + char.encode(text) + [2, 5]) == text
  transformers = pytest.importorskip("transformers")
  auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
  assert auto(text, add_special_tokens=False)["input_ids"] == char.encode(text)
  assert auto.decode(char.encode(text)) == text
  assert (auto.eos_token_id, auto.pad_token_id) == (char.eos_id, char.pad_id)


def test_hf_tokenizer_save_copies_the_checkpoint_files(tmp_path):
  source = tmp_path / "ckpt"
  _write_hf_tokenizer(source)
  (source / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
  (source / "generation_config.json").write_text(json.dumps({"eos_token_id": 2}))
  (source / "model.safetensors").write_text("not a tokenizer file")
  tok.load_tokenizer(str(source)).save(tmp_path / "out")
  assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
      "generation_config.json", "tokenizer.json", "tokenizer_config.json"]
  for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
    assert (tmp_path / "out" / name).read_bytes() == (source / name).read_bytes()


def test_hf_tokenizer_built_in_code_saves_tokenizer_json(tmp_path):
  raw = _write_hf_tokenizer(tmp_path / "src")
  im_end = raw.token_to_id("<|im_end|>")
  tok.HFTokenizer(raw, eos_ids=[im_end], pad_id=im_end).save(tmp_path / "out")
  loaded = tok.load_tokenizer(str(tmp_path / "out"))
  assert loaded.eos_ids == (im_end,) and loaded.encode("What is 12") == raw.encode(
      "What is 12", add_special_tokens=False).ids
