"""Rollouts of one RL step: prompts from the task stream -> G sampled responses each -> scores and
rewards on the host, with DAPO dynamic sampling (Yu et al. 2025) refilling the batch with groups
that carry signal.

A round (`generate_groups`) is P prompts x G responses, groups adjacent (B = P * G rows), held in a
`Generated`; `collect_rollouts` runs one round, or with rl.dynamic_sampling up to
MAX_SAMPLING_ROUNDS of them, and returns the step's batch with statistics over every response
generated. With several processes (`rlscale.runner.hosts`) each process generates its own share of
the rows; the statistics are computed on the union (`gather_generated`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

from rlscale.rl import dapo
from rlscale.runner import hosts as hosts_lib
from rlscale.runner.batching import decode_responses, encode_prompts, longest_prompt
from rlscale.sampler.decode import map_rollout
from rlscale.tasks.rewards import score_batch

MAX_SAMPLING_ROUNDS = 4


def group_stats(rewards: np.ndarray, correct: np.ndarray, group_size: int) -> dict[str, float]:
  """Statistics of P groups of G responses, groups adjacent.

  Args:
    rewards: [P * G] float reward: mean, std and the fraction of groups whose rewards vary (only
      those carry a group-relative learning signal).
    correct: [P * G] bool verifier verdicts: the fraction correct and of all-correct groups.
  """
  groups = rewards.reshape(-1, group_size)
  varied = groups.max(axis=1) - groups.min(axis=1) > 1e-6
  correct = np.asarray(correct, bool)
  return {"reward/mean": float(rewards.mean()), "reward/std": float(rewards.std()),
          "reward/accuracy": float(correct.mean()),
          "groups/with_variance": float(varied.mean()),
          "groups/zero_variance": float(1.0 - varied.mean()),
          "groups/all_correct": float(correct.reshape(-1, group_size).all(axis=1).mean())}



class Generated(NamedTuple):
  """One round of sampling: P prompts x G responses, groups adjacent (B = P * G rows).

  Attributes:
    rollout: the sampler's Rollout of numpy arrays (tokens [B, Tp + Tr] int32, prompt_mask
      [B, Tp], response_mask [B, Tr], logp [B, Tr] float32, lengths [B] int32).
    rewards: [B] float32 training reward: the task reward plus DAPO's overlong penalty when on.
    scores: [B] float32 reward from `score_batch` (task score plus the task's format and
      overlong terms), before the update-side DAPO overlong penalty.
    correct: [B] bool verifier verdicts (what "correct" means in every metric and filter).
    filler: [B] bool, True for the rows of zero-signal groups that only fill a DAPO batch when
      the sampling rounds run out (masked out of the loss); None = no filler rows.
    nonfinite: [B] bool, True where the task score was non-finite and scored 0 (`score_batch`'s
      infos["nonfinite"]); None = none.
  """
  rollout: Any
  rewards: np.ndarray
  scores: np.ndarray
  correct: np.ndarray
  filler: Any = None
  nonfinite: Any = None


def row_flags(generated: Generated, field: str) -> np.ndarray:
  """[B] bool: the [B] bool field `field` of generated (filler, nonfinite), all False when None."""
  rows = getattr(generated, field)
  if rows is None:
    return np.zeros(len(generated.rewards), bool)
  return np.asarray(rows, bool)


def generate_groups(run, state, key, offsets, clock) -> Generated:
  """Samples G responses for each prompt at the task-stream `offsets` (this process's share of a
  round, `hosts.stream_offsets`) and scores them.

  With dynamic sampling every round pads its prompts to the largest bucket, so rounds can be mixed
  in one batch; with several processes all pad to the bucket of the longest prompt of any process,
  so their batches share one shape. Times drawing, encoding and sampling as generation, decoding
  and scoring as reward (`clock`, a RunClock)."""
  rl = run.rl_config
  G = rl.group_size
  hosts = run.hosts
  with clock.measure("generation"):
    examples = [run.task.train_example(i) for i in offsets]
    texts = [run.task.format_prompt(e) for e in examples]
    buckets = run.prompt_buckets[-1:] if rl.dynamic_sampling else run.prompt_buckets
    longest = None
    if hosts.count > 1:
      longest = hosts_lib.global_max(longest_prompt(run.tokenizer, texts), hosts)
    prompt_tokens, prompt_mask = encode_prompts(run.tokenizer, texts, buckets, longest=longest)
    # The G responses of a prompt share its prefill (rows p * G + g, groups adjacent).
    rollout = run.sampler(state.params, prompt_tokens, prompt_mask, key, samples_per_prompt=G)
  with clock.measure("reward"):
    t_r = rollout.response_mask.shape[1]
    texts = decode_responses(run.tokenizer, rollout.tokens[:, -t_r:], rollout.response_mask)
    group_examples = [e for e in examples for _ in range(G)]
    scores, correct, infos = score_batch(run.task, texts, group_examples,
                                         response_lengths=rollout.lengths)
    scores = np.asarray(scores, np.float32)
    rewards = scores
    if rl.overlong_buffer_frac > 0:
      buffer = dapo.overlong_buffer_tokens(rl.overlong_buffer_frac, t_r)
      rewards = scores + np.asarray(dapo.overlong_penalty(
          rollout.lengths, max_len=t_r, buffer_len=buffer,
          penalty_factor=rl.overlong_penalty_factor))
  return Generated(rollout, np.asarray(rewards, np.float32), scores, correct,
                   nonfinite=infos["nonfinite"])


def select_groups(generated: Generated, keep: np.ndarray, group_size: int) -> Generated:
  """The rows of the groups where keep [P] bool is True."""
  rows = np.repeat(keep, group_size)
  rollout = map_rollout(lambda x: np.asarray(x)[rows], generated.rollout)
  return Generated(rollout, generated.rewards[rows], generated.scores[rows],
                   generated.correct[rows], row_flags(generated, "filler")[rows],
                   row_flags(generated, "nonfinite")[rows])


def concat_generated(parts: list[Generated]) -> Generated:
  """The rows of every part of `parts` (non-empty), in order; filler / nonfinite None read as
  all False."""
  return Generated(map_rollout(lambda *xs: np.concatenate(xs), *[p.rollout for p in parts]),
                   np.concatenate([p.rewards for p in parts]),
                   np.concatenate([p.scores for p in parts]),
                   np.concatenate([p.correct for p in parts]),
                   np.concatenate([row_flags(p, "filler") for p in parts]),
                   np.concatenate([row_flags(p, "nonfinite") for p in parts]))


def gather_generated(generated: Generated, hosts: hosts_lib.Hosts) -> Generated:
  """Every process's rows of `generated`, concatenated in process order (the one-process batch);
  `generated` itself with one process."""
  if hosts.count == 1:
    return generated
  rollout, rest = hosts_lib.gather_rows(
      (tuple(generated.rollout), (generated.rewards, generated.scores, generated.correct,
                                  row_flags(generated, "filler"),
                                  row_flags(generated, "nonfinite"))), hosts)
  return Generated(type(generated.rollout)(*rollout), *rest)


def generation_stats(rounds: list[Generated], group_size: int,
                     hosts: hosts_lib.Hosts = hosts_lib.Hosts()) -> dict[str, float]:
  """Reward and length statistics over every response generated this step by every process
  (`hosts`: this process's place; one process by default), before any DAPO filtering, so the
  training-reward curve is not biased by the filter."""
  everything = gather_generated(concat_generated(rounds), hosts)
  stats = group_stats(everything.scores, everything.correct, group_size)
  lengths = np.asarray(everything.rollout.lengths)
  stats.update({
      "reward/shaped_mean": float(everything.rewards.mean()),
      # Task scores that were NaN, infinite or None, scored 0 (rewards.score_batch).
      "reward/nonfinite_frac": float(row_flags(everything, "nonfinite").mean()),
      "response/length_mean": float(lengths.mean()),
      "tokens/generated": int(np.asarray(everything.rollout.response_mask).sum()),
      "sampling/rounds": len(rounds),
      # The sampler's prompt width (a bucket of rollout.max_prompt_tokens): one compile each.
      "batch/prompt_bucket": int(everything.rollout.prompt_mask.shape[1]),
  })
  return stats


def collect_rollouts(run, state, key, counters, clock) -> tuple[Generated, dict]:
  """One rollout batch of P groups, and statistics over all responses generated for it.

  With DAPO dynamic sampling (Yu et al. 2025), groups whose verdicts are all equal carry no
  correctness signal and are dropped; fresh prompts are sampled (up to MAX_SAMPLING_ROUNDS
  rounds) until P groups with signal are collected; if they run out, zero-signal groups fill the
  batch so shapes stay static, marked as `filler` so the update masks them out of the loss (they
  would only dilute the token-mean denominator). The filter uses the verifier's verdicts (groups all right or all
  wrong are dropped), not the shaped reward, as verl's DAPO recipe filters on accuracy. Every generated response counts toward `samples`.
  """
  rl = run.rl_config
  P, G = rl.prompts_per_step, rl.group_size
  hosts = run.hosts
  rounds, parts, spare, kept = [], [], [], 0
  for round_index in range(MAX_SAMPLING_ROUNDS if rl.dynamic_sampling else 1):
    # This process's share of the round (all P with one process); counters stay global.
    generated = generate_groups(
        run, state, jax.random.fold_in(key, round_index),
        hosts_lib.stream_offsets(counters["prompts"], P, hosts), clock)
    counters["prompts"] += P
    counters["samples"] += P * G
    rounds.append(generated)
    if not rl.dynamic_sampling:
      return generated, generation_stats(rounds, G, hosts)
    signal_groups = np.asarray(dapo.groups_with_signal(generated.correct.astype(np.float32), G))
    keep = np.zeros(P, bool)
    keep[np.flatnonzero(signal_groups)[:P - kept]] = True
    parts.append(select_groups(generated, keep, G))
    spare.append(select_groups(generated, ~signal_groups, G))
    kept += int(keep.sum())
    if kept == P:
      break
  if kept < P:
    filler = concat_generated(spare)
    keep = np.zeros(len(filler.rewards) // G, bool)
    keep[:P - kept] = True
    parts.append(select_groups(filler, keep, G)._replace(filler=np.ones((P - kept) * G, bool)))
  stats = generation_stats(rounds, G, hosts)
  stats["sampling/kept_groups_with_signal"] = kept
  stats["sampling/out_of_rounds"] = int(kept < P)  # 1: filler groups completed this batch
  return concat_generated(parts), stats

