"""GRPO from a local Qwen3-family HF checkpoint on a local GSM8K-style JSONL, for GPU/TPU users.

Nothing is downloaded: put the checkpoint directory (config.json, model.safetensors or a sharded
index, tokenizer.json) and the data file on disk and pass their paths:

  python -m rlscale.main --config=experiments/configs/hf_qwen3.py --workdir=runs/qwen3 \\
      --config.model.checkpoint_path=/path/to/Qwen3-0.6B \\
      --config.task.data_path=/path/to/gsm8k_train.jsonl

Smoke run (checks the pipeline in a few minutes on a CPU even for a 0.6B model: P = 2 prompts x
G = 2 samples, 32-token responses, 2 steps, up to 4 held-out prompts):

  python -m rlscale.main --config=experiments/configs/hf_qwen3.py:smoke --workdir=/tmp/qwen3_smoke \\
      --config.model.checkpoint_path=/path/to/Qwen3-0.6B \\
      --config.task.data_path=/path/to/gsm8k_train.jsonl

Prompts are the user message of the checkpoint's own chat template (task.chat_template="on",
Qwen3's thinking off); the run's log says how prompts are encoded, and policy/ keeps the template.
Missing paths stop the run at once with a message naming the field.
"""

import ml_collections
from ml_collections.config_dict import placeholder

from rlscale.runner.config_files import load_config_file, sibling


def get_config(arg=None):
  """GRPO with an HF checkpoint as the policy (no SFT warm start) and a local math dataset;
  `arg="smoke"` makes every dimension small (batch, response length, steps, evaluation)."""
  config = load_config_file(sibling(__file__, "default.py"), arg)
  # Policy from a local HF checkpoint directory (required; nothing is downloaded).
  config.model.source = "hf"
  config.model.checkpoint_path = ""
  # bfloat16 compute on accelerators; the weights train as float32 master weights and the final
  # policy is exported in the checkpoint's own dtype.
  config.model.dtype = "bfloat16"
  # GSM8K-style JSONL ({"question", "answer" ending in "#### N"}) prepared once into TFDS.
  config.task.source = "local_math"
  # Generator kwargs are for reasoning_gym sources only.
  config.task.kwargs = ml_collections.ConfigDict()
  config.task.data_path = ""
  # The question is the source's {question} field (see rlscale.tasks.base.TaskSource); it becomes
  # the user message of the checkpoint's chat template, as TRL and verl build RL prompts for an
  # instruct model (an error if the checkpoint ships no template: set "auto" or "off" for a base
  # model).
  config.task.prompt_template = (
      "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}.")
  config.task.chat_template = "on"
  # Qwen3's thinking switch: off, so the 512-token responses are spent on the worked answer, not
  # on a <think> block (--config.task.chat_template_kwargs.enable_thinking=True turns it on).
  config.task.chat_template_kwargs = ml_collections.ConfigDict(dict(enable_thinking=False))
  config.task.extract_order = "boxed,answer_tag,gsm8k,last_number"
  # Held-out prompts: None takes default_eval_size of the file's held-out rows, fewer with a
  # warning when the file holds fewer; a number set here or on the command line is required
  # exactly (an error when the file holds fewer).
  config.task.eval_size = placeholder(int)
  config.task.default_eval_size = 256
  config.rollout.max_prompt_tokens = 256
  config.rollout.max_new_tokens = 512
  config.rl.prompts_per_step = 32
  config.rl.group_size = 8
  config.rl.kl_coef = 0.001
  config.optim.learning_rate = 1e-6
  # TRL's and verl's clipping default (default.py's 50 is chosen from the small model's norms; a
  # pretrained model's pre-clip norms are unmeasured here: read optim/clipped in metrics.jsonl).
  config.optim.grad_clip_norm = 1.0
  config.optim.warmup_steps = 10
  # The checkpoint is the warm start: no SFT.
  config.sft.steps = 0
  config.train.total_steps = 200
  config.train.eval_every = 20
  config.train.checkpoint_every = 20
  if arg == "smoke":
    # Small in every dimension, so a 0.6B model runs it on a CPU: it checks the pipeline
    # (loading, sampling, verifier, update, checkpoint, export), not learning.
    config.rl.prompts_per_step = 2
    config.rl.group_size = 2
    config.rollout.max_new_tokens = 32
    config.task.default_eval_size = 4
    config.eval.pass_k = 2
    config.optim.warmup_steps = 0
    config.train.total_steps = 2
    config.train.eval_every = 2
    config.train.checkpoint_every = 2
  return config
