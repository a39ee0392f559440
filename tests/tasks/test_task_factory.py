"""make_task: the config's task section -> a TaskSource, with clear errors."""

import importlib.util
import os

import ml_collections
import pytest

from rlscale import tokenizers
from rlscale.tasks import arithmetic
from rlscale.tasks import make_task
from rlscale.tasks import reasoning_gym_source

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _default_config(arg=None):
  path = os.path.join(ROOT, "experiments", "configs", "default.py")
  spec = importlib.util.spec_from_file_location("default_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def test_default_config_builds_the_main_job_task():
  config = _default_config()
  task = make_task(config.task, seed=config.seed)
  assert isinstance(task, reasoning_gym_source.ReasoningGymSource)
  example = task.train_example(0)
  # The short template for the character model: the chain_sum expression and "=".
  assert task.format_prompt(example) == example.metadata["expression"] + " ="
  assert len(task.format_prompt(example)) <= config.rollout.max_prompt_tokens
  assert task.score(task.format_target(example), example).reward == 1.0
  assert len(task.eval_examples(config.task.eval_size)) == config.task.eval_size
  assert task.verifier_config.timeout_s == 0.9 and task.reward_config.format_weight == 0.0


def test_fields_reach_the_verifier_and_rewards():
  task = make_task(dict(source="arithmetic", kwargs=ml_collections.ConfigDict(
      dict(max_operand=20, operators="*")), rel_tol=0.01, percent=True, extract_order="full",
                        format_weight=0.2, overlong_max_len=8, overlong_cache_len=2), seed=0)
  assert isinstance(task, arithmetic.ArithmeticSource) and task.operators == "*"
  assert task.verifier_config.extract_order == ("full",)
  assert (task.verifier_config.rel_tol, task.verifier_config.percent) == (0.01, True)
  assert (task.reward_config.overlong_max_len, task.reward_config.format_weight) == (8, 0.2)
  task = make_task(dict(source="arithmetic", nonfinite_reward="error"), seed=0)
  assert task.reward_config.nonfinite_reward == "error"
  assert task.chat_format == tokenizers.ChatFormat()  # auto, no system prompt, no kwargs
  task = make_task(dict(source="arithmetic", chat_template="on", system_prompt="Be brief.",
                        chat_template_kwargs=ml_collections.ConfigDict(
                            dict(enable_thinking=False))), seed=0)
  assert task.chat_format == tokenizers.ChatFormat("on", "Be brief.", {"enable_thinking": False})


@pytest.mark.parametrize("fields, message", [
    (dict(source="hf"), "task.source='hf'; allowed values: reasoning_gym, local_math, arithmetic"),
    (dict(source="arithmetic", scorer="llm"), "task.scorer='llm'; allowed values: verifier, native"),
    (dict(source="arithmetic", scorer="native"), "needs task.source='reasoning_gym'"),
    (dict(source="arithmetic", bogus=1), r"unknown task field\(s\) \['bogus'\]"),
    (dict(source="arithmetic", kwargs=dict(digits=3)), "allowed: min_operand"),
    (dict(source="arithmetic", rel_tol=-1), "task.rel_tol"),
    (dict(source="arithmetic", timeout_s=0), "task.timeout_s"),
    (dict(source="arithmetic", extract_order="last"), "task.extract_order"),
    (dict(source="arithmetic", nonfinite_reward="nan"),
     r"task.nonfinite_reward='nan'; allowed values: zero, error"),
    (dict(source="arithmetic", chat_template="yes"),
     r"task.chat_template='yes'; allowed values: off, on, auto"),
    (dict(source="arithmetic", system_prompt=["x"]), "task.system_prompt must be a string"),
    (dict(source="arithmetic", chat_template_kwargs=dict(add_generation_prompt=False)),
     r"task.chat_template_kwargs may not set \['add_generation_prompt'\]"),
    (dict(source="reasoning_gym"), "task.name must name a reasoning-gym generator"),
    (dict(source="reasoning_gym", name="basic_arithmetic",
          prompt_template="{metadata[nothing]}"), "needs 'nothing'"),
    (dict(source="local_math"), "task.data_path must be set"),
    (dict(source="local_math", data_path="/x.jsonl", kwargs=dict(a=1)), "must be empty"),
])
def test_errors_name_the_field(fields, message):
  with pytest.raises(ValueError, match=message):
    make_task(fields, seed=0)


def test_missing_local_file_says_where_to_put_it(tmp_path):
  with pytest.raises(FileNotFoundError, match="task.data_path=.*missing.jsonl does not exist"):
    make_task(dict(source="local_math", data_path=str(tmp_path / "missing.jsonl")), seed=0)
