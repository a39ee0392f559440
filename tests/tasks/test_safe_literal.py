"""The list-literal parser of the native list tasks (rlscale.tasks.safe_literal)."""

import pytest

from rlscale.tasks.safe_literal import LiteralError, parse_literal


@pytest.mark.parametrize("text, value", [
    ("[1, 2, 3]", [1, 2, 3]),
    ("[[1, -2], [3.5, 4,]]", [[1, -2], [3.5, 4]]),
    ("['Q', \"_\"]", ["Q", "_"]),
    ("('ab', 'c')", ("ab", "c")),
    ("('ab',)", ("ab",)),
    ("(7)", 7),
    ("[]", []),
    (r"['0 1\n1 2', 'it\'s']", ["0 1\n1 2", "it's"]),
    ("['[[[[', ']']", ["[[[[", "]"]),  # brackets in strings neither count nor close
])
def test_values(text, value):
  assert parse_literal(text) == value


@pytest.mark.parametrize("text", [
    "[1, 2", "[1 2]", "[1,,2]", "]", "", "x", "[eval]", "__import__('os')", "(sympify)('1')",
    "[1] + [2]", "'\\x5f'", "'\\u0041'", "[1][0]", "[[[[[1]]]]]", "['a'] if 1 else 0",
    "1" * 31, "'ａ'", "f'{1}'", "b'1'", "{1: 2}", "[1];[2]",
])
def test_refusals(text):
  with pytest.raises(LiteralError):
    parse_literal(text)
