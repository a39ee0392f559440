"""Writes the pmap-era checkpoint fixture (run at commit 48e92f9, the last pmap layout)."""
import os, sys
from tests.runner.runner_configs import tiny_config
from rlscale.runner.loop import train_and_evaluate
out = sys.argv[1]
def cfg():
  return tiny_config(rl__algorithm="ppo", rl__kl_coef=0.05, train__total_steps=4,
                     train__checkpoint_every=2, sft__cache_dir=os.path.join(out, "sft_cache"))
train_and_evaluate(cfg(), os.path.join(out, "saved"), stop_after_steps=2)
train_and_evaluate(cfg(), os.path.join(out, "full"))
