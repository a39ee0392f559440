"""Tasks with verifiable rewards: task sources, answer extraction, a safe verifier, rewards.

Import-light on purpose (no JAX, sympy, reasoning-gym or TFDS at import time): sources load
their libraries when chosen, and sympy runs only in the verifier's worker process.
"""

from rlscale.tasks.base import Example
from rlscale.tasks.base import Score
from rlscale.tasks.base import TaskSource
from rlscale.tasks.factory import make_task
from rlscale.tasks.rewards import RewardConfig
from rlscale.tasks.rewards import score_batch
from rlscale.tasks.verifier import VerifierConfig
from rlscale.tasks.verifier import verify
