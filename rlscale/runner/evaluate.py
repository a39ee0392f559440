"""Held-out evaluation: greedy accuracy, and mean reward, sampled accuracy and pass@k of samples.

Greedy accuracy decodes at temperature 0. The sampled metrics draw with the rollout's whole
sampling config (temperature, top-k, top-p, min-p), unless `eval.sampling` overrides fields of it
(`eval_sampling`), so pass@k measures the policy the run samples from (TRL's GRPOTrainer
generates its evaluation completions with its training sampling parameters; `eval.sampling` is a
separate set where wanted, as verl's `val_kwargs`).

A response counts as correct when the verifier says so (`score_batch`'s verdict: full marks from the
task scorer, before the format reward and overlong shaping); the mean reward is the shaped reward.

Every evaluation of a run, and every run of a sweep, samples with the same key (`evaluation_key`,
from `task.eval_seed`): common random numbers, so held-out differences between runs or between
evaluations are the policies', not sampling noise.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from rlscale.runner import hosts as hosts_lib
from rlscale.runner.batching import decode_responses, encode_prompts
from rlscale.sampler.strategies import SamplingConfig
from rlscale.tasks.rewards import score_batch


EVAL_SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "min_p")


def eval_sampling(rollout: SamplingConfig, overrides=None) -> SamplingConfig:
  """The SamplingConfig of the sampled held-out metrics: the rollout's, with every field of
  `overrides` (config `eval.sampling`: temperature, top_k, top_p, min_p) that is not None in its
  place. E.g. rollout (0.7, top_k 20, top_p 0.9) with {"top_p": 1.0} -> (0.7, 20, 1.0).

  Raises:
    ValueError: an unknown field, or a value SamplingConfig rejects (named eval.sampling.<field>).
  """
  overrides = dict(overrides.to_dict() if hasattr(overrides, "to_dict") else overrides or {})
  unknown = sorted(set(overrides) - set(EVAL_SAMPLING_FIELDS))
  if unknown:
    raise ValueError(f"unknown eval.sampling field(s) {unknown}; allowed: "
                     f"{', '.join(EVAL_SAMPLING_FIELDS)} (None = the rollout's)")
  fields = {name: getattr(rollout, name) for name in EVAL_SAMPLING_FIELDS}
  fields.update({k: v for k, v in overrides.items() if v is not None})
  try:
    return SamplingConfig(**fields)
  except ValueError as e:
    raise ValueError(str(e).replace("sampling.", "eval.sampling.")) from None


def evaluation_key(eval_seed: int):
  """The one sampling key of every held-out evaluation: `jax.random.key(eval_seed)` folded with a
  constant (so it differs from any key drawn from the same seed for the held-out split).

  Derived from config `task.eval_seed`, not `config.seed` or the step, so all evaluations of a run
  and all runs of a sweep draw the same noise. Raises ValueError for a non-int seed."""
  import jax  # pylint: disable=g-import-not-at-top
  if isinstance(eval_seed, bool) or not isinstance(eval_seed, int):
    raise ValueError(f"task.eval_seed must be an int, got {eval_seed!r}")
  return jax.random.fold_in(jax.random.key(eval_seed), 0x5EED)


def pad_to_multiple(arrays: Sequence[np.ndarray], multiple: int) -> tuple[list[np.ndarray], int]:
  """Pads the batch axis by repeating the last row so its size divides `multiple`.

  Returns (padded arrays, original batch size)."""
  n = len(arrays[0])
  extra = (-n) % multiple
  if not extra:
    return list(arrays), n
  return [np.concatenate([a, np.repeat(a[-1:], extra, axis=0)]) for a in arrays], n


@dataclasses.dataclass
class Evaluator:
  """Scores a policy on a fixed list of held-out examples.

  Attributes:
    task: the task source (format_prompt, score).
    tokenizer: encodes prompts and decodes responses.
    sampler: `rlscale.sampler.sampler.Sampler` (on the run's mesh).
    examples: held-out examples (never in the training stream).
    prompt_buckets: allowed left-padded prompt lengths (tokens).
    num_devices: how many parts the mesh splits a batch's rows into (its batch axes; batches are
      padded to a multiple of it).
    pass_k: samples per prompt for the sampled metrics and pass@k.
    sampling: the SamplingConfig of the sampled metrics (`eval_sampling`: the rollout's unless
      eval.sampling overrides it); greedy accuracy always decodes at temperature 0.
    hosts: this process's place among the run's processes (`hosts.Hosts`; one process by
      default): each samples and scores its share of the prompts.
  """
  task: Any
  tokenizer: Any
  sampler: Any
  examples: Sequence[Any]
  prompt_buckets: Sequence[int]
  num_devices: int
  pass_k: int
  sampling: SamplingConfig
  hosts: hosts_lib.Hosts = hosts_lib.Hosts()

  def _score(self, params, tokens, mask, rng, sampling, samples_per_prompt: int):
    """[P * samples_per_prompt] shaped rewards (float32) and verdicts (bool), row
    p * samples_per_prompt + g for example p.

    The prompts are padded (repeating the last) to a multiple of `num_devices`; with several
    processes each samples and scores its contiguous share (`hosts.own_rows`), and the rows of
    all are gathered in process order: the one-process rows, as the sampler's noise follows a
    row's place in the global batch."""
    hosts = self.hosts
    (tokens, mask), num_prompts = pad_to_multiple([tokens, mask], self.num_devices)
    indices = hosts_lib.own_rows(np.arange(len(tokens)), hosts)
    tokens, mask = hosts_lib.own_rows((tokens, mask), hosts)
    rollout = self.sampler(params, tokens, mask, rng, sampling=sampling,
                           samples_per_prompt=samples_per_prompt)
    t_r = rollout.response_mask.shape[1]
    texts = decode_responses(self.tokenizer, rollout.tokens[:, -t_r:], rollout.response_mask)
    rows = [self._example(int(i)) for i in indices for _ in range(samples_per_prompt)]
    rewards, correct, _ = score_batch(self.task, texts, rows, response_lengths=rollout.lengths)
    rewards, correct = hosts_lib.gather_rows(
        (np.asarray(rewards, np.float32), np.asarray(correct, bool)), hosts)
    n = num_prompts * samples_per_prompt
    return rewards[:n], correct[:n]

  def _example(self, index: int):
    """Held-out example `index`; the padding rows past the end repeat the last one."""
    return self.examples[min(index, len(self.examples) - 1)]

  def __call__(self, params, rng) -> dict[str, float]:
    """Returns {"eval/greedy_accuracy", "eval/mean_reward", "eval/pass_at_k", "eval/sampled_accuracy"}.

    params: as the sampler takes them (the state's global arrays, or host arrays)."""
    import jax  # pylint: disable=g-import-not-at-top
    texts = [self.task.format_prompt(e) for e in self.examples]
    tokens, mask = encode_prompts(self.tokenizer, texts, self.prompt_buckets)
    _, greedy = self._score(params, tokens, mask, jax.random.fold_in(rng, 0),
                            SamplingConfig(temperature=0.0), 1)
    k = self.pass_k
    sampled, sampled_correct = self._score(params, tokens, mask, jax.random.fold_in(rng, 1),
                                           self.sampling, k)
    correct = sampled_correct.reshape(len(self.examples), k)
    return {
        "eval/greedy_accuracy": float(np.mean(greedy)),
        "eval/mean_reward": float(np.mean(sampled)),
        "eval/sampled_accuracy": float(np.mean(correct)),
        "eval/pass_at_k": float(np.mean(correct.any(axis=1))),
    }


