"""rlscale's own scorers for the reasoning-gym tasks whose `score_answer` evaluates answer text.

Each scorer keeps its generator's rule and reward values but reads the answer without `eval`:
arithmetic and formulas through the allow-list parser `rlscale.tasks.safe_expr`, Python list
literals through `rlscale.tasks.safe_literal` (numbers, strings, lists, tuples; bounded).
Where a generator's rule could be gamed, rlscale's rule is the intended one (noted per scorer).

Every scorer has the signature `(answer: str, entry: dict) -> float`, where `entry` is the
generator's item ({"question", "answer", "metadata"}), and raises `safe_expr.ExprError` when the
answer is outside its task's grammar: the caller scores that 0 with the error as the reason
(the generators would give their small "unparseable" reward, e.g. 0.01; rlscale gives nothing
for text it refuses to read).
"""

from __future__ import annotations

import fractions
from typing import Any, Callable, Mapping

from rlscale.tasks import safe_expr
from rlscale.tasks import safe_literal


_ARITHMETIC = safe_expr.Grammar(operators=frozenset({"+", "-", "*", "/"}))
# sympy's names for the functions of reasoning-gym's integrands (sin, exp, sqrt, asin, atan, log)
# and their usual relatives; `ln` is sympy's alias of log, `abs` Python's builtin (Abs on sympy).
_FUNCTION_NAMES = frozenset({
    "sqrt", "exp", "log", "ln", "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan",
    "acot", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "Abs", "abs"})
_FORMULA_OPERATORS = frozenset({"+", "-", "*", "/", "**"})


def _sympy_names(symbols: tuple[str, ...]) -> dict[str, Any]:
  """Values of the formula grammar's names: each symbol a sympy Symbol, E and pi the constants
  (as in `parse_expr`'s namespace), each function the sympy function of that name."""
  import sympy  # pylint: disable=g-import-not-at-top (sympy only in the worker)
  names: dict[str, Any] = {name: getattr(sympy, name) for name in _FUNCTION_NAMES - {"abs"}}
  names["abs"] = sympy.Abs
  names.update(E=sympy.E, pi=sympy.pi)
  names.update({s: sympy.Symbol(s) for s in symbols})
  return names


def _formula_grammar(symbols: tuple[str, ...]) -> safe_expr.Grammar:
  """Formulas over `symbols` (e.g. ("x", "C")), E, pi and the functions above.

  Raises:
    ExprError: a symbol name that is not 1-16 ASCII letters or clashes with a function name.
  """
  try:
    return safe_expr.Grammar(symbols=frozenset(symbols) | {"E", "pi"}, functions=_FUNCTION_NAMES,
                             operators=_FORMULA_OPERATORS, decimals=True)
  except ValueError as e:
    raise safe_expr.ExprError(f"task variables not usable: {e}") from None


def _formula(text: str, symbols: tuple[str, ...]) -> Any:
  """`text` as a sympy expression over `symbols` (see `_formula_grammar`)."""
  tree = safe_expr.parse(text, _formula_grammar(symbols))
  return safe_expr.to_sympy(tree, _sympy_names(symbols))


def _arithmetic(answer: str) -> tuple[list[int], fractions.Fraction | None]:
  """(numbers used, exact value or None on division by zero) of `+ - * /` over integers."""
  tree = safe_expr.parse(answer, _ARITHMETIC)
  used = [int(n) for n in safe_expr.numbers(tree)]
  try:
    return used, safe_expr.to_fraction(tree)
  except ZeroDivisionError:
    return used, None


def countdown(answer: str, entry: Mapping[str, Any]) -> float:
  """reasoning-gym countdown: 1.0 when the expression uses each given number exactly once (a
  multiset match, as the generator's `sorted(used) == sorted(numbers)`) and equals the target
  exactly; 0.05 for a well-formed expression that does not; 0.01 for empty text or a division
  by zero (the generator's values). Only `+ - * /`, parentheses and integers are read; the
  generator also accepted `**`, `//` and any sympy syntax, and a value within
  `np.isclose(..., atol=1e-6)` of the target (a relative tolerance of 1e-5 of it)."""
  if not answer.strip():
    return 0.01
  used, value = _arithmetic(answer)
  if value is None:
    return 0.01
  metadata = entry["metadata"]
  if sorted(used) != sorted(int(n) for n in metadata["numbers"]):
    return 0.05
  return 1.0 if value == int(metadata["target"]) else 0.05


def puzzle24(answer: str, entry: Mapping[str, Any]) -> float:
  """reasoning-gym puzzle24: 1.0 when the expression uses the puzzle's four numbers exactly once
  each and equals 24 exactly, else 0.01 (the generator's value). The generator's own rule only
  asked for some four numbers in its value range and truncated the value with `int()`, so
  `6*4*1*1` or `49/2` earned 1.0 on any puzzle; rlscale checks the puzzle's numbers."""
  if not answer.strip():
    return 0.01
  used, value = _arithmetic(answer)
  numbers = sorted(int(n) for n in entry["metadata"]["numbers"])
  return 1.0 if sorted(used) == numbers and value == 24 else 0.01


