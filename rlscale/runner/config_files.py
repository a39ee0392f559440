"""Loading ml_collections config files by path, so one config file can start from another.

A config (or sweep) file is code the user wrote: its syntax error, or an exception raised while
it runs (its get_config raising ValueError, a NameError), is reported as a user error on one line,
`<file>:<line>: <ExceptionType>: <message>` (`ConfigFileError`), at the innermost line of the file
the exception passed through, not as the loader's traceback.
"""

from __future__ import annotations

import difflib
import importlib.util
import os

from rlscale import cli


class ConfigFileError(ValueError):
  """An error in a config or sweep file, its message `<file>:<line>: <ExceptionType>: <message>`
  (a ValueError: rlscale.cli prints it as one line and exits with status 2)."""


def _innermost_line(exc: BaseException, path: str) -> int | None:
  """Line of the innermost frame of exc's traceback that runs the file `path`, or None."""
  target = os.path.realpath(path)
  line, tb = None, exc.__traceback__
  while tb is not None:
    if os.path.realpath(tb.tb_frame.f_code.co_filename) == target:
      line = tb.tb_lineno
    tb = tb.tb_next
  return line


def config_file_error(exc: BaseException, path: str) -> ConfigFileError | None:
  """`exc` (raised while loading or calling the config file `path`) as a ConfigFileError, or None
  when nothing in its chain comes from the file (a bad override, a bug in a library).

  Looked for along the chain (ml_collections and absl re-raise a config's exception wrapped),
  innermost first: a ConfigFileError (a file the config loaded), a SyntaxError (at its own
  file and line), an exception whose traceback passes through `path` (its innermost line
  there)."""
  chain = list(cli.exception_chain(exc))[::-1]
  for error in chain:
    if isinstance(error, ConfigFileError):
      return error
  for error in chain:
    if isinstance(error, SyntaxError) and error.filename:
      return ConfigFileError(f"{error.filename}:{error.lineno}: {type(error).__name__}: "
                             f"{' '.join((error.msg or '').split())}")
    line = _innermost_line(error, path)
    if line is not None:
      return ConfigFileError(f"{path}:{line}: {type(error).__name__}: {cli.error_line(error)}")
  return None


