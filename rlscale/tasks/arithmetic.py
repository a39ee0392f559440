"""A tiny built-in arithmetic generator ("3 + 4 * 2") for fast tests and smoke runs.

Example i of the training stream is drawn by `random.Random(stable_seed(seed, "train", i, k))`
with attempt k = 0, 1, ... until the question is not held out (`rlscale.tasks.holdout`), so it
is a pure function of (seed, i); evaluation draws distinct held-out questions from `eval_seed`.
The answer is the integer value with the usual precedence (`*` before `+`/`-`).
"""

from __future__ import annotations

import random
from typing import Optional

from rlscale.tasks import base
from rlscale.tasks import holdout
from rlscale.tasks import verifier

OPERATORS = "+-*"


class ArithmeticSource(base.TaskSource):
  """Integer expressions of `num_operands` operands in [min_operand, max_operand].

  Args:
    seed: run seed (training stream).
    min_operand, max_operand: operand range (inclusive), 0 <= min_operand <= max_operand.
    num_operands: operands per question, >= 2.
    operators: a non-empty subset of "+-*".
    eval_seed: seed of the held-out draw (independent of the run seed).
    holdout_fraction: share of question space held out for evaluation, in (0, 0.5].
    prompt_template, target_template, verifier_config: see `base.TaskSource`.

  Raises:
    ValueError: a range, count or operator set outside the allowed values.
  """

  def __init__(self, *, seed: int, min_operand: int = 0, max_operand: int = 9,
               num_operands: int = 2, operators: str = "+-", eval_seed: int = 1234,
               holdout_fraction: float = 0.1, prompt_template: str = "{question} =",
               target_template: str = "{answer}",
               verifier_config: Optional[verifier.VerifierConfig] = None):
    super().__init__(prompt_template=prompt_template, target_template=target_template,
                     verifier_config=verifier_config)
    if not (isinstance(min_operand, int) and isinstance(max_operand, int) and
            0 <= min_operand <= max_operand):
      raise ValueError("task.kwargs min_operand/max_operand must be ints with "
                       f"0 <= min_operand <= max_operand, got {min_operand}, {max_operand}")
    if not isinstance(num_operands, int) or num_operands < 2:
      raise ValueError(f"task.kwargs num_operands must be an int >= 2, got {num_operands!r}")
    if not operators or not isinstance(operators, str) or set(operators) - set(OPERATORS):
      raise ValueError(f"task.kwargs operators must be a non-empty subset of {OPERATORS!r}, "
                       f"got {operators!r}")
    self.seed, self.eval_seed = int(seed), int(eval_seed)
    self.min_operand, self.max_operand = min_operand, max_operand
    self.num_operands, self.operators = num_operands, operators
    self.holdout_fraction = holdout.check_fraction(holdout_fraction)

  def _draw(self, *seed_parts: object) -> base.Example:
    rng = random.Random(holdout.stable_seed(*seed_parts))
    operands = [rng.randint(self.min_operand, self.max_operand) for _ in range(self.num_operands)]
    ops = [rng.choice(self.operators) for _ in range(self.num_operands - 1)]
    # Evaluate with precedence: products first, then a left-to-right sum of signed terms.
    terms, signs = [operands[0]], [1]
    for op, value in zip(ops, operands[1:]):
      if op == "*":
        terms[-1] *= value
      else:
        terms.append(value)
        signs.append(1 if op == "+" else -1)
    answer = sum(s * t for s, t in zip(signs, terms))
    question = " ".join([str(operands[0])] + [f"{op} {v}" for op, v in zip(ops, operands[1:])])
    return base.Example(prompt=question, answer=str(answer),
                        metadata={"operands": operands, "operators": ops})

  def train_example(self, index: int) -> base.Example:
    """Training example at position `index`: a pure function of (seed, index)."""
    index = base.check_index(index)
    return holdout.first_training_draw(
        lambda attempt: self._draw(self.seed, "train", index, attempt), lambda e: e.prompt,
        self.holdout_fraction, "the arithmetic generator")

  def eval_examples(self, n: int) -> list[base.Example]:
    """`n` distinct held-out examples (the same for every run seed).

    Raises:
      ValueError: fewer than `n` distinct held-out questions exist (see holdout.distinct_held_out).
    """
    n = base.check_count(n, "task.eval_size")
    return holdout.distinct_held_out(lambda i: self._draw(self.eval_seed, "eval", i),
                                     lambda e: e.prompt, self.holdout_fraction, n,
                                     "the arithmetic generator")
