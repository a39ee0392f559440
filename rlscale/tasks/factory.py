"""`make_task`: the config's `task` section -> a `TaskSource`.

Fields read (all but `source` optional; see experiments/configs/default.py for comments):
  source, name, kwargs, scorer, data_path, data_dir, eval_size, default_eval_size, eval_seed,
  holdout_fraction,
  prompt_template, target_template, extract_order, rel_tol, percent, timeout_s,
  max_response_chars, max_answer_chars, format_weight, overlong_max_len, overlong_cache_len,
  nonfinite_reward, chat_template, system_prompt, chat_template_kwargs.
The last three become `task.chat_format` (`rlscale.tokenizers.ChatFormat`), which the runner hands
to the tokenizer: the task owns how its prompts are written, the checkpoint's files how they are
rendered and encoded.
Sources are imported lazily: reasoning-gym and TFDS load only when chosen.
"""

from __future__ import annotations

from typing import Any, Mapping

from rlscale import tokenizers
from rlscale.tasks import base
from rlscale.tasks import rewards
from rlscale.tasks import verifier

SOURCES = ("reasoning_gym", "local_math", "arithmetic")
SCORERS = ("verifier", "native")
FIELDS = ("source", "name", "kwargs", "scorer", "data_path", "data_dir", "eval_size",
          "default_eval_size", "eval_seed", "holdout_fraction", "prompt_template", "target_template",
          "extract_order", "rel_tol", "percent", "timeout_s", "max_response_chars",
          "max_answer_chars", "format_weight", "overlong_max_len", "overlong_cache_len",
          "nonfinite_reward", "chat_template", "system_prompt", "chat_template_kwargs")
_VERIFIER_FIELDS = ("extract_order", "rel_tol", "percent", "timeout_s", "max_response_chars",
                    "max_answer_chars")
_REWARD_FIELDS = ("format_weight", "overlong_max_len", "overlong_cache_len", "nonfinite_reward")


def _plain(value: Any) -> Any:
  """ConfigDict / FrozenConfigDict -> dict (recursively); other values unchanged."""
  return value.to_dict() if hasattr(value, "to_dict") else value


def make_task(task_cfg: Mapping[str, Any], *, seed: int) -> base.TaskSource:
  """Builds the task source described by the config's `task` section.

  Args:
    task_cfg: ConfigDict or dict with the fields listed in the module docstring.
    seed: run seed (training stream order; the held-out set does not depend on it).

  Returns:
    A TaskSource with `verifier_config`, `reward_config` and `chat_format` attributes set.

  Raises:
    ValueError: unknown source, scorer or field, an invalid value, or a prompt template naming
      metadata the source lacks (the message names the field and the allowed values).
    FileNotFoundError: source="local_math" and data_path does not exist.
  """
  cfg = {k: _plain(v) for k, v in dict(_plain(task_cfg)).items() if v is not None}
  unknown = sorted(set(cfg) - set(FIELDS))
  if unknown:
    raise ValueError(f"unknown task field(s) {unknown}; allowed: {', '.join(FIELDS)}")
  source = cfg.get("source")
  if source not in SOURCES:
    raise ValueError(f"task.source={source!r}; allowed values: {', '.join(SOURCES)}")
  scorer = cfg.get("scorer", "verifier")
  if scorer not in SCORERS:
    raise ValueError(f"task.scorer={scorer!r}; allowed values: {', '.join(SCORERS)}")
  if scorer == "native" and source != "reasoning_gym":
    raise ValueError(f"task.scorer='native' needs task.source='reasoning_gym', got {source!r}")
  verifier_config = verifier.VerifierConfig(
      **{k: cfg[k] for k in _VERIFIER_FIELDS if k in cfg})
  reward_config = rewards.RewardConfig(**{k: cfg[k] for k in _REWARD_FIELDS if k in cfg})
  chat_format = tokenizers.ChatFormat(mode=cfg.get("chat_template"),
                                      system_prompt=cfg.get("system_prompt"),
                                      template_kwargs=cfg.get("chat_template_kwargs") or {})
  common = dict(verifier_config=verifier_config)
  for key in ("prompt_template", "target_template", "holdout_fraction"):
    if key in cfg:
      common[key] = cfg[key]
  kwargs = dict(cfg.get("kwargs") or {})
  if source == "reasoning_gym":
    from rlscale.tasks import reasoning_gym_source  # pylint: disable=g-import-not-at-top
    if "name" not in cfg:
      raise ValueError("task.name must name a reasoning-gym generator, e.g. 'chain_sum'")
    task = reasoning_gym_source.ReasoningGymSource(
        cfg["name"], kwargs, seed=seed, eval_seed=cfg.get("eval_seed", 1234), scorer=scorer,
        **common)
  elif source == "arithmetic":
    from rlscale.tasks import arithmetic  # pylint: disable=g-import-not-at-top
    try:
      task = arithmetic.ArithmeticSource(seed=seed, eval_seed=cfg.get("eval_seed", 1234),
                                         **kwargs, **common)
    except TypeError as e:
      raise ValueError(f"task.kwargs={kwargs} for source='arithmetic': {e}; allowed: "
                       "min_operand, max_operand, num_operands, operators") from None
  else:
    from rlscale.tasks import local_math  # pylint: disable=g-import-not-at-top
    if kwargs:
      raise ValueError(f"task.kwargs={kwargs} must be empty for source='local_math'")
    task = local_math.LocalMathSource(cfg.get("data_path"), seed=seed,
                                      data_dir=cfg.get("data_dir"), **common)
  task.reward_config = reward_config
  task.chat_format = chat_format
  task.format_prompt(task.train_example(0))  # a template naming absent metadata fails here
  return task
