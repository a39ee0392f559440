"""experiments/configs/long_responses.py: its responses are as long as the worked solutions of its
chains, the sampler's limit fits the longest of them, and the smoke variant trains on rollouts that
long."""

import json
import os

import numpy as np
import pytest

from rlscale.runner import preflight
from rlscale.runner.config_files import import_python_file, load_config_file
from rlscale.runner.loop import train_and_evaluate
from rlscale.tasks import make_task
from rlscale.tokenizers import load_tokenizer

PATH = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "configs",
                    "long_responses.py")
MODULE = import_python_file(PATH, "config")


def _worked_lengths(config, count=300):
  """Response tokens (EOS included) of the worked solutions, and prompt tokens, of `count`
  training examples and every held-out one of `config`'s task, as the character tokenizer
  encodes them."""
  task = make_task(config.task, seed=config.seed)
  tokenizer = load_tokenizer("char")
  examples = [task.train_example(i) for i in range(count)]
  examples += task.eval_examples(config.task.eval_size)
  responses = np.array([len(tokenizer.encode(task.format_target(e))) + 1 for e in examples])
  prompts = np.array([len(tokenizer.encode_prompt(task.format_prompt(e))) for e in examples])
  return responses, prompts


def test_worked_tokens_bound_by_hand():
  # 3 terms: " 4 + 2 = 6" + EOS is 11; the bound takes "-18" and "-27" for the two values.
  assert MODULE.worked_tokens_bound(3) == 1 + (3 + 3) + 4 + 3 + 1
  # 12 terms: values -18 .. -99 (10 x 3) and -108 (4), tails 4 x (10 + 9 + ... + 0) = 220,
  # 10 separators " = ", the leading space and EOS.
  assert MODULE.worked_tokens_bound(12) == 34 + 220 + 30 + 2 == 286
  assert MODULE.prompt_tokens(3) == len("7 - 3 + 2 =")


@pytest.mark.parametrize("arg", [None, "smoke"])
def test_the_sampler_limit_fits_every_worked_solution(arg):
  config = load_config_file(PATH, arg)
  terms = MODULE.SMOKE_TERMS if arg == "smoke" else MODULE.TERMS
  assert config.task.kwargs.min_terms == config.task.kwargs.max_terms == terms
  assert config.task.target_template == " {worked}"
  responses, prompts = _worked_lengths(config)
  assert (prompts == config.rollout.max_prompt_tokens).all()
  # The bound holds and is tight (within the few characters of a shorter running value).
  assert MODULE.worked_tokens_bound(terms) - 4 <= responses.max() <= MODULE.worked_tokens_bound(
      terms)
  assert config.rollout.max_new_tokens == MODULE.worked_tokens_bound(terms) + MODULE.MARGIN_TOKENS
  if arg is None:  # the full run's correct responses are hundreds of tokens
    assert responses.min() >= 250 and 265 <= responses.mean() <= 285
  preflight.check_config(config)


@pytest.mark.slow
def test_smoke_variant_trains_on_long_responses(tmp_path):
  """The smoke variant unshrunk: every step samples and trains rows at least as long as the
  shortest worked solution of its chains (EOS included), and the run writes its metrics, summary
  and evaluations."""
  config = load_config_file(PATH, "smoke")
  shortest = int(_worked_lengths(config)[0].min())
  assert shortest >= 55  # 6 one-digit terms: 5 running sums
  summary = train_and_evaluate(config, str(tmp_path))
  records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  steps = [r for r in records if r["step"] >= 1]
  assert [r["step"] for r in steps] == list(range(1, config.train.total_steps + 1))
  batch = config.rl.batch_size
  for record in steps:
    assert record["response/length_mean"] >= shortest, record
    assert record["batch/response_width"] >= shortest
    assert record["tokens/generated"] >= batch * shortest
    assert record["tokens/trained"] >= batch * (config.rollout.max_prompt_tokens + shortest)
  evaluated = [r for r in records if "eval/greedy_accuracy" in r]
  assert [r["step"] for r in evaluated] == [0, 3, 6]
  assert summary["steps"] == config.train.total_steps
  assert summary["final_accuracy"] is not None and summary["warm_start_accuracy"] is not None
  assert (tmp_path / "summary.json").is_file() and (tmp_path / "policy" / "config.json").is_file()
