"""Character and HF tokenizers: round trips, unknown characters, specials, left padding."""

import json

import numpy as np
import pytest
import tokenizers as hf_tokenizers

from rlscale import tokenizers as tok
from tests.experiments import tiny_hf


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
  llama_style = _char_checkpoint_tokenizer(post_processor=True, add_bos_token=None)
  tokens, mask = tok.encode_batch_left_padded(llama_style, ["1", "12345"], 3)
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


# --- Prompts as the checkpoint's files say: BOS and chat templates (issue 22 item 1).

def _char_vocab_tokenizer(post_processor: bool) -> hf_tokenizers.Tokenizer:
  """CharTokenizer's vocabulary as a HF tokenizer ("7" -> 11, " " -> 98, "=" -> 84, "<bos>" -> 1),
  with a Llama-style post-processor "<bos> $A" (what add_special_tokens=True adds) when asked."""
  raw = tok.CharTokenizer().to_hf()
  if post_processor:
    raw.post_processor = hf_tokenizers.processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", 1)])
  return raw


def _char_checkpoint_tokenizer(post_processor, add_bos_token):
  """`_char_vocab_tokenizer` wrapped in code (no files: the prefix comes from the post-processor)."""
  del add_bos_token
  return tok.HFTokenizer(_char_vocab_tokenizer(post_processor), eos_ids=[2], pad_id=0, bos_id=1)


def _write_llama_style(directory, *, post_processor=True, add_bos_token=None, chat_template=None):
  """A Llama-style checkpoint's tokenizer files (bos_token_id 1) over the character vocabulary."""
  directory.mkdir(parents=True, exist_ok=True)
  _char_vocab_tokenizer(post_processor).save(str(directory / "tokenizer.json"))
  config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>",
            "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}
  if add_bos_token is not None:
    config["add_bos_token"] = add_bos_token
  if chat_template is not None:
    config["chat_template"] = chat_template
  (directory / "tokenizer_config.json").write_text(json.dumps(config))
  (directory / "config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
  return directory


@pytest.mark.parametrize("post_processor, add_bos_token, expected", [
    (True, None, [1, 11, 98, 84]),  # tokenizer.json's post-processor adds the BOS (Llama)
    (True, True, [1, 11, 98, 84]),
    (True, False, [1, 11, 98, 84]),  # the post-processor decides (as transformers 5)
    (False, None, [11, 98, 84]),  # neither: no BOS
    # No post-processor: add_bos_token asks for the BOS (transformers 4.x's Llama class; 5 adds
    # none, so no comparison below).
    (False, True, [1, 11, 98, 84]),
])
def test_prompt_bos_follows_the_tokenizer_files_as_transformers(tmp_path, post_processor,
                                                                add_bos_token, expected):
  # "7 =" was fed as [11, 98, 84] (encode without specials, no BOS ever) where transformers and
  # vLLM feed [1, 11, 98, 84] to a Llama-style checkpoint.
  directory = _write_llama_style(tmp_path, post_processor=post_processor,
                                 add_bos_token=add_bos_token)
  t = tok.load_tokenizer(str(directory))
  assert t.encode_prompt("7 =") == expected
  assert t.encode("7 =") == [11, 98, 84]  # responses and plain encode: never a BOS
  if post_processor:
    transformers = pytest.importorskip("transformers")
    auto = transformers.AutoTokenizer.from_pretrained(str(directory))
    assert auto("7 =")["input_ids"] == expected
  # A prompt that already starts with the BOS text keeps exactly one (transformers gives two).
  assert t.encode_prompt("<bos>7 =") == [1, 11, 98, 84]
  tokens, mask = tok.encode_batch_left_padded(t, ["7 =", "<bos>7 ="], 5)
  np.testing.assert_array_equal(tokens[0], [0] * (5 - len(expected)) + expected)
  np.testing.assert_array_equal(tokens[1], [0, 1, 11, 98, 84])
  np.testing.assert_array_equal(mask.sum(axis=1), [len(expected), 4])


def test_qwen_style_checkpoint_gets_no_bos(tmp_path):
  # Qwen's config.json names a bos_token_id (<|endoftext|>), but its tokenizer files add none.
  raw = _write_hf_tokenizer(tmp_path)
  endoftext = raw.token_to_id("<|endoftext|>")
  (tmp_path / "config.json").write_text(json.dumps({"bos_token_id": endoftext}))
  (tmp_path / "tokenizer_config.json").write_text(json.dumps(
      {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None,
       "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}))
  t = tok.load_tokenizer(str(tmp_path))
  assert t.bos_id == endoftext and t.prompt_prefix == ()
  text = "What is 12 plus 30?"
  assert t.encode_prompt(text) == raw.encode(text, add_special_tokens=False).ids
  transformers = pytest.importorskip("transformers")
  assert transformers.AutoTokenizer.from_pretrained(str(tmp_path))(text)["input_ids"] == (
      t.encode_prompt(text))


QWEN3_STYLE_TEMPLATE = tiny_hf.QWEN3_STYLE_TEMPLATE


def _write_chat_checkpoint(directory, template, *, in_jinja_file=False):
  """The BPE of `_write_hf_tokenizer` with ChatML specials and `template` as its chat template
  (in tokenizer_config.json, or in chat_template.jinja with another one in the config)."""
  _write_hf_tokenizer(directory)
  config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>", "chat_template": "{{ 'not this one' }}"
            if in_jinja_file else template}
  (directory / "tokenizer_config.json").write_text(json.dumps(config))
  if in_jinja_file:
    (directory / "chat_template.jinja").write_text(template)
  return directory


@pytest.mark.parametrize("in_jinja_file", [False, True])
@pytest.mark.parametrize("system_prompt, kwargs", [
    (None, {}), ("You are a careful solver.", {}), (None, {"enable_thinking": False}),
    ("Be brief.", {"enable_thinking": True})])
def test_chat_template_prompt_equals_transformers_apply_chat_template(tmp_path, in_jinja_file,
                                                                      system_prompt, kwargs):
  transformers = pytest.importorskip("transformers")
  directory = _write_chat_checkpoint(tmp_path, QWEN3_STYLE_TEMPLATE, in_jinja_file=in_jinja_file)
  chat = tok.ChatFormat(mode="on", system_prompt=system_prompt, template_kwargs=kwargs)
  t = tok.load_tokenizer(str(directory), chat_format=chat)
  question = "What is 12 plus 30? "
  messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
      {"role": "user", "content": question}]
  auto = transformers.AutoTokenizer.from_pretrained(str(directory))
  expected_text = auto.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                           **kwargs)
  assert t.prompt_text(question) == expected_text
  assert expected_text.endswith("<|im_start|>assistant\n" + (
      "<think>\n\n</think>\n\n" if kwargs.get("enable_thinking") is False else ""))
  expected_ids = auto.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                          return_dict=True, **kwargs)["input_ids"]
  assert t.encode_prompt(question) == expected_ids
  im_start = t._tokenizer.token_to_id("<|im_start|>")  # pylint: disable=protected-access
  assert t.encode_prompt(question).count(im_start) == 2 + (system_prompt is not None)


