"""Tokenizers: a fixed character vocabulary for the built-in tasks, and HF `tokenizers` for
checkpoints, behind one small interface (`Tokenizer`), plus left-padded batch encoding of prompts.

A prompt is encoded the way the checkpoint's files say (`Tokenizer.encode_prompt`): rendered with
the checkpoint's own chat template when `ChatFormat` asks for it (the Jinja template of
tokenizer_config.json or chat_template.jinja, in a sandbox, as transformers'
`apply_chat_template` renders it), then given exactly one BOS where the tokenizer files ask for
one (`HFTokenizer.prompt_prefix`) and none where they do not (Qwen). Responses never get either.

Left padding puts every prompt's last token in the same column, so the sampler can prefill a
[B, T] batch and start decoding all rows at slot T (see rlscale.model.transformer).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import functools
import json
import os
import pathlib
import shutil
import string
from typing import Any, Mapping, Optional, Protocol, Sequence, Union

import jinja2
import jinja2.ext
import jinja2.sandbox
import numpy as np
# The HF library: imports are absolute, so this module's own name does not shadow it.
import tokenizers as hf_tokenizers

from rlscale import inputs

PathLike = Union[str, os.PathLike]

# End-of-sequence spellings of common chat/base vocabularies, tried when no config names an eos id.
KNOWN_EOS_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<eos>")
# Files of a HF checkpoint that describe its tokenizer (and generation_config.json, which names the
# eos ids generation stops at); `HFTokenizer.save` copies those present.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model",
                   "chat_template.jinja", "chat_template.json", "generation_config.json")


CHAT_TEMPLATE_MODES = ("off", "on", "auto")
# Variables apply_chat_template itself passes to every template; template kwargs may not set them.
RESERVED_TEMPLATE_NAMES = ("messages", "add_generation_prompt", "tools", "documents")
# The special tokens transformers passes to a template by name (SPECIAL_TOKENS_ATTRIBUTES).
TEMPLATE_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                           "cls_token", "mask_token")


@dataclasses.dataclass(frozen=True)
class ChatFormat:
  """How a prompt becomes the model's input text (config task.chat_template, task.system_prompt,
  task.chat_template_kwargs).

  As TRL and verl build RL prompts: messages [system (when given), user = the prompt text]
  rendered with the checkpoint's chat template and `add_generation_prompt=True`.

  Attributes:
    mode: "off" (the prompt text as it is), "on" (the checkpoint's chat template; an error when it
      ships none), "auto" or None (on when the checkpoint ships a template, else off).
    system_prompt: content of a system message before the prompt, or None for none.
    template_kwargs: keyword arguments the template reads, e.g. {"enable_thinking": False} for
      Qwen3 (transformers' `apply_chat_template(**kwargs)`, TRL's `chat_template_kwargs`, verl's
      `apply_chat_template_kwargs`); they override the special-token variables of the same name.

  Raises:
    ValueError: naming the config field, for a mode outside CHAT_TEMPLATE_MODES, a system prompt
      that is not a string, or template_kwargs that are not a mapping with string keys outside
      RESERVED_TEMPLATE_NAMES.
  """
  mode: Optional[str] = None
  system_prompt: Optional[str] = None
  template_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if self.mode not in (None,) + CHAT_TEMPLATE_MODES:
      raise ValueError(f"task.chat_template={self.mode!r}; allowed values: "
                       f"{', '.join(CHAT_TEMPLATE_MODES)} (None = auto)")
    if self.system_prompt is not None and not isinstance(self.system_prompt, str):
      raise ValueError(f"task.system_prompt must be a string or None, got {self.system_prompt!r}")
    kwargs = self.template_kwargs
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
      raise ValueError(f"task.chat_template_kwargs must be a mapping with string keys, got "
                       f"{kwargs!r}")
    reserved = sorted(set(kwargs) & set(RESERVED_TEMPLATE_NAMES))
    if reserved:
      raise ValueError(f"task.chat_template_kwargs may not set {reserved}: rlscale passes "
                       f"{', '.join(RESERVED_TEMPLATE_NAMES)} to the template itself")
    object.__setattr__(self, "template_kwargs", dict(kwargs))

  def applies(self, template: Optional[str], source: str) -> bool:
    """Whether prompts are rendered with `template` (a tokenizer's, None when it has none).

    Args:
      template: the chat template the tokenizer files ship, or None.
      source: what the tokenizer is, for the error message (e.g. its directory).

    Raises:
      ValueError: mode "on" and no template, or a system prompt or template kwargs with no
        template applied (they would be silently dropped).
    """
    if self.mode == "on" and template is None:
      raise ValueError(f"task.chat_template='on' but {source} ships no chat template "
                       "(tokenizer_config.json 'chat_template' or chat_template.jinja); set "
                       "task.chat_template='off' or 'auto'")
    use = template is not None and self.mode != "off"
    if not use and (self.system_prompt is not None or self.template_kwargs):
      # How to clear each: a mapping empties from the command line; a string field cannot be set
      # to None there (ml_collections parses `None` as the string "None").
      clear = ((["--config.task.chat_template_kwargs={}"] if self.template_kwargs else []) +
               (["task.system_prompt=None in the config file"]
                if self.system_prompt is not None else []))
      raise ValueError(f"task.system_prompt / task.chat_template_kwargs are set but no chat "
                       f"template is applied (task.chat_template={self.mode!r}, {source} "
                       f"{'ships none' if template is None else 'ships one'}); clear them "
                       f"({', '.join(clear)}) or use a checkpoint with a template")
    return use

  def messages(self, text: str) -> list[dict[str, str]]:
    """The conversation of one prompt: [system (when set), user = text]."""
    system = [] if self.system_prompt is None else [{"role": "system",
                                                       "content": self.system_prompt}]
    return system + [{"role": "user", "content": text}]


class _GenerationTag(jinja2.ext.Extension):
  """`{% generation %}...{% endgeneration %}` (transformers' assistant-mask tag): its body renders
  unchanged, so templates that mark assistant turns with it parse here too."""
  tags = {"generation"}

  def parse(self, parser):
    next(parser.stream)
    return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class _TemplateNamespace(jinja2.utils.Namespace):
  """`namespace(...)` that refuses underscore-prefixed names (as transformers' TemplateNamespace:
  no path to CPython internals through a namespace attribute)."""

  def __init__(*args, **kwargs):  # pylint: disable=no-method-argument (Namespace's signature)
    self, args = args[0], args[1:]
    attrs = dict(*args, **kwargs)
    for name in attrs:
      _TemplateNamespace._check(name)
    jinja2.utils.Namespace.__init__(self, attrs)

  def __setitem__(self, name, value):
    _TemplateNamespace._check(name)
    jinja2.utils.Namespace.__setitem__(self, name, value)

  @staticmethod
  def _check(name):
    if isinstance(name, str) and name.startswith("_"):
      raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} is not allowed")


def _raise_exception(message):
  raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
  """Jinja's `tojson` without HTML escaping, as transformers overrides it."""
  return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                    sort_keys=sort_keys)


@functools.lru_cache(maxsize=16)
def _compile_template(template: str) -> jinja2.Template:
  """The template compiled in transformers' environment: `ImmutableSandboxedEnvironment` (no
  attribute starting with "_", no mutation of lists or dicts), trim_blocks and lstrip_blocks, the
  loopcontrols extension, and the globals raise_exception, strftime_now and namespace."""
  env = jinja2.sandbox.ImmutableSandboxedEnvironment(
      trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols])
  env.filters["tojson"] = _tojson
  env.globals.update(raise_exception=_raise_exception, namespace=_TemplateNamespace,
                     strftime_now=lambda fmt: datetime.datetime.now().strftime(fmt))
  return env.from_string(template)