def import_python_file(path: str, kind: str):
  """Imports the Python file at `path` as a fresh module (a config or sweep file); `kind` names it
  in the error.

  Raises: FileNotFoundError naming the path when the file is missing; ConfigFileError for a
  syntax error in it or an exception its top level raises (`config_file_error`)."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"{kind} file {path!r} not found")
  name = f"rlscale_{kind}_" + os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except Exception as exc:  # pylint: disable=broad-exception-caught
    located = config_file_error(exc, path)
    if located is None:
      raise
    raise located from exc
  return module


def load_config_file(path: str, arg: str | None = None):
  """Calls `get_config(arg)` of the Python config file at `path` (relative paths are taken from the
  current directory).

  Raises: FileNotFoundError when the file is missing; ValueError (a user error, reported on one
  line by rlscale.cli) when it has no `get_config`; ConfigFileError (`file:line: ...`) for a
  syntax error in it or an exception raised while it runs."""
  module = import_python_file(path, "config")
  if not hasattr(module, "get_config"):
    raise ValueError(f"config file {path!r} defines no get_config(arg=None)")
  try:
    return module.get_config(arg) if arg is not None else module.get_config()
  except Exception as exc:  # pylint: disable=broad-exception-caught
    located = config_file_error(exc, path)
    if located is None:
      raise
    raise located from exc


def sibling(config_file: str, name: str) -> str:
  """Path of the config file `name` in the same directory as `config_file` (pass `__file__`)."""
  return os.path.join(os.path.dirname(os.path.abspath(config_file)), name)


# Where a user reads what each config field does: every config in experiments/configs starts from
# default.py, which has a comment above each field (its meaning, units and allowed values). Named
# by `--help` of the commands, the unknown-field error and the README.
FIELDS_DOC = "experiments/configs/default.py"
FIELDS_HINT = f"every field is described in {FIELDS_DOC}"

# Names other RL libraries (and rlscale's own sampler) give to config fields, for the hint of an
# unknown field. Keys match the end of a dotted path ("rollout.n" matches
# "actor_rollout_ref.rollout.n"); values are (rlscale field, whose name it is, note or "").
FIELD_ALIASES = {
    "num_generations": ("rl.group_size", "TRL's num_generations", ""),
    "rollout.n": ("rl.group_size", "verl's rollout.n", ""),
    "samples_per_prompt": ("rl.group_size", "the Sampler's samples_per_prompt", ""),
    "per_device_train_batch_size": (
        "rl.prompts_per_step", "TRL's per_device_train_batch_size",
        "TRL counts responses per device; here B = rl.prompts_per_step x rl.group_size responses "
        "over all devices"),
    "train_batch_size": ("rl.prompts_per_step", "verl's data.train_batch_size", "in prompts"),
    "gradient_accumulation_steps": ("rl.microbatches", "TRL's gradient_accumulation_steps", ""),
    "ppo_micro_batch_size_per_gpu": (
        "rl.microbatches", "verl's ppo_micro_batch_size_per_gpu", "a count here, not a size"),
    "ppo_mini_batch_size": ("rl.minibatches", "verl's ppo_mini_batch_size",
                            "the number of minibatches per pass here, not a size"),
    "num_iterations": ("rl.epochs", "TRL's num_iterations", ""),
    "ppo_epochs": ("rl.epochs", "verl's ppo_epochs", ""),
    "lr": ("optim.learning_rate", "verl's optim.lr", ""),
    "beta": ("rl.kl_coef", "TRL's beta", "the KL coefficient"),
    "kl_loss_coef": ("rl.kl_coef", "verl's kl_loss_coef", ""),
    "kl_loss_type": ("rl.kl_estimator", "verl's kl_loss_type", "low_var_kl is k3"),
    "epsilon": ("rl.clip_eps_low", "TRL's epsilon", ""),
    "epsilon_high": ("rl.clip_eps_high", "TRL's epsilon_high", ""),
    "clip_ratio": ("rl.clip_eps_low", "verl's clip_ratio", "and rl.clip_eps_high"),
    "clip_ratio_low": ("rl.clip_eps_low", "verl's clip_ratio_low", ""),
    "clip_ratio_high": ("rl.clip_eps_high", "verl's clip_ratio_high", ""),
    "clip_ratio_c": ("rl.dual_clip_c", "verl's clip_ratio_c", ""),
    "cliprange": ("rl.clip_eps_low", "TRL PPO's cliprange", "and rl.clip_eps_high"),
    "cliprange_value": ("rl.value_clip_eps", "TRL's and verl's cliprange_value", ""),
    "entropy_coeff": ("rl.entropy_coef", "verl's entropy_coeff", ""),
    "adv_estimator": ("rl.advantage", "verl's adv_estimator", ""),
    "loss_type": ("rl.loss_agg_mode", "TRL's loss_type",
                  "rl.algorithm picks a whole preset, e.g. dr_grpo"),
    "scale_rewards": ("rl.advantage", "TRL's scale_rewards",
                      "scale_rewards=False is rl.advantage=dr_grpo"),
    "gae_lambda": ("rl.lam", "the GAE lambda", ""),
    "max_completion_length": ("rollout.max_new_tokens", "TRL's max_completion_length", ""),
    "max_response_length": ("rollout.max_new_tokens", "verl's max_response_length", ""),
    "max_tokens": ("rollout.max_new_tokens", "vLLM's max_tokens", ""),
    "max_prompt_length": ("rollout.max_prompt_tokens", "TRL's and verl's max_prompt_length", ""),
    "max_steps": ("train.total_steps", "TRL's max_steps", ""),
    "total_training_steps": ("train.total_steps", "verl's total_training_steps", ""),
    "eval_steps": ("train.eval_every", "TRL's eval_steps", ""),
    "test_freq": ("train.eval_every", "verl's test_freq", ""),
    "save_steps": ("train.checkpoint_every", "TRL's save_steps", ""),
    "save_freq": ("train.checkpoint_every", "verl's save_freq", ""),
    "save_total_limit": ("train.keep_checkpoints", "TRL's save_total_limit", ""),
    "warmup_ratio": ("optim.warmup_steps", "TRL's warmup_ratio", "in steps here"),
    "lr_warmup_steps": ("optim.warmup_steps", "verl's lr_warmup_steps", ""),
    "lr_scheduler_type": ("optim.schedule", "TRL's lr_scheduler_type", ""),
    "max_grad_norm": ("optim.grad_clip_norm", "TRL's max_grad_norm", ""),
    "grad_clip": ("optim.grad_clip_norm", "verl's grad_clip", ""),
    "adam_beta1": ("optim.b1", "TRL's adam_beta1", ""),
    "adam_beta2": ("optim.b2", "TRL's adam_beta2", ""),
    "adam_epsilon": ("optim.eps", "TRL's adam_epsilon", ""),
    "bf16": ("model.dtype", "TRL's bf16", "set model.dtype and model.param_dtype to bfloat16"),
    "model_name_or_path": ("model.checkpoint_path", "TRL's model_name_or_path",
                           "a local directory; nothing is downloaded"),
    "model.path": ("model.checkpoint_path", "verl's model.path", ""),
    "filter_groups.enable": ("rl.dynamic_sampling", "verl's filter_groups.enable", ""),
    "output_dir": ("the --workdir flag", "TRL's output_dir", "not a config field"),
}


def field_paths(config) -> list[str]:
  """Dotted paths of every leaf field of a ConfigDict (or nested dict), e.g. "rl.group_size"."""
  paths = []
  for key, value in config.items():
    if hasattr(value, "items"):
      paths.extend(f"{key}.{sub}" for sub in field_paths(value))
    else:
      paths.append(key)
  return paths


def has_field(config, path: str) -> bool:
  """Whether the dotted `path` names a field (leaf or section) of `config`."""
  node = config
  for key in path.split("."):
    if not hasattr(node, "keys") or key not in node.keys():
      return False
    node = node[key]
  return True


def unknown_field_message(config, path: str) -> str:
  """The error message for a dotted field path that `config` does not have: the closest existing
  fields (difflib, on whole paths and on the last name) and, where other libraries name the
  field so (FIELD_ALIASES), the rlscale field it corresponds to; it ends with where the fields
  are described (FIELDS_HINT)."""
  paths = field_paths(config)
  leaf = path.rsplit(".", 1)[-1]
  hints = []
  for alias, (field, origin, note) in FIELD_ALIASES.items():
    if path == alias or path.endswith("." + alias):
      hints.append(f"{origin} is {field} in rlscale" + (f" ({note})" if note else ""))
  same_leaf = [p for p in paths if p.rsplit(".", 1)[-1] == leaf]
  close = difflib.get_close_matches(path, paths, n=3, cutoff=0.6)
  section = path.rsplit(".", 1)[0] + "." if "." in path else ""
  siblings = {p[len(section):]: p for p in paths if p.startswith(section)}
  close += [siblings[name] for name in difflib.get_close_matches(leaf, list(siblings), n=3)]
  # An alias says what the user meant; spelling neighbours would only blur it.
  suggestions = [] if hints else list(dict.fromkeys(same_leaf + close))[:4]
  message = f"unknown config field {path!r}"
  if hints:
    message += "; " + "; ".join(hints)
  if suggestions:
    message += "; closest fields: " + ", ".join(suggestions)
  elif not hints:
    message += "; the config's top-level fields: " + ", ".join(config.keys())
  return f"{message}; {FIELDS_HINT}"


def check_field_paths(config, paths) -> None:
  """Raises ValueError (see `unknown_field_message`) for the first dotted path in `paths` that
  `config` does not have; use it on command-line overrides and sweep override dicts."""
  for path in paths:
    if not has_field(config, path):
      raise ValueError(unknown_field_message(config, path))


def flatten_config(tree: dict, prefix: str = "") -> dict:
  """A nested config dict (e.g. `ConfigDict.to_dict()` or a saved config.json) as one flat dict
  keyed by dotted field paths (`{"rl": {"group_size": 8}}` -> `{"rl.group_size": 8}`)."""
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out.update(flatten_config(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out