def accuracy_noise(before: float, after: float, n: int) -> float:
  """Two standard errors of the difference of two accuracies on the same n held-out prompts,
  treated as independent binomials (conservative for paired evaluations): 2 sqrt(2 p (1 - p) / n)
  with the pooled p = (before + after) n + 1 over 2 n + 2 (the +1/+2 keeps it above 0 when
  both are 0 or 1). Raises ValueError for n < 1."""
  if n < 1:
    raise ValueError(f"need at least one held-out prompt, got n={n}")
  p = ((before + after) * n + 1) / (2 * n + 2)
  return 2.0 * float(np.sqrt(2.0 * p * (1.0 - p) / n))


def accuracy_change_note(before: float | None, after: float | None, n: int, *,
                         smoke: bool = False) -> str:
  """The run's closing line: the held-out greedy accuracy change against `accuracy_noise` for n
  prompts, and for a smoke run (`smoke`) that it checks the pipeline, not learning."""
  if before is None or after is None:
    return "no held-out accuracy to compare"
  change, noise = after - before, accuracy_noise(before, after, n)
  measured = (f"held-out greedy accuracy {before:.3f} -> {after:.3f} ({change:+.3f}; noise "
              f"+-{noise:.3f} for {n} held-out prompts)")
  if smoke:
    verdict = "a gain beyond noise" if change > noise else "no gain beyond noise, as expected"
    return (f"smoke run: it checks the pipeline (model, sampling, rewards, updates, checkpoints, "
            f"export), not learning; {measured}: {verdict}. Run without :smoke to measure learning")
  if abs(change) <= noise:
    return f"{measured}: no change beyond noise"
  return f"{measured}: a {'gain' if change > 0 else 'loss'} beyond noise"