def render_chat_template(template: str, messages: Sequence[Mapping[str, Any]], *,
                         add_generation_prompt: bool = True, **variables) -> str:
  """Renders a chat template as transformers' `apply_chat_template(..., tokenize=False)` does.

  Args:
    template: the Jinja source (a checkpoint's chat_template).
    messages: [{"role", "content"}, ...].
    add_generation_prompt: append the assistant turn's header (what an RL prompt ends with).
    **variables: the special tokens (bos_token, eos_token, ...) and template kwargs.

  Returns:
    The rendered text.

  Raises:
    ValueError: the template does not parse, raises (`raise_exception`), or breaks the sandbox's
      rules (names the Jinja error).
  """
  try:
    return _compile_template(template).render(
        messages=[dict(m) for m in messages], tools=None, documents=None,
        add_generation_prompt=add_generation_prompt, **variables)
  except jinja2.exceptions.TemplateError as e:  # incl. syntax and sandbox security errors
    raise ValueError(f"chat template failed: {type(e).__name__}: {e}") from None


class Tokenizer(Protocol):
  """What the rest of rlscale needs from a tokenizer.

  Attributes:
    vocab_size: number of ids the tokenizer can produce (the model's vocab may be larger).
    pad_id: id written into padding slots (always masked out, so any valid id works).
    bos_id: beginning-of-sequence id, or None when the vocabulary has none (Qwen).
    eos_id: the primary end-of-sequence id; eos_ids: every id that ends a response.
    chat_template: the chat template its files ship (Jinja source), or None.
    uses_chat_template: whether prompts are rendered with it (see `with_chat_format`).
    prompt_prefix: the ids every prompt starts with (the BOS where the files ask for one), or ().
  """
  vocab_size: int
  pad_id: int
  bos_id: Optional[int]
  eos_id: int
  eos_ids: tuple[int, ...]
  chat_template: Optional[str]
  uses_chat_template: bool
  prompt_prefix: tuple[int, ...]

  def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
    ...

  def encode_prompt(self, text: str) -> list[int]:
    """The ids the model is fed for the prompt `text` (chat template and BOS as configured)."""

  def with_chat_format(self, chat_format: "ChatFormat") -> "Tokenizer":
    """This tokenizer with prompts formatted by `chat_format` (ValueError as ChatFormat.applies)."""

  def decode(self, ids: Sequence[int]) -> str:
    ...

  def save(self, directory: PathLike) -> None:
    """Writes tokenizer files into `directory` so that `load_tokenizer(directory)` and
    transformers' `AutoTokenizer.from_pretrained(directory)` load an equivalent tokenizer."""


