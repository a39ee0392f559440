"""The task interface: examples, scores, and the `TaskSource` base class.

A task source is a deterministic stream of examples (question text, reference answer, metadata):
`train_example(index)` depends only on the source seed and the position, so a resumed run or a
sweep sees exactly the same prompts; `eval_examples(n)` is a held-out set that never overlaps the
training stream (see `rlscale.tasks.holdout`). The source also owns the prompt template, the SFT
target template and the scorer. This module imports neither JAX nor sympy.
"""

from __future__ import annotations

import abc
import dataclasses
import operator
import string
from typing import Any, Mapping, Optional

from rlscale.tasks import verifier
from rlscale.tasks import worked


@dataclasses.dataclass(frozen=True)
class Example:
  """One task instance.

  Attributes:
    prompt: the question text, before the prompt template is applied.
    answer: the reference answer (already reduced to the final answer, e.g. "17", "\\frac{1}{2}").
    metadata: generator-specific fields (JSON-like), e.g. reasoning-gym's `expression`.
  """
  prompt: str
  answer: str
  metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)


Score = verifier.Score


def check_template(template: str, field: str, allowed: tuple[str, ...]) -> str:
  """Validates a `str.format` template naming only `allowed` top-level fields.

  Args:
    template: e.g. "{question} =" or "{metadata[expression]} =".
    field: config field name used in the error message.
    allowed: the top-level names the template may use.

  Returns:
    The template unchanged.

  Raises:
    ValueError: the template is not a string, is malformed, or uses another field or a
      positional field.
  """
  if not isinstance(template, str):
    raise ValueError(f"{field} must be a str.format template, got {template!r}")
  try:
    parsed = list(string.Formatter().parse(template))
  except ValueError as e:
    raise ValueError(f"{field}={template!r} is not a valid str.format template: {e}") from None
  for _, name, _, _ in parsed:
    if name is None:
      continue
    # "metadata[expression]" and "metadata.x" both start with the top-level name.
    top = name.split("[", 1)[0].split(".", 1)[0]
    if top not in allowed:
      raise ValueError(
          f"{field}={template!r} uses field {{{name}}}; allowed fields: {', '.join(allowed)}")
  return template


class TaskSource(abc.ABC):
  """A deterministic stream of examples plus prompt template, SFT target and scorer.

  Subclasses implement `train_example` and `eval_examples`; the scorer defaults to rlscale's
  verifier (`rlscale.tasks.verifier.verify`) with the source's `VerifierConfig`.

  Attributes:
    prompt_template: `str.format` template with fields `question` and `metadata`
      (e.g. "{question}\\nAnswer:" or "{metadata[expression]} =").
    target_template: `str.format` template with fields `answer` and `worked` (the running sums of
      a +/- chain in metadata["expression"], `rlscale.tasks.worked`); the response text a correct
      model produces (e.g. "{answer}", "<answer>{answer}</answer>" or " {worked}"), used for the
      SFT warm start.
    verifier_config: extraction order, tolerance, bounds and time limit of the verifier.
    reward_config: optional reward terms (`rewards.RewardConfig`), set by `make_task`; None
      means plain correctness in `rewards.score_batch`.
    chat_format: how a formatted prompt becomes the model's input text
      (`rlscale.tokenizers.ChatFormat`: chat template, system prompt, template kwargs), set by
      `make_task` and applied by the tokenizer; None means the default ChatFormat().
  """

  reward_config: Optional[Any] = None
  chat_format: Optional[Any] = None

  def __init__(self, *, prompt_template: str, target_template: str = "{answer}",
               verifier_config: Optional[verifier.VerifierConfig] = None):
    self.prompt_template = check_template(prompt_template, "task.prompt_template",
                                          ("question", "metadata"))
    self.target_template = check_template(target_template, "task.target_template",
                                          ("answer", "worked"))
    self.verifier_config = verifier_config or verifier.VerifierConfig()

  @abc.abstractmethod
  def train_example(self, index: int) -> Example:
    """The training example at stream position `index` (>= 0); a pure function of seed and index.

    Raises:
      ValueError: `index` is negative or not an int.
    """

  @abc.abstractmethod
  def eval_examples(self, n: int) -> list[Example]:
    """`n` held-out examples, none of which can appear in the training stream.

    Raises:
      ValueError: n < 1, or the source cannot supply n distinct held-out examples.
    """

  def format_prompt(self, example: Example) -> str:
    """The model input for `example`: `prompt_template` filled with question and metadata.

    Raises:
      ValueError: the template names a metadata key this example lacks.
    """
    try:
      return self.prompt_template.format(question=example.prompt, metadata=example.metadata)
    except (KeyError, IndexError, AttributeError) as e:
      raise ValueError(f"task.prompt_template={self.prompt_template!r} needs {e} which example "
                       f"metadata lacks (keys: {sorted(example.metadata)})") from None

  def format_target(self, example: Example) -> str:
    """The response text of a correct model (SFT target); it scores 1.0 under `score`."""
    if "{worked" not in self.target_template:
      return self.target_template.format(answer=example.answer)
    expression = example.metadata.get("expression")
    if expression is None:
      raise ValueError("task.target_template uses {worked}, which needs an example with "
                       f"metadata['expression'] (a +/- chain, e.g. chain_sum); keys: "
                       f"{sorted(example.metadata)}")
    return self.target_template.format(answer=example.answer, worked=worked.running_sums(expression))

  def score(self, response_text: str, example: Example) -> Score:
    """Scores one response against `example.answer`; never raises (see `verifier.verify`)."""
    return verifier.verify(response_text, example.answer, self.verifier_config)


def check_index(index: Any) -> int:
  """Returns `index` as int; raises ValueError unless it is a non-negative integer."""
  if isinstance(index, bool) or not hasattr(index, "__index__") or operator.index(index) < 0:
    raise ValueError(f"index must be a non-negative int, got {index!r}")
  return operator.index(index)


def check_count(n: Any, field: str = "n") -> int:
  """Returns `n` as int; raises ValueError naming `field` unless it is a positive integer."""
  if isinstance(n, bool) or not hasattr(n, "__index__") or operator.index(n) < 1:
    raise ValueError(f"{field} must be a positive int, got {n!r}")
  return operator.index(n)
