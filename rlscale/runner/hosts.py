"""Several processes (hosts) training one policy: each draws its own share of the global batch.

Convention: data parallelism over processes by a contiguous shard of each global batch per process
index, as MaxText's input pipelines shard by `jax.process_index()` / `jax.process_count()` and
verl's single controller splits each batch into contiguous chunks, one per data-parallel rank.
With H = `jax.process_count()` processes and P = rl.prompts_per_step prompts per step (global),
process h draws the P / H prompts at task-stream offsets `prompts + h * P / H + i`
(i < P / H, `prompts` = the global count consumed so far). Its rows are rows h * B / H .. of the
step's global arrays on the mesh (`parallel.data.global_batch`), and the sampler draws a row's
noise by its place in the global batch from one key, so the rows of all processes, concatenated in
process order, are exactly the rows one process would sample for the same step (groups adjacent,
prompt by prompt). Everything computed over the batch (advantages, statistics, the prompt and
response widths to train on) is computed on that union, and the update step, written for the
global batch, is the one-process update on it.
Counters (`prompts`, `samples`) stay global, so a checkpoint records the global stream position and
a resume on another process count continues the stream where it stopped.

With one process every function here is the identity (no collective is called).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np


class Hosts(NamedTuple):
  """This process's place among the processes of a run: index h in [0, count)."""
  index: int = 0
  count: int = 1

  @property
  def writer(self) -> bool:
    """Whether this process writes the run's files (metrics, plots, summary, policy): process 0."""
    return self.index == 0


def current() -> Hosts:
  """Hosts(jax.process_index(), jax.process_count()); call after `jax.distributed.initialize`."""
  return Hosts(jax.process_index(), jax.process_count())


def joined() -> Hosts:
  """`current()` when this process joined a distributed run (`jax.distributed.initialize`), else
  Hosts() without starting JAX's backend (a one-process run)."""
  return current() if jax.distributed.is_initialized() else Hosts()


def prompt_share(prompts_per_step: int, hosts: Hosts) -> int:
  """Prompts per step each process draws: P / H.

  Raises ValueError naming rl.prompts_per_step and the process count when H does not divide P."""
  if prompts_per_step % hosts.count:
    raise ValueError(f"rl.prompts_per_step={prompts_per_step} must be divisible by the number of "
                     f"processes ({hosts.count}): each process draws an equal share of the prompts")
  return prompts_per_step // hosts.count


def stream_offsets(position: int, prompts_per_step: int, hosts: Hosts) -> range:
  """Task-stream offsets this process reads for a round of P global prompts starting at the global
  `position`: position + h * P / H + i for i < P / H (process h = hosts.index)."""
  share = prompt_share(prompts_per_step, hosts)
  start = position + hosts.index * share
  return range(start, start + share)


def gather_rows(tree: Any, hosts: Hosts) -> Any:
  """Every process's arrays [n_h, ...] concatenated in process order, [sum n_h, ...], on every
  process (arrays must agree in shape across processes: n_h equal, same trailing shape).
  Identity with one process."""
  if hosts.count == 1:
    return tree
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  return jax.tree.map(np.asarray, multihost_utils.process_allgather(tree, tiled=True))


def own_rows(tree: Any, hosts: Hosts) -> Any:
  """This process's contiguous 1/H of the rows of every array [n, ...] of a gathered tree."""
  def take(x):
    x = np.asarray(x)
    share = x.shape[0] // hosts.count
    return x[hosts.index * share:(hosts.index + 1) * share]
  return tree if hosts.count == 1 else jax.tree.map(take, tree)


def global_max(value: int, hosts: Hosts) -> int:
  """The largest of every process's integer `value` (e.g. a padded width all must share)."""
  if hosts.count == 1:
    return int(value)
  return int(np.max(gather_rows(np.asarray([value], np.int64), hosts)))


def any_process(flag: bool, hosts: Hosts) -> bool:
  """Whether `flag` is True on any process (e.g. a stop signal that one process received)."""
  if hosts.count == 1:
    return bool(flag)
  return bool(np.any(gather_rows(np.asarray([flag], bool), hosts)))


def check_rl_config(rl_cfg, hosts: Hosts) -> None:
  """Raises ValueError when the resolved `rl` config cannot be shared by `hosts.count` processes:
  rl.prompts_per_step not divisible by it (see `prompt_share`), or DAPO dynamic sampling
  (rl.dynamic_sampling), whose extra sampling rounds depend on each process's verdicts and are not
  synchronised across processes, or asynchronous rollouts (rl.max_off_policy_steps >= 1)."""
  prompt_share(rl_cfg.prompts_per_step, hosts)
  if hosts.count > 1 and rl_cfg.get("max_off_policy_steps"):
    raise ValueError(f"rl.max_off_policy_steps={rl_cfg.max_off_policy_steps} (asynchronous "
                     f"rollouts) is not supported with {hosts.count} processes yet: the rollout "
                     "thread's collectives are not ordered alike on every process; set "
                     "rl.max_off_policy_steps=0 or run one process")
  if hosts.count > 1 and rl_cfg.dynamic_sampling:
    raise ValueError(f"rl.dynamic_sampling=True (DAPO) is not supported with {hosts.count} "
                     "processes: its sampling rounds depend on each process's verdicts; set "
                     "rl.dynamic_sampling=False or run one process")