def test_chat_template_that_renders_the_bos_gives_exactly_one(tmp_path):
  transformers = pytest.importorskip("transformers")
  with_bos = "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}" \
             "{% if add_generation_prompt %}[assistant] {% endif %}"
  directory = _write_llama_style(tmp_path / "a", post_processor=True, add_bos_token=True,
                                 chat_template=with_bos)
  t = tok.load_tokenizer(str(directory), chat_format=tok.ChatFormat(mode="on"))
  messages = [{"role": "user", "content": "7 ="}]
  auto = transformers.AutoTokenizer.from_pretrained(str(directory))
  expected = auto.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
  assert t.encode_prompt("7 =") == expected["input_ids"]
  # "<bos>[": the BOS, then "[" = 4 specials + 10 digits + 52 letters + 22 (its punctuation index).
  assert t.encode_prompt("7 =")[:2] == [1, 88] and t.encode_prompt("7 =").count(1) == 1
  # A template without bos_token on a BOS checkpoint still gets the one BOS the model expects
  # (apply_chat_template would leave it out).
  directory = _write_llama_style(tmp_path / "b", post_processor=True, add_bos_token=True,
                                 chat_template=with_bos.replace("{{ bos_token }}", ""))
  t = tok.load_tokenizer(str(directory), chat_format=tok.ChatFormat(mode="on"))
  auto = transformers.AutoTokenizer.from_pretrained(str(directory))
  expected = auto.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
  assert t.encode_prompt("7 =") == [1] + expected["input_ids"]


