"""A wrong config stops the run before any work, with an error naming the field and allowed values."""

import pytest

from rlscale.runner.builders import build_run
from rlscale.runner.validate import check_config, prompt_buckets
from tests.runner.runner_configs import tiny_config


def _build(tmp_path, **overrides):
  return build_run(tiny_config(**overrides), str(tmp_path), log=lambda _: None)


@pytest.mark.parametrize("overrides, message", [
    ({"rl__policy_loss": "nope"}, "ppo_clip"),  # lists the registered losses
    ({"rl__advantage": "nope"}, "grpo"),  # lists the registered estimators
    ({"rl__algorithm": "nope"}, "rl.algorithm"),
    ({"rl__group_size": 1, "rl__batch_size": 2}, "rl.group_size"),
    ({"rl__microbatches": 3}, "microbatches"),
    ({"optim__learning_rate": 0.0}, "optim.learning_rate"),
    ({"optim__learning_rate": -1e-4}, "optim.learning_rate"),
    ({"optim__schedule": "exp"}, "optim.schedule"),
    ({"optim__schedule_unit": "epochs"}, "optim.schedule_unit='epochs' is not one of"),
    # tiny budget: 4 steps x B = 4 responses = 16
    ({"optim__schedule_unit": "samples", "optim__warmup_samples": 32},
     "optim.warmup_samples=32 must be <= the decay horizon optim.decay_samples=16"),
    ({"optim__lr_scaling": "sqrt_adam", "optim__reference_batch": 0}, "optim.reference_batch"),
    ({"sft__seed": True}, "sft.seed"),
    ({"train__measure_noise_scale": None}, "train.measure_noise_scale"),
    ({"train__max_tokens_per_row": 0}, "train.max_tokens_per_row must be an int >= 1 or None"),
    ({"train__max_tokens_per_row": 10},
     "train.max_tokens_per_row=10 must be >= rollout.max_prompt_tokens \\+ "
     "rollout.max_new_tokens = 20"),
    ({"train__max_tokens_per_microbatch": 64}, "needs train.max_tokens_per_row"),
    ({"train__max_tokens_per_row": 32, "train__max_tokens_per_microbatch": 16},
     "train.max_tokens_per_microbatch=16 must be >= train.max_tokens_per_row=32"),
    ({"model__source": "web"}, "model.source"),
    ({"model__source": "hf"}, "model.checkpoint_path"),
    ({"task__source": "nope"}, "task.source"),
    ({"task__scorer": "nope"}, "task.scorer"),
    ({"train__eval_every": 0}, "train.eval_every"),
    ({"sft__learning_rate": 0.0}, "sft.learning_rate"),
    ({"rollout__max_new_tokens": 0}, "rollout.max_new_tokens"),
    ({"rollout__top_p": 1.5}, "rollout.top_p"),
    ({"rollout__host_threads": 0}, "rollout.host_threads"),
    ({"rollout__async_overlap": "process"},
     "rollout.async_overlap='process' is not one of"),
    ({"rl__max_off_policy_steps": -1}, "rl.max_off_policy_steps must be an int >= 0"),
    ({"rl__off_policy_correction": "vtrace"}, "rl.off_policy_correction='vtrace' is not registered"),
    # True passed the int check (bool is an int) and was named only by the Sampler.
    ({"rollout__host_threads": True}, "rollout.host_threads"),
    ({"rollout__max_new_tokens": True}, "rollout.max_new_tokens"),
    ({"rl__algorithm": "dapo", "task__overlong_max_len": 8, "task__overlong_cache_len": 2},
     "overlong shaping is on twice"),
    # NaN fails every comparison, so `<= 0` checks let it through (issue 39)
    ({"optim__learning_rate": float("nan")}, "optim.learning_rate must be > 0 and finite, got nan"),
    ({"optim__learning_rate": float("inf")}, "optim.learning_rate must be > 0 and finite, got inf"),
    ({"optim__eps": float("nan")}, "optim.eps must be >= 0 and finite"),
    ({"optim__grad_clip_norm": float("nan")}, "optim.grad_clip_norm must be a finite number"),
    ({"sft__learning_rate": float("nan")}, "sft.learning_rate must be > 0 and finite, got nan"),
    ({"rl__algorithm": "ppo", "rl__group_size": 1, "rl__batch_size": 2,
      "optim__critic_learning_rate": float("inf")}, "optim.critic_learning_rate must be > 0"),
])
def test_bad_config_names_the_field(tmp_path, overrides, message):
  with pytest.raises(ValueError, match=message.replace(".", r"\.")):
    _build(tmp_path, **overrides)


def test_check_config_refuses_without_a_workdir():
  """`check_config` is build_run's validation, callable before any workdir exists."""
  with pytest.raises(ValueError, match=r"rl\.group_size must be an int >= 1"):
    check_config(tiny_config(rl__group_size=0))
  checked = check_config(tiny_config())
  assert checked.rl.prompts_per_step * checked.rl.group_size == 4 and checked.total_steps == 4
  assert checked.prompt_buckets == (16,) and checked.critic_optimizer is None


def test_missing_checkpoint_directory(tmp_path):
  with pytest.raises(FileNotFoundError, match="model.checkpoint_path"):
    _build(tmp_path, model__source="hf", model__checkpoint_path=str(tmp_path / "missing"))


def test_missing_local_data_file(tmp_path):
  with pytest.raises((FileNotFoundError, ValueError), match="missing.jsonl"):
    _build(tmp_path, task__source="local_math", task__kwargs={},
           task__data_path=str(tmp_path / "missing.jsonl"))


def test_unknown_config_argument():
  with pytest.raises(ValueError, match="smoke"):
    tiny_config(arg="smok")


def test_prompt_buckets():
  assert prompt_buckets(16) == (16,)
  assert prompt_buckets(100) == (16, 32, 64, 100)
  with pytest.raises(ValueError, match="rollout.max_prompt_tokens"):
    prompt_buckets(0)