class CharTokenizer:
  """One id per character of a fixed printable vocabulary, for the built-in arithmetic tasks.

  Ids: 0 pad, 1 bos, 2 eos, 3 unk, then digits, ASCII letters, ASCII punctuation, space and newline
  (4..99, vocab_size 100). Characters outside the vocabulary encode to `unk_id` (never raise).
  """

  SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
  CHARS = string.digits + string.ascii_letters + string.punctuation + " \n"
  pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3
  eos_ids = (2,)
  # The built-in model sees prompts as they are: no chat template, no BOS.
  chat_template = None
  prompt_prefix = ()
  uses_chat_template = False
  # What an unknown (or out-of-vocabulary model) id decodes to: U+FFFD REPLACEMENT CHARACTER.
  UNK_TEXT = "\ufffd"

  def __init__(self):
    self._ids = {c: i + len(self.SPECIALS) for i, c in enumerate(self.CHARS)}

  @property
  def vocab_size(self) -> int:
    return len(self.SPECIALS) + len(self.CHARS)

  def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
    """Characters -> ids (unknown characters -> unk_id), optionally after bos_id."""
    ids = [self._ids.get(c, self.unk_id) for c in text]
    return [self.bos_id] + ids if add_bos else ids

  def encode_prompt(self, text: str) -> list[int]:
    """A prompt's ids: `encode(text)`, no BOS and no template (the built-in model's format)."""
    return self.encode(text)

  def with_chat_format(self, chat_format: ChatFormat) -> "CharTokenizer":
    """Itself: the vocabulary has no chat template, so only a format that applies none is accepted
    (ValueError otherwise, see ChatFormat.applies)."""
    chat_format.applies(None, "the character tokenizer (model.source='builtin')")
    return self

  def decode(self, ids: Sequence[int]) -> str:
    """Ids -> text, ending at the first eos and skipping pad/bos; unk and ids outside the
    vocabulary (a model vocab can be larger) become UNK_TEXT."""
    out = []
    for i in (int(i) for i in ids):
      if i == self.eos_id:
        break
      if i in (self.pad_id, self.bos_id):
        continue
      index = i - len(self.SPECIALS)
      out.append(self.CHARS[index] if 0 <= index < len(self.CHARS) else self.UNK_TEXT)
    return "".join(out)

  def to_hf(self) -> "hf_tokenizers.Tokenizer":
    """The same vocabulary as a HF `tokenizers.Tokenizer`: a word-level model over single
    characters (every character is its own pre-token), the four specials as special added tokens,
    and a decoder that joins characters without spaces. It encodes text with the same ids as
    `encode`, except that the literal text "<eos>" (etc.) becomes its special id."""
    vocab = {token: i for i, token in enumerate(self.SPECIALS)}
    vocab.update(self._ids)
    tokenizer = hf_tokenizers.Tokenizer(
        hf_tokenizers.models.WordLevel(vocab, unk_token=self.SPECIALS[self.unk_id]))
    tokenizer.pre_tokenizer = hf_tokenizers.pre_tokenizers.Split(
        hf_tokenizers.Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = hf_tokenizers.decoders.Fuse()
    tokenizer.add_special_tokens(list(self.SPECIALS))
    return tokenizer

  def save(self, directory: PathLike) -> None:
    """Writes tokenizer.json (see `to_hf`) and tokenizer_config.json (PreTrainedTokenizerFast with
    the special tokens) into `directory`, so `load_tokenizer(directory)` and transformers'
    `AutoTokenizer.from_pretrained(directory)` load this vocabulary (e.g. next to an exported
    policy)."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    self.to_hf().save(str(directory / "tokenizer.json"))
    pad, bos, eos, unk = self.SPECIALS
    with open(directory / "tokenizer_config.json", "w", encoding="utf-8") as f:
      json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": pad, "bos_token": bos,
                 "eos_token": eos, "unk_token": unk, "add_bos_token": False}, f, indent=2)


def _read_json_if_exists(path: pathlib.Path) -> dict:
  if not path.is_file():
    return {}
  return inputs.read_json(path)


def _as_id_list(value) -> list[int]:
  if value is None:
    return []
  return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def _token_content(value) -> Optional[str]:
  """tokenizer_config.json spells special tokens as a string or {"content": ...}."""
  return value.get("content") if isinstance(value, dict) else value


def _chat_template(directory: pathlib.Path, tokenizer_config: dict) -> Optional[str]:
  """The checkpoint's chat template, where transformers finds it: chat_template.jinja, else
  tokenizer_config.json's "chat_template" (a string, or a list of {"name", "template"} whose
  "default" is used), else a processor's chat_template.json; None when there is none."""
  jinja_file = directory / "chat_template.jinja"
  if jinja_file.is_file():
    return jinja_file.read_text(encoding="utf-8")
  template = tokenizer_config.get("chat_template")
  if isinstance(template, list):
    template = {t.get("name"): t.get("template") for t in template}.get("default")
  if template is None:
    template = _read_json_if_exists(directory / "chat_template.json").get("chat_template")
  return template if isinstance(template, str) else None


