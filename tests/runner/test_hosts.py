"""The pure parts of multi-process data sharing (rlscale/runner/hosts.py), worked out by hand;
two real processes are in test_hosts_processes.py."""

import jax
import numpy as np
import pytest

from rlscale.rl.presets import resolve_rl_config
from rlscale.runner import builders
from rlscale.runner import hosts
from rlscale.runner.batching import encode_prompts
from rlscale.tokenizers import load_tokenizer
from tests.runner.runner_configs import tiny_config


def test_each_process_reads_its_contiguous_share_after_the_global_position():
  # P = 6 prompts, 3 processes, 12 prompts consumed so far: 2 each, in process order.
  shares = [list(hosts.stream_offsets(12, 6, hosts.Hosts(h, 3))) for h in range(3)]
  assert shares == [[12, 13], [14, 15], [16, 17]]
  assert list(hosts.stream_offsets(12, 6, hosts.Hosts())) == list(range(12, 18))


def test_share_must_divide_evenly():
  assert hosts.prompt_share(8, hosts.Hosts(1, 4)) == 2
  with pytest.raises(ValueError, match=r"rl.prompts_per_step=6 .* processes \(4\)"):
    hosts.prompt_share(6, hosts.Hosts(0, 4))


def test_own_rows_and_single_process_identities():
  tree = {"a": np.arange(12).reshape(6, 2), "b": np.arange(6)}
  mine = hosts.own_rows(tree, hosts.Hosts(2, 3))
  np.testing.assert_array_equal(mine["a"], [[8, 9], [10, 11]])
  np.testing.assert_array_equal(mine["b"], [4, 5])
  one = hosts.Hosts()
  assert hosts.own_rows(tree, one) is tree and hosts.gather_rows(tree, one) is tree
  assert hosts.global_max(7, one) == 7 and hosts.any_process(True, one)
  assert one.writer and not hosts.Hosts(1, 2).writer


def test_dynamic_sampling_is_refused_with_several_processes():
  config = tiny_config(rl__algorithm="dapo", rl__prompts_per_step=4, rl__batch_size=8)
  rl = resolve_rl_config(config.rl)
  hosts.check_rl_config(rl, hosts.Hosts(0, 1))
  with pytest.raises(ValueError, match=r"rl.dynamic_sampling=True .* 2 processes"):
    hosts.check_rl_config(rl, hosts.Hosts(0, 2))
  with pytest.raises(ValueError, match=r"rl.prompts_per_step=4 .* processes \(3\)"):
    hosts.check_rl_config(rl, hosts.Hosts(0, 3))


def test_asynchronous_rollouts_are_refused_with_several_processes():
  rl = resolve_rl_config(tiny_config(rl__max_off_policy_steps=1).rl)
  hosts.check_rl_config(rl, hosts.Hosts(0, 1))
  with pytest.raises(ValueError, match=r"rl.max_off_policy_steps=1 \(asynchronous rollouts\) is "
                                       r"not supported with 2 processes yet"):
    hosts.check_rl_config(rl, hosts.Hosts(0, 2))


def test_prompts_pad_to_the_width_all_processes_agree_on():
  tokenizer = load_tokenizer("char")
  tokens, mask = encode_prompts(tokenizer, ["1 + 2 ="], (8, 16, 32))
  assert tokens.shape == (1, 8)
  # Another process holds a 12-token prompt: this one pads to its bucket, 16.
  tokens, mask = encode_prompts(tokenizer, ["1 + 2 ="], (8, 16, 32), longest=12)
  assert tokens.shape == (1, 16) and mask.sum() == 7
  with pytest.raises(ValueError, match="longest=3 is shorter than a prompt of 7 tokens"):
    encode_prompts(tokenizer, ["1 + 2 ="], (8, 16, 32), longest=3)


def test_process_count_comes_from_the_environment(monkeypatch):
  calls = []
  monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
  monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
  monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:1234")
  monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
  monkeypatch.setenv("JAX_PROCESS_ID", "1")
  builders.maybe_initialize_distributed("auto")
  assert calls == [{"num_processes": 2, "process_id": 1}]
  monkeypatch.setattr(jax.distributed, "is_initialized", lambda: True)
  builders.maybe_initialize_distributed(True)  # already joined: nothing
  assert len(calls) == 1
  monkeypatch.setenv("JAX_PROCESS_ID", "one")
  monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
  with pytest.raises(ValueError, match="JAX_PROCESS_ID='one' must be an integer"):
    builders.maybe_initialize_distributed("auto")