def test_chat_format_modes_and_errors(tmp_path):
  directory = _write_chat_checkpoint(tmp_path / "chat", QWEN3_STYLE_TEMPLATE)
  plain = tmp_path / "plain"
  _write_hf_tokenizer(plain)
  (plain / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
  text = "What is 12?"
  # auto (the default, None) = on when the checkpoint ships a template, else off.
  assert tok.load_tokenizer(str(directory)).prompt_text(text).startswith("<|im_start|>user\n")
  assert tok.load_tokenizer(str(directory)).uses_chat_template
  assert tok.load_tokenizer(str(plain)).prompt_text(text) == text
  off = tok.load_tokenizer(str(directory), chat_format=tok.ChatFormat(mode="off"))
  assert off.prompt_text(text) == text and not off.uses_chat_template
  with pytest.raises(ValueError, match=r"task.chat_template='on' but .*plain ships no chat template"):
    tok.load_tokenizer(str(plain), chat_format=tok.ChatFormat(mode="on"))
  with pytest.raises(ValueError, match="task.system_prompt / task.chat_template_kwargs are set but "
                                       "no chat template is applied"):
    tok.load_tokenizer(str(plain), chat_format=tok.ChatFormat(system_prompt="Be brief."))
  with pytest.raises(ValueError, match="no chat template is applied"):
    tok.load_tokenizer(str(directory), chat_format=tok.ChatFormat(
        mode="off", template_kwargs={"enable_thinking": False}))
  # The built-in model's character tokenizer: no template, no BOS, whatever "auto" says.
  char = tok.load_tokenizer("char")
  assert char.encode_prompt("7 =") == [11, 98, 84] and not char.uses_chat_template
  with pytest.raises(ValueError, match=r"task.chat_template='on' but the character tokenizer"):
    tok.load_tokenizer("char", chat_format=tok.ChatFormat(mode="on"))
  for kwargs, message in [
      (dict(mode="yes"), r"task.chat_template='yes'; allowed values: off, on, auto \(None = auto\)"),
      (dict(system_prompt=3), "task.system_prompt must be a string or None"),
      (dict(template_kwargs=[1]), "task.chat_template_kwargs must be a mapping"),
      (dict(template_kwargs={"messages": []}), r"may not set \['messages'\]")]:
    with pytest.raises(ValueError, match=message):
      tok.ChatFormat(**kwargs)


@pytest.mark.parametrize("template, message", [
    ("{{ messages.__class__.__mro__ }}", "SecurityError|UndefinedError"),
    ("{% set ns = namespace(_secret=1) %}", "SecurityError"),
    ("{{ messages.append(1) }}", "SecurityError"),  # immutable: no mutation of the inputs
    ("{{ raise_exception('no system message') }}", "no system message"),
    ("{% if %}", "TemplateSyntaxError"),
])
def test_chat_template_runs_sandboxed_and_fails_with_one_line(template, message):
  with pytest.raises(ValueError, match=f"chat template failed: .*({message})"):
    tok.render_chat_template(template, [{"role": "user", "content": "hi"}])
  # What templates use: tojson without HTML escaping, loop controls, the generation tag.
  out = tok.render_chat_template(
      "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{% generation %}"
      "{{ m | tojson }}{% endgeneration %}{% endfor %}",
      [{"role": "user", "content": "<a & b>"}, {"role": "user", "content": "x"}])
  assert out == '{"role": "user", "content": "<a & b>"}'


def test_saved_tokenizer_keeps_the_chat_template_and_bos(tmp_path):
  transformers = pytest.importorskip("transformers")
  source = _write_chat_checkpoint(tmp_path / "ckpt", QWEN3_STYLE_TEMPLATE, in_jinja_file=True)
  tok.load_tokenizer(str(source)).save(tmp_path / "out")
  assert (tmp_path / "out" / "chat_template.jinja").read_text() == QWEN3_STYLE_TEMPLATE
  assert tok.load_tokenizer(str(tmp_path / "out")).chat_template == QWEN3_STYLE_TEMPLATE
  # A tokenizer built in code writes its template and BOS choice into tokenizer_config.json.
  built = tok.HFTokenizer(_char_vocab_tokenizer(True), eos_ids=[2], pad_id=0, bos_id=1,
                          chat_template=QWEN3_STYLE_TEMPLATE)
  built.save(tmp_path / "built")
  loaded = tok.load_tokenizer(str(tmp_path / "built"))
  assert loaded.chat_template == QWEN3_STYLE_TEMPLATE and loaded.prompt_prefix == (1,)
  auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "built"))
  assert auto.chat_template == QWEN3_STYLE_TEMPLATE and auto("7 =")["input_ids"] == [1, 11, 98, 84]
