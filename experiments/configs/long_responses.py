"""GRPO with long responses on a CPU: the worked solutions of 12-term +/- chains (~272 tokens).

Run (11 min 19 s measured: 414 s model load and warm start, 261 s of 60 GRPO steps and their
evaluations; the install comes before):

  python -m rlscale.main --config=experiments/configs/long_responses.py \\
      --workdir=runs/long_responses

Smoke run (36 s measured; 6-term chains, worked solutions of 59-68 tokens):

  python -m rlscale.main --config=experiments/configs/long_responses.py:smoke \\
      --workdir=/tmp/long_smoke

The task is default.py's reasoning-gym `chain_sum` with exactly 12 one-digit terms (prompts like
`1 + 6 - 2 + ... - 4 =`, 47 tokens), and the warm start writes out every running sum
(`task.target_template = " {worked}"`, rlscale.tasks.worked): each step folds the first two terms
and copies the rest, so a correct response writes 11 running sums, 263-284 tokens with EOS (mean 272
over 2,000 chains; the character tokenizer: one token per character) and never more than
`worked_tokens_bound(12)` = 286; rollout.max_new_tokens = 286 + 32 = 318. The built-in 0.41M-
parameter model, GRPO at default.py's settings (lr 1e-4 cosine, temperature 0.5, G = 8) with
P = 8 prompts (B = 64 responses) for 60 steps, evaluated every 20 on 128 held-out prompts.

What it measures: generation and training time with responses ~35x the main job's 8 tokens, not
learning. Measured with seed 0 on 2026-12-07 (a 2-core Intel Xeon shared with other jobs, load
4.5-6; commit a8ff984): every step sampled 64 responses of mean 271-276 tokens (272 over the run;
none truncated), ~17,400 tokens in 0.69 s (~25,000 tokens/s), and trained ~20,400 prompt and
response tokens in 2.5 s (~8,000 tokens/s): training 152 s and generation 41 s of the RL
clock, evaluation 45 s, compile 16 s. The 200-step warm start (SFT loss 4.51 -> 0.71, ~2.0 s a
step) learns the answer's shape and length but not its content: greedily it gets 1.8% of the
running sums right from its own previous line and copies 18% of the remaining terms right. So
held-out greedy accuracy is 0.000 after the warm start and 0.000 after RL (pass@4 0.000 both),
the reward is 0 on every sample, no group has reward variance, and every update is exactly zero
(train/grad_norm 0): the update step runs at its full cost but the policy does not change.
Longer warm starts did not help within this budget: 300 SFT steps of 32 left 6-term chains at
0/128 (the terms copied right, the sums wrong) and 12-term chains at SFT loss 0.59, 0/128.
With `--config.task.kwargs.min_terms=2` (2 to 12 terms: long-tailed lengths, a workload for
train.max_tokens_per_row) the same run (727 s) sampled responses of mean 139 tokens in rows padded
to ~313, and had reward variance in 8 of its 60 steps: 0.008 -> 0.008, no learning either.
"""

from rlscale.runner.config_files import load_config_file, sibling

# One-digit terms per chain: the full run's and the smoke run's. The prompt and response limits
# are derived from them: raise them here, not with --config.task.kwargs.max_terms (a smaller
# --config.task.kwargs.min_terms fits the limits).
TERMS = 12
SMOKE_TERMS = 6
# Response tokens allowed beyond the longest worked solution.
MARGIN_TOKENS = 32


def worked_tokens_bound(terms: int) -> int:
  """The most response tokens (characters, EOS included) of a worked solution of `terms`
  one-digit terms under the target template " {worked}" (`rlscale.tasks.worked`): step i
  (1 .. terms - 1) writes the running value, at most as long as -9 (i + 1), then the
  terms - 1 - i terms left (" + 7": 4 characters each); steps are joined by " = "."""
  steps = range(1, terms)
  values = sum(len(str(-9 * (i + 1))) for i in steps)
  tails = sum(4 * (terms - 1 - i) for i in steps)
  return 1 + values + tails + 3 * (terms - 2) + 1


def prompt_tokens(terms: int) -> int:
  """Tokens of the prompt "7 - 3 + ... + 2 =" of `terms` one-digit terms."""
  return terms + 3 * (terms - 1) + 2


def get_config(arg=None):
  """default.py's GRPO on `TERMS`-term chain sums whose warm start writes out every running sum;
  `arg="smoke"` runs `SMOKE_TERMS`-term chains for a ~1 minute pipeline check."""
  config = load_config_file(sibling(__file__, "default.py"), arg)
  terms = SMOKE_TERMS if arg == "smoke" else TERMS
  # Chains of exactly `terms` one-digit numbers joined by + and -.
  config.task.kwargs.min_terms = terms
  config.task.kwargs.max_terms = terms
  # The warm start's target (and so a correct response): the running sums, e.g. `7 - 3 + 2 =`
  # -> ` 4 + 2 = 6`; the last number is the answer (the last_number extractor scores it).
  config.task.target_template = " {worked}"
  # Every prompt has the same length; the largest prompt bucket is exactly that width.
  config.rollout.max_prompt_tokens = prompt_tokens(terms)
  # The longest worked solution plus a margin (the sampler stops when every row has ended).
  config.rollout.max_new_tokens = worked_tokens_bound(terms) + MARGIN_TOKENS
  if arg == "smoke":
    # default.py's smoke run (P 4 x G 4, 6 steps, 16 held-out prompts) with a warm start of
    # 40 steps of 16 solutions: it checks the pipeline on long rows, not learning.
    config.sft.steps = 40
    config.sft.batch_size = 16
    return config
  # Warm start: 200 steps of 32 worked solutions at 3e-3 (each row padded to max_new_tokens).
  config.sft.steps = 200
  config.sft.batch_size = 32
  config.sft.learning_rate = 3e-3
  # B = P x G = 8 x 8 = 64 responses per step, 60 steps, evaluated every 20 on 128 prompts.
  config.rl.prompts_per_step = 8
  config.train.total_steps = 60
  config.train.eval_every = config.train.checkpoint_every = 20
  config.task.eval_size = 128
  return config