def _template_tokens(tokenizer_config: dict, special_tokens_map: dict) -> dict[str, str]:
  """The special tokens a chat template sees by name (bos_token, eos_token, ...), as strings."""
  tokens = {}
  for name in TEMPLATE_SPECIAL_TOKENS:
    value = _token_content(tokenizer_config.get(name) or special_tokens_map.get(name))
    if isinstance(value, str):
      tokens[name] = value
  return tokens


def prompt_prefix_of(tokenizer, add_bos_token: Optional[bool] = None,
                     bos_token: Optional[str] = None) -> tuple[int, ...]:
  """The ids a prompt starts with before its own: what the checkpoint's tokenizer files put first.

  tokenizer.json's post-processor decides when it has one, as transformers 5 (which ignores
  add_bos_token when there is a tokenizer.json) and 4.x's PreTrainedTokenizerFast encode
  `tokenizer(text)`: Llama's TemplateProcessing "<s> $A" -> (id of <s>,), Qwen's ByteLevel -> ().
  Without a post-processor, tokenizer_config.json's `add_bos_token` decides (the bos token's id
  when True, as transformers 4.x's Llama and Gemma classes rebuild their post-processor from it;
  transformers 5 would add none). Specials a post-processor appends (an EOS) are no part of a
  prompt.

  Args:
    tokenizer: a HF `tokenizers.Tokenizer`.
    add_bos_token: tokenizer_config.json's add_bos_token, or None when absent.
    bos_token: tokenizer_config.json's bos token text, or None.
  """
  if tokenizer.post_processor is None:
    bos_id = None if bos_token is None else tokenizer.token_to_id(bos_token)
    return (bos_id,) if add_bos_token and bos_id is not None else ()
  for probe in ("a", "0", " "):  # a text the vocabulary encodes to at least one id
    plain = tokenizer.encode(probe, add_special_tokens=False).ids
    if plain:
      full = tokenizer.encode(probe, add_special_tokens=True).ids
      start = next((i for i in range(len(full) - len(plain) + 1)
                    if full[i:i + len(plain)] == plain), 0)
      return tuple(full[:start])
  return ()


