"""Which reasoning-gym scorers `task.scorer='native'` may run, and how each one is run.

Model text is untrusted and a policy under RL is rewarded for whatever it learns to emit, so
no answer may reach Python `eval` (sympy's `parse_expr` and `sympify` on a string are `eval`).
This is an allow-list over generator names, audited against the installed reasoning-gym
(0.1.19): every `score_answer` and what it calls was read for `eval`, `exec`, `compile`,
`parse_expr`, `sympify` and `parse_latex` (tests/tasks/test_native.py re-checks the sources and
traces the calls). A generator name in no list below is refused, so a newer reasoning-gym's new
generators stay off until audited.

How each generator is handled:
  rlscale's own scorer (`native_scorers`), the answer read by the allow-list parser `safe_expr`
    (their scorers call sympy `parse_expr` on the answer):
    countdown, puzzle24: `+ - * /`, parentheses, integers; the given numbers once each.
    simple_integration, intermediate_integration: a formula in the task's variable, C, E, pi
      and sympy's elementary functions (`+ - * / **`, decimals); no `Integral`.
    polynomial_multiplication: a formula in the task's variables.
  rlscale's own scorer, the answer read by `safe_literal.parse_literal` (never Python's
    parser) on bounded text (their scorers call `eval` on the answer to read a Python list):
    spiral_matrix, binary_matrix, n_queens, string_insertion.
  Refused at config time: composite (it forwards each item to another generator's scorer;
    name that generator instead).
  The generator's own `score_answer`, in the worker: every name in `PASSTHROUGH`. These
    compare strings, numbers (`float`, `int`, `Decimal`, `Fraction`), JSON (`json.loads`) or
    grids, or run their own non-evaluating parser (propositional_logic); bitwise_arithmetic and
    number_sorting call `eval`, but on the generated problem / reference, never on the answer.
rlscale's own scorers keep each generator's rule and reward values; where they differ (text
outside the grammar scores 0, puzzle24 checks the puzzle's numbers, countdown wants the target
exactly, no `Integral`) their docstrings say so.

Native scoring (either kind) runs in the verifier's worker process (`rlscale.tasks.worker`) under
its time limit, so a slow `simplify` or a generator's slow check cannot hang training; the worker
is a second line of defence, not the reason this is safe.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from rlscale.tasks import native_scorers
from rlscale.tasks import safe_expr

PASSTHROUGH = frozenset({
    "ab", "acre", "advanced_geometry", "aiw", "arc_1d", "arc_agi", "base_conversion",
    "basic_arithmetic", "bf", "binary_alternation", "bitwise_arithmetic", "boxnet",
    "caesar_cipher", "calendar_arithmetic", "chain_sum", "circuit_logic", "codeio", "coin_flip",
    "color_cube_rotation", "complex_arithmetic", "count_bits", "count_primes", "course_schedule",
    "cryptarithm", "decimal_arithmetic", "decimal_chain_sum", "dice", "emoji_mystery",
    "family_relationships", "figlet_font", "fraction_simplification", "futoshiki",
    "game_of_life", "game_of_life_halting", "gcd", "graph_color", "group_anagrams",
    "gsm_symbolic", "isomorphic_strings", "jugs", "kakurasu", "knight_swap", "knights_knaves",
    "largest_island", "lcm", "leg_counting", "letter_counting", "letter_jumble",
    "list_functions", "mahjong_puzzle", "manipulate_matrix", "maze", "mini_sudoku",
    "modulo_grid", "needle_haystack", "number_filtering", "number_format", "number_sequence",
    "number_sorting", "palindrome_generation", "palindrome_partitioning", "path_star",
    "polynomial_equations", "pool_matrix", "power_function", "prime_factorization", "products",
    "propositional_logic", "quantum_lock", "ransom_note", "rearc", "rectangle_count",
    "rotate_matrix", "rotten_oranges", "rubiks_cube", "rush_hour", "self_reference",
    "sentence_reordering", "shortest_path", "simple_equations", "simple_geometry", "sokoban",
    "spell_backward", "string_manipulation", "string_splitting", "string_synthesis", "sudoku",
    "survo", "syllogism", "time_intervals", "tower_of_hanoi", "tsumego", "word_ladder",
    "word_sequence_reversal", "word_sorting", "zebra_puzzles"})
OWN_SCORERS: Mapping[str, Callable[[str, Mapping[str, Any]], float]] = native_scorers.SCORERS
REFUSED = {"composite": "it forwards each item to another generator's scorer; name that "
                        "generator as task.name instead"}


def check_native_scorer(name: str) -> None:
  """Config-time check that `task.scorer='native'` may be used for reasoning-gym `name`.

  Raises:
    ValueError: the generator is refused or was never audited, naming task.name and the
      allowed scorer values.
  """
  if name in OWN_SCORERS or name in PASSTHROUGH:
    return
  why = REFUSED.get(name, "its scorer was not audited for evaluating answer text")
  raise ValueError(f"task.scorer='native' is not allowed for reasoning-gym {name!r} ({why}); "
                   "use task.scorer='verifier'")


def needs_dataset(name: str) -> bool:
  """Whether native scoring of `name` calls the generator's own `score_answer` (so the worker
  must build the dataset) rather than rlscale's scorer."""
  return name not in OWN_SCORERS


def score_native(name: str, answer: str, entry: Mapping[str, Any],
                 dataset: Optional[Any] = None) -> dict[str, Any]:
  """Native score of one answer (runs in the worker process).

  Args:
    name: reasoning-gym generator name.
    answer: extracted answer text (untrusted).
    entry: the generator's item {"question", "answer", "metadata"} (trusted, generated).
    dataset: the generator's dataset object, needed only when `needs_dataset(name)`.

  Returns:
    {"reward": float (NaN and infinities included) or None} or, for an answer outside its
    task's grammar, {"reward": 0.0, "refused": reason}.

  Raises:
    ValueError: `name` is not allowed (see `check_native_scorer`), or a dataset is needed and
      missing.
  """
  check_native_scorer(name)
  if name in OWN_SCORERS:
    try:
      return {"reward": float(OWN_SCORERS[name](answer, entry))}
    except safe_expr.ExprError as e:
      return {"reward": 0.0, "refused": f"{e} (native {name} scorer)"}
  if dataset is None:
    raise ValueError(f"native scorer for {name!r} needs its dataset")
  reward = dataset.score_answer(answer, entry)
  return {"reward": None if reward is None else float(reward)}