def integration(answer: str, entry: Mapping[str, Any]) -> float:
  """reasoning-gym simple_integration and intermediate_integration: 1.0 when the derivative of
  the answer (a formula in the task's variable, `C` and sympy's elementary functions) minus the
  integrand simplifies to 0, else 0.0 (the generators' rule). An unevaluated `Integral(...)`
  is not in the grammar (the generator accepted `Integral(integrand, x)`, a copy of the
  question, as a correct antiderivative), so references that sympy could not integrate score
  0 here."""
  import sympy  # pylint: disable=g-import-not-at-top
  metadata = entry["metadata"]
  variable = str(metadata["variable"])
  user = _formula(answer, (variable, "C"))
  integrand = _formula(str(metadata["integrand"]), (variable,))  # generator output, same parser
  return 1.0 if sympy.simplify(sympy.diff(user, sympy.Symbol(variable)) - integrand) == 0 else 0.0


def polynomial_multiplication(answer: str, entry: Mapping[str, Any]) -> float:
  """reasoning-gym polynomial_multiplication: 1.0 when the answer is the same sympy expression
  as the reference after sympy's automatic canonicalisation (`==`, as the generator: the
  expanded product, terms in any order), else 0.0. Names are the task's variables."""
  symbols = tuple(str(v) for v in entry["metadata"]["variables"])
  return 1.0 if _formula(answer, symbols) == _formula(str(entry["answer"]), symbols) else 0.0


def _literal(text: str) -> Any:
  """A list literal (numbers, strings, lists, tuples) read by `safe_literal.parse_literal`, which
  never hands the text to Python's parser.

  Raises:
    ExprError: too long, nested too deep, or not a literal.
  """
  try:
    return safe_literal.parse_literal(text)
  except safe_literal.LiteralError as e:
    raise safe_expr.ExprError(f"not a Python literal ({e})") from None


def _literal_or_none(text: str) -> Any:
  """`_literal(text)`, or None when the text is not a bounded literal (the generators treat an
  answer their `eval` cannot read as simply not matching)."""
  try:
    return _literal(text)
  except safe_expr.ExprError:
    return None


def _reformatted(text: str, reformat: Callable[[Any], str]) -> str | None:
  """`reformat(literal)` of the answer read as a literal, or None when it is not one or does not
  have the shape `reformat` expects."""
  value = _literal_or_none(text)
  if value is None:
    return None
  try:
    return reformat(value)
  except (TypeError, ValueError):
    return None


def spiral_matrix(answer: str, entry: Mapping[str, Any]) -> float:
  """reasoning-gym spiral_matrix: 1.0 for the reference (both stripped); 0.1 when the answer is a
  literal list whose items joined by spaces are the reference; else 0.0."""
  oracle, answer = str(entry["answer"]).strip(), answer.strip()
  if answer and answer == oracle:
    return 1.0
  return 0.1 if answer and _reformatted(
      answer, lambda items: " ".join(str(item) for item in items)) == oracle else 0.0


def binary_matrix(answer: str, entry: Mapping[str, Any]) -> float:
  """reasoning-gym binary_matrix: 1.0 for the reference; 0.1 when the answer is a literal list of
  rows that prints as the reference (rows on lines, items separated by spaces); else 0.0."""
  oracle = entry["answer"]
  if answer == oracle:
    return 1.0
  printed = _reformatted(
      answer, lambda rows: "\n".join(" ".join(str(x) for x in row) for row in rows))
  return 0.1 if printed == oracle else 0.0


def n_queens(answer: str, entry: Mapping[str, Any]) -> float:
  """reasoning-gym n_queens: 1.0 when the answer is one of the valid boards; 0.5 when it is a
  literal list of rows of strings that prints as one (rows on lines, cells separated by
  spaces); else 0.0."""
  valid = entry["metadata"]["valid_answers"]
  if answer in valid:
    return 1.0
  return 0.5 if _reformatted(
      answer, lambda rows: "\n".join(" ".join(x for x in row) for row in rows)) in valid else 0.0


def string_insertion(answer: str, entry: Mapping[str, Any]) -> float:
  """reasoning-gym string_insertion: 1.0 for the reference; 0.1 when the answer is a literal
  sequence of strings that joins to it; else 0.0."""
  oracle = entry["answer"]
  if answer == oracle:
    return 1.0
  return 0.1 if _reformatted(answer, "".join) == oracle else 0.0


SCORERS: Mapping[str, Callable[[str, Mapping[str, Any]], float]] = {
    "countdown": countdown,
    "puzzle24": puzzle24,
    "simple_integration": integration,
    "intermediate_integration": integration,
    "polynomial_multiplication": polynomial_multiplication,
    "spiral_matrix": spiral_matrix,
    "binary_matrix": binary_matrix,
    "n_queens": n_queens,
    "string_insertion": string_insertion,
}