class HFTokenizer:
  """A HF `tokenizers.Tokenizer` (tokenizer.json) with the `Tokenizer` interface.

  `encode` never adds the tokenizer's own post-processing specials (pass add_bos=True for a bos);
  `encode_prompt` encodes a prompt as the checkpoint expects (module docstring): the chat
  template when `chat_format` applies one, then `prompt_prefix` (the BOS) unless the text's ids
  already start with it, so a prompt written with the BOS text, or a template that renders
  `bos_token` (Llama 3, Mistral, Gemma), still has exactly one (transformers' `tokenizer(text)`
  would give two; its apply_chat_template(tokenize=True), TRL and vLLM's chat path give one).
  """

  def __init__(self, tokenizer, *, eos_ids: Sequence[int], pad_id: int, bos_id: Optional[int] = None,
               prompt_prefix: Optional[Sequence[int]] = None, chat_template: Optional[str] = None,
               template_tokens: Optional[Mapping[str, str]] = None,
               chat_format: Optional[ChatFormat] = None):
    """Args: tokenizer: a tokenizers.Tokenizer; eos_ids: ids that end a response (first is the
    primary); pad_id: padding id; bos_id: beginning-of-sequence id or None; prompt_prefix: ids
    every prompt starts with (None: what the tokenizer's post-processor puts first,
    `prompt_prefix_of`); chat_template: Jinja source or None; template_tokens: the special
    tokens the template sees by name (default: the eos and pad tokens); chat_format: how prompts
    are formatted (default ChatFormat(): the template when there is one).

    Raises:
      ValueError: eos_ids is empty, or as ChatFormat.applies.
    """
    if not eos_ids:
      raise ValueError("eos_ids must name at least one id")
    self._tokenizer = tokenizer
    self.eos_ids = tuple(int(i) for i in eos_ids)
    self.eos_id = self.eos_ids[0]
    self.pad_id = int(pad_id)
    self.bos_id = None if bos_id is None else int(bos_id)
    if prompt_prefix is None:
      prompt_prefix = prompt_prefix_of(tokenizer)
    self.prompt_prefix = tuple(int(i) for i in prompt_prefix)
    self.chat_template = chat_template
    self.template_tokens = dict(template_tokens or {
        "eos_token": tokenizer.id_to_token(self.eos_id),
        "pad_token": tokenizer.id_to_token(self.pad_id)})
    self.source_dir: Optional[pathlib.Path] = None  # set by from_dir; `save` copies its files
    self.chat_format = ChatFormat()
    self._use_template = False
    self._configure(chat_format or ChatFormat())

  def _configure(self, chat_format: ChatFormat) -> None:
    where = str(self.source_dir) if self.source_dir is not None else "this tokenizer"
    self._use_template = chat_format.applies(self.chat_template, where)
    self.chat_format = chat_format

  @property
  def uses_chat_template(self) -> bool:
    """Whether prompts are rendered with the chat template (`chat_format` applies it)."""
    return self._use_template

  def with_chat_format(self, chat_format: ChatFormat) -> "HFTokenizer":
    """A copy whose prompts are formatted by `chat_format` (ValueError as ChatFormat.applies)."""
    configured = copy.copy(self)
    configured._configure(chat_format)  # pylint: disable=protected-access
    return configured

  @classmethod
  def from_dir(cls, path: PathLike) -> "HFTokenizer":
    """Loads `<path>/tokenizer.json`; special ids come from, in order of precedence,
    generation_config.json, config.json, then tokenizer_config.json tokens; eos falls back to the
    first of KNOWN_EOS_TOKENS in the vocabulary, pad to eos. The prompt prefix follows the
    post-processor, or without one tokenizer_config.json's add_bos_token (`prompt_prefix_of`);
    the chat template comes from `_chat_template`; prompts use the template when there is one
    (ChatFormat(); see `with_chat_format`).

    Raises:
      FileNotFoundError: no tokenizer.json in `path`.
      ValueError: no eos id can be found (names the files searched).
    """
    directory = pathlib.Path(path)
    tokenizer_file = directory / "tokenizer.json"
    if not tokenizer_file.is_file():
      raise FileNotFoundError(f"tokenizer file {tokenizer_file} not found")
    tokenizer = hf_tokenizers.Tokenizer.from_file(str(tokenizer_file))
    generation = _read_json_if_exists(directory / "generation_config.json")
    model = _read_json_if_exists(directory / "config.json")
    tokenizer_config = _read_json_if_exists(directory / "tokenizer_config.json")
    template_tokens = _template_tokens(
        tokenizer_config, _read_json_if_exists(directory / "special_tokens_map.json"))

    def special(key: str) -> list[int]:
      for source in (generation, model):
        ids = _as_id_list(source.get(f"{key}_token_id"))
        if ids:
          return ids
      token = _token_content(tokenizer_config.get(f"{key}_token"))
      found = None if token is None else tokenizer.token_to_id(token)
      return [] if found is None else [found]

    eos_ids = special("eos")
    if not eos_ids:
      eos_ids = [i for i in map(tokenizer.token_to_id, KNOWN_EOS_TOKENS) if i is not None][:1]
    if not eos_ids:
      raise ValueError(f"no eos id for {directory}: none in generation_config.json, config.json or "
                       f"tokenizer_config.json, and none of {KNOWN_EOS_TOKENS} is in the vocabulary")
    pad_ids, bos_ids = special("pad"), special("bos")
    add_bos_token = tokenizer_config.get("add_bos_token")
    prefix = prompt_prefix_of(tokenizer, None if add_bos_token is None else bool(add_bos_token),
                              template_tokens.get("bos_token"))
    loaded = cls(tokenizer, eos_ids=eos_ids, pad_id=(pad_ids or eos_ids)[0],
                 bos_id=bos_ids[0] if bos_ids else None, prompt_prefix=prefix,
                 chat_template=_chat_template(directory, tokenizer_config),
                 template_tokens=template_tokens)
    loaded.source_dir = directory
    return loaded

  def save(self, directory: PathLike) -> None:
    """Copies the tokenizer files of the checkpoint it was loaded from (TOKENIZER_FILES present
    there, chat template included) into `directory`; a tokenizer built in code writes its
    tokenizer.json and a tokenizer_config.json naming the eos and pad tokens, its add_bos_token
    and its chat template."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if self.source_dir is not None:
      for name in TOKENIZER_FILES:
        if (self.source_dir / name).is_file():
          shutil.copyfile(self.source_dir / name, directory / name)
      return
    self._tokenizer.save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **self.template_tokens,
              "add_bos_token": bool(self.prompt_prefix)}
    if self.prompt_prefix:
      config["bos_token"] = self._tokenizer.id_to_token(self.prompt_prefix[0])
    if self.chat_template is not None:
      config["chat_template"] = self.chat_template
    with open(directory / "tokenizer_config.json", "w", encoding="utf-8") as f:
      json.dump(config, f, indent=2)

  @property
  def vocab_size(self) -> int:
    return self._tokenizer.get_vocab_size(with_added_tokens=True)

  def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
    """Text -> ids without post-processing specials, optionally after bos_id.

    Raises:
      ValueError: add_bos with a vocabulary that has no bos.
    """
    ids = self._tokenizer.encode(text, add_special_tokens=False).ids
    if not add_bos:
      return ids
    if self.bos_id is None:
      raise ValueError("add_bos=True but this tokenizer has no bos id")
    return [self.bos_id] + ids

  def prompt_text(self, text: str) -> str:
    """The text a prompt is encoded from: `text` rendered as the user message of the chat
    template (with `chat_format`'s system prompt and kwargs, add_generation_prompt=True), or
    `text` itself when no template applies. Raises ValueError when the template fails."""
    if not self._use_template:
      return text
    return render_chat_template(self.chat_template, self.chat_format.messages(text),
                                **{**self.template_tokens, **self.chat_format.template_kwargs})

  def encode_prompt(self, text: str) -> list[int]:
    """The ids the model is fed for the prompt `text` (class docstring): `prompt_text(text)`
    encoded without post-processing, with `prompt_prefix` put first unless it is already."""
    ids = self.encode(self.prompt_text(text))
    prefix = list(self.prompt_prefix)
    return ids if ids[:len(prefix)] == prefix else prefix + ids

  def decode(self, ids: Sequence[int]) -> str:
    """Ids -> text: leading pad ids are dropped (a left-padded row decodes to its text even where
    pad_id is also an eos id, as in Qwen), then the text ends at the first eos id; other special
    tokens are skipped."""
    ids = [int(i) for i in ids]
    start = next((t for t, i in enumerate(ids) if i != self.pad_id), len(ids))
    end = next((t for t, i in enumerate(ids[start:], start) if i in self.eos_ids), len(ids))
    return self._tokenizer.decode(ids[start:end], skip_special_tokens=True)


def describe_prompts(tokenizer: Tokenizer) -> str:
  """One line saying how prompts are encoded (chat template or not, BOS or not), for the run log."""
  template = "raw text (no chat template)"
  if tokenizer.uses_chat_template:
    fmt = tokenizer.chat_format
    extras = ([f"system prompt {fmt.system_prompt[:40]!r}"] if fmt.system_prompt else []) + (
        [f"kwargs {fmt.template_kwargs}"] if fmt.template_kwargs else [])
    template = "the checkpoint's chat template" + (f" ({', '.join(extras)})" if extras else "")
  bos = (f"BOS id {tokenizer.prompt_prefix[0]} first" if tokenizer.prompt_prefix else "no BOS")
  return f"prompts: {template}, {bos}"


def load_tokenizer(spec: Union[str, os.PathLike],
                   chat_format: Optional[ChatFormat] = None) -> Tokenizer:
  """"char" -> CharTokenizer(); a checkpoint directory -> HFTokenizer.from_dir(spec); either with
  prompts formatted by `chat_format` (default ChatFormat(): the template when there is one).

  Raises:
    FileNotFoundError: spec is neither "char" nor an existing directory, or it has no
      tokenizer.json.
    ValueError: as HFTokenizer.from_dir and ChatFormat.applies.
  """
  chat_format = chat_format or ChatFormat()
  if spec == "char":
    return CharTokenizer().with_chat_format(chat_format)
  if not pathlib.Path(spec).is_dir():
    raise FileNotFoundError(f"tokenizer spec must be 'char' or a checkpoint directory with "
                            f"tokenizer.json, got {spec!r} (no such directory)")
  return HFTokenizer.from_dir(spec).with_chat_format(chat_format)


def encode_batch_left_padded(tokenizer: Tokenizer, texts: Sequence[str], length: int
                             ) -> tuple[np.ndarray, np.ndarray]:
  """Encodes prompts (`tokenizer.encode_prompt`: chat template and BOS as configured) into a
  left-padded [B, length] batch.

  A prompt longer than `length` tokens is truncated from the LEFT: its last `length` tokens are
  kept, because a prompt ends with the question and the answer cue the model continues from (a
  truncated row loses its BOS; the runner's buckets never truncate).

  Args:
    tokenizer: any `Tokenizer`. texts: B prompt strings. length: T, tokens per row.

  Returns:
    tokens [B, T] int32 (pad_id in padding slots), mask [B, T] int32 (1 for real tokens).

  Raises:
    ValueError: length is not a positive int, or a text encodes to no tokens (a row without a real
      token has nothing to condition on; the sampler requires at least one).
  """
  if not isinstance(length, (int, np.integer)) or length <= 0:
    raise ValueError(f"length must be a positive int, got {length!r}")
  tokens = np.full((len(texts), length), tokenizer.pad_id, np.int32)
  mask = np.zeros((len(texts), length), np.int32)
  for row, text in enumerate(texts):
    ids = tokenizer.encode_prompt(text)[-length:]
    if not ids:
      raise ValueError(f"texts[{row}] ({text!r}) encodes to no tokens; every row needs at least one")
    tokens[row, length - len(ids):] = ids
    mask[row, length - len(ids):] = 1
  return tokens, mask
