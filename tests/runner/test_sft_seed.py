"""`sft.seed` seeds the warm start (init and SFT data), `seed` seeds RL: runs with several RL seeds
and one sft.seed share one warm start, and the default (sft.seed None) is the warm start of old."""

import dataclasses
import json
import os

import jax
import numpy as np
import pytest

from rlscale import tokenizers as tokenizers_lib
from rlscale.model import init_params
from rlscale.model.config import MOE_FIELDS
from rlscale.runner import builders
from rlscale.runner import validate
from rlscale.runner import sft
from rlscale.runner.loop import train_and_evaluate
from rlscale.runner.metrics_log import read_metrics
from rlscale.tasks import make_task
from tests.runner.runner_configs import tiny_config as _tiny


def tiny_config(seed=0, **overrides):
  config = _tiny(**overrides)
  config.seed = seed
  return config


def _warm_start(config, workdir):
  """(initial params, warm-start params, cache files) of `config` trained in its own workdir."""
  tokenizer = tokenizers_lib.load_tokenizer("char")
  task = make_task(config.task, seed=config.seed)
  model_config, init, _ = builders.build_model(config, tokenizer, lambda _: None)
  params, _ = builders.warm_start(config, str(workdir), model_config, init, tokenizer, task,
                                  lambda _: None)
  return init, params, sorted(os.listdir(os.path.join(workdir, builders.SFT_DIR)))


def _same(a, b):
  return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.fixture(scope="module")
def warm_starts(tmp_path_factory):
  """Warm starts trained from scratch (no shared cache) for (seed, sft.seed) pairs."""
  out = {}
  for seed, sft_seed in ((0, None), (1, 0), (1, None)):
    config = tiny_config(seed=seed, sft__seed=sft_seed)
    out[seed, sft_seed] = (config, *_warm_start(config, tmp_path_factory.mktemp("run")))
  return out


def test_rl_seed_does_not_change_the_warm_start(warm_starts):
  _, init_a, params_a, files_a = warm_starts[0, None]
  _, init_b, params_b, files_b = warm_starts[1, 0]
  assert _same(init_a, init_b) and _same(params_a, params_b)
  assert files_a == files_b  # one cache key: a sweep trains it once


def test_sft_seed_changes_the_warm_start(warm_starts):
  _, init_a, params_a, files_a = warm_starts[1, 0]
  _, init_c, params_c, files_c = warm_starts[1, None]  # the same RL seed, sft seed 1
  assert not _same(init_a, init_c) and not _same(params_a, params_c)
  assert files_a != files_c


def test_default_sft_seed_is_the_warm_start_of_old(warm_starts):
  # Before sft.seed the init key was jax.random.key(seed) and the cache key hashed the sft section
  # without cache_dir and the run's seed; the SFT data came from RL's task (seed). The same init,
  # the same key (so caches made before are loaded as they are), the same task stream.
  config, init, _, files = warm_starts[0, None]
  model_config, _, _ = builders.build_model(config, tokenizers_lib.load_tokenizer("char"),
                                            lambda _: None)
  assert _same(init, init_params(model_config, jax.random.key(0)))
  # The model fields of then: without remat, and without the fields added since (the kernel
  # switches and the MoE fields, which leave a dense model on the default kernels unchanged).
  added = ("remat", "attention_impl", "remat_impl", *MOE_FIELDS)
  model_fields = {k: v for k, v in dataclasses.asdict(model_config).items() if k not in added}
  old_key = sft.warm_start_key({
      "model": model_fields, "task": config.task.to_dict(),
      "sft": {k: v for k, v in config.sft.to_dict().items() if k not in ("cache_dir", "seed")},
      "seed": config.seed, "rollout": config.rollout.to_dict()})
  assert files == [f"warm_start_{old_key}.msgpack"]


def test_sft_seed_must_be_an_int_or_none():
  # ConfigDict refuses a str for the int placeholder itself; a bool passes its cast.
  with pytest.raises(ValueError, match=r"sft.seed must be an int or None \(= seed\), got True"):
    validate.check_train_config(tiny_config(sft__seed=True))


def test_rl_seeds_on_one_warm_start_differ_in_rl_only(tmp_path):
  # seed 0 and 1 with sft.seed 0, one cache: one warm start (the second run loads it), the same
  # held-out score at 0 samples (same parameters, same held-out prompts and key), then
  # different rollouts.
  records, saved = {}, {}
  for seed in (0, 1):
    config = tiny_config(seed=seed, sft__seed=0, sft__cache_dir=str(tmp_path / "sft"),
                         train__total_steps=2, train__eval_every=2)
    workdir = str(tmp_path / f"seed{seed}")
    train_and_evaluate(config, workdir)
    records[seed] = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
      saved[seed] = json.load(f)
  assert len(os.listdir(tmp_path / "sft")) == 1
  assert [saved[s]["sft_seed"] for s in (0, 1)] == [0, 0]
  warm = [{k: v for k, v in records[s][0].items() if k.startswith("eval/")} for s in (0, 1)]
  assert warm[0] == warm[1] and warm[0]
  # The rollouts differ (the tiny model may score 0 on both, so rewards and losses can tie): the
  # sampled tokens' entropy and the response lengths come from different prompts and keys.
  keys = ("train/entropy", "response/length_mean", "tokens/trained")
  first = [tuple(records[s][1][k] for k in keys) for s in (0, 1)]
  assert first[0] != first[1]
