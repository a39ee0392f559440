"""The update step's batch of one RL step, built from a scored rollout batch (`rollouts.Generated`):
trimmed to bucketed widths, the behaviour / reference / critic passes the config needs, advantages
and the loss mask, as a typed `UpdateBatch`.

With several processes (`rlscale.runner.hosts`) each process holds its own rows; widths,
advantages, the loss mask and statistics come from the union of every process's rows, so the step
equals the one-process step on the union.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from rlscale.rl import masks
from rlscale.rl.kl import kl_divergence
from rlscale.runner import hosts as hosts_lib
from rlscale.runner.batching import train_widths, trim_rollout
from rlscale.runner.layout import layout_of
from rlscale.runner.rollouts import Generated, gather_generated, row_flags
from rlscale.train import update as update_lib


@dataclasses.dataclass
class UpdateBatch:
  """The arrays of one update step (`rlscale.train.update.update_step`'s batch), this process's
  rows, laid out for the run's update function: [D, b, ...] with a leading device axis on the
  pmap path (D local devices, b = rows / D), global arrays [B, ...] on a mesh.

  B rows, T = Tp + Tr trained tokens (the bucketed widths of `batching.train_widths`).

  Attributes:
    tokens: [B, T] int32, the left-padded prompt then the response.
    input_mask: [B, T] int32, 1 for real prompt and response tokens.
    response_mask: [B, Tr] int32 loss mask: the rollout's response mask with truncated rows
      (rl.mask_truncated) and DAPO filler groups set to 0.
    old_logp: [B, Tr] float32 behaviour log-probs (the sampler's, or recomputed).
    advantages: [B] or [B, Tr] float32.
    returns: [B, Tr] float32 value targets (PPO's GAE), else None.
    ref_logp: [B, Tr] float32 reference log-probs when the loss has a KL term, else None.
    old_values: [B, Tr] float32 the critic's values before the update (PPO), else None.
    sampler_experts: [B, Tr, L_moe, k] int32, the sampler's routing (`Rollout.experts`) for a
      model with experts (the update logs moe/routing_mismatch against it), else None.
    routing: the same array when the run replays it (model.moe_routing_replay), else None.
  """
  tokens: Any
  input_mask: Any
  response_mask: Any
  old_logp: Any
  advantages: Any
  returns: Optional[Any] = None
  ref_logp: Optional[Any] = None
  old_values: Optional[Any] = None
  sampler_experts: Optional[Any] = None
  routing: Optional[Any] = None

  def arrays(self) -> dict[str, Any]:
    """The batch as the update step's dict: every field that is not None, by name."""
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None}


def loss_mask_of(run, generated: Generated) -> tuple[np.ndarray, dict[str, float]]:
  """The update's response mask: the rollout's, with the rows that must not enter the loss set to
  0 by `masks.mask_rows` (truncated responses when rl.mask_truncated, DAPO filler groups), and
  the fractions of the batch's rows that are truncated and that are masked for each reason."""
  rollout = generated.rollout
  t_r = rollout.response_mask.shape[1]
  truncated = np.asarray(masks.truncated_rows(rollout.tokens[:, -t_r:], rollout.response_mask,
                                              run.sampler.eos_ids))
  masked_truncated = truncated & bool(run.rl_config.mask_truncated)
  filler = row_flags(generated, "filler")
  loss_mask = np.asarray(masks.mask_rows(rollout.response_mask, ~(masked_truncated | filler)))
  return loss_mask, {"response/truncated_frac": float(truncated.mean()),
                     "loss_mask/truncated_frac": float(masked_truncated.mean()),
                     "loss_mask/filler_frac": float(filler.mean())}


def behaviour_logp(run, state, sharded, rollout) -> tuple[np.ndarray, dict[str, float]]:
  """The update's old_logp [B, Tr] as rl.old_logp asks: the sampler's, or ("recompute") a trainer
  forward with the current params (replaying the sampler's experts when sharded has "routing"),
  also written into sharded["old_logp"], with the
  sampler-trainer mismatch: the mean k3 of the trainer's log-probs against the sampler's over real
  tokens, train/sampler_trainer_k3 (with "sampler" the update step logs the same quantity).

  Args: run (`builders.Run`: rl_config, logp_fn), state (its params feed the recompute),
    sharded (the update batch being built, placed by the run's layout: [D, b, ...] or global
    [B, ...]; gets "old_logp" when recomputed), rollout (this process's trimmed Rollout, host).
  Returns: (old_logp [B, Tr] float32 on the host, {} or the mismatch record)."""
  if run.rl_config.old_logp != "recompute":
    return rollout.logp, {}
  sharded["old_logp"] = run.logp_fn(state.params, sharded)
  old_logp = np.asarray(sharded["old_logp"]).reshape(rollout.logp.shape)
  return old_logp, sampler_trainer_mismatch(old_logp, rollout)


def sampler_trainer_mismatch(old_logp, rollout) -> dict[str, float]:
  """{"train/sampler_trainer_k3": mean k3 of the trainer's log-probs old_logp [B, Tr] against the
  sampler's (rollout.logp) over the real tokens (rollout.response_mask)}."""
  mismatch = masks.masked_mean(kl_divergence("k3", old_logp, rollout.logp), rollout.response_mask)
  return {"train/sampler_trainer_k3": float(mismatch)}


def own_routing(batch: dict) -> dict:
  """The batch without "routing": the reference policy and the critic route by themselves (the
  sampler's experts are the policy's choice, replayed for the policy only)."""
  return {k: v for k, v in batch.items() if k != "routing"}


def make_update_batch(run, state, generated: Generated) -> tuple[UpdateBatch, dict]:
  """The update step's batch from a scored rollout batch: trimmed to its bucketed prompt and
  response widths, with the reference / critic / recomputed behaviour passes the config needs,
  advantages and the loss mask, placed by the run's layout (`layout.layout_of`).

  With several processes (`rlscale.runner.hosts`), `generated` holds this process's rows; the
  widths, advantages, loss mask and statistics come from the union of every process's rows
  (gathered in process order: the one-process batch), so every process trains on the same shapes
  and the step equals the one-process step on the union; the device passes run on this process's
  rows, and the returned batch holds this process's rows.

  Args: run (`builders.Run`), state (the TrainState, as the run holds it), generated (the
    step's `Generated`, this process's rows).
  Returns: (UpdateBatch, record: mask stats, the sampler-trainer
  mismatch when old_logp is recomputed, tokens/trained, and the trained widths in tokens
  batch/prompt_width and batch/response_width: one update-step compile per pair)."""
  rl = run.rl_config
  hosts = hosts_lib.current()
  everything = gather_generated(generated, hosts)
  # Train on the batch's longest prompt and response, bucketed (a few static widths), not the
  # sampler's prompt bucket and response limit: the left padding and the columns after every
  # response are compute without effect on the loss. Taken from the union so that every process
  # trims to the same widths (the sharded update's shapes must match across processes).
  prompt_width, width = train_widths(everything.rollout)
  rollout = trim_rollout(generated.rollout, width, prompt_width)
  union = rollout if hosts.count == 1 else trim_rollout(everything.rollout, width, prompt_width)
  batch = {
      "tokens": rollout.tokens,
      "input_mask": np.concatenate([rollout.prompt_mask, rollout.response_mask], axis=1),
      "response_mask": rollout.response_mask,
      "old_logp": rollout.logp,
  }
  if getattr(rollout, "experts", None) is not None:
    batch["sampler_experts"] = rollout.experts
    if run.routing_replay:
      batch["routing"] = rollout.experts
  layout = layout_of(run)
  sharded = layout.place_batch(batch)
  old_logp, mismatch = behaviour_logp(run, state, sharded, rollout)
  extras = {}
  if update_lib.uses_ref_logp(rl):
    extras["ref_logp"] = run.logp_fn(run.ref_params, own_routing(sharded))
  if update_lib.uses_critic(rl):
    extras["values"] = run.value_fn(state.critic_params, own_routing(sharded))
  flat = {k: layout.host_rows(v) for k, v in extras.items()}
  if hosts.count > 1:
    # The passes above ran on this process's rows; advantages need every row.
    flat = hosts_lib.gather_rows({**flat, "old_logp": old_logp}, hosts)
    old_logp = flat.pop("old_logp")
    if mismatch:
      mismatch = sampler_trainer_mismatch(old_logp, union)
  targets = run.advantage_fn(everything.rewards, union.response_mask, old_logp=old_logp,
                             ref_logp=flat.get("ref_logp"), values=flat.get("values"))
  if "ref_logp" in extras:
    sharded["ref_logp"] = extras["ref_logp"]
  if "values" in extras:
    sharded["old_values"] = extras["values"]
  # Advantages (and ref_logp, values) above use every row; the loss only the unmasked ones.
  loss_mask, mask_stats = loss_mask_of(run, everything)  # truncation is judged at the full width
  loss_mask = hosts_lib.own_rows(loss_mask[:, :width], hosts)
  targets = hosts_lib.own_rows({k: np.asarray(v) for k, v in targets.items()}, hosts)
  sharded.update(layout.place_batch({**targets, "response_mask": loss_mask}))
  tokens = int(union.prompt_mask.sum() + union.response_mask.sum())
  return UpdateBatch(**sharded), {**mask_stats, **mismatch, "tokens/trained": tokens,
                   "batch/prompt_width": prompt_width, "batch/response_width": width}
