r"""Debug rewards from the command line: prints one JSON object and exits 0 whatever the texts.

  python -m rlscale.verify 'The answer is \boxed{\dfrac12}.' '0.5'
  {"reward": 1.0, "extracted": "\\dfrac12", "reason": "correct: equal numbers"}

  python -m rlscale.verify --extract-order full '(x+1)^2' 'x^2+2x+1'

Options mirror the config's `task` fields (extract_order, rel_tol, percent, timeout_s). JAX is
never imported, so an answer takes about a second (most of it the sympy worker's startup).

Bad command-line arguments (a missing text, `--rel-tol=abc`, a value the verifier refuses such as
`--rel-tol=2`) print one line `error: ...` on stderr and exit with status 2, as rlscale's other
commands do; the texts themselves, however malformed, always give a JSON object and status 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

EXIT_USER_ERROR = 2  # rlscale.cli's status for bad input (not imported: it would load absl)


class _UsageError(Exception):
  """A bad command-line argument (argparse's message)."""


class _Parser(argparse.ArgumentParser):
  """argparse that raises _UsageError instead of printing usage and exiting."""

  def error(self, message):
    raise _UsageError(message)


def _parser() -> argparse.ArgumentParser:
  parser = _Parser(
      prog="python -m rlscale.verify",
      description="Score a model output against a reference answer with rlscale's verifier.")
  parser.add_argument("text", help="model output text")
  parser.add_argument("reference", help="reference answer (or a solution with \\boxed / ####)")
  parser.add_argument("--extract-order", default="boxed,answer_tag,gsm8k,last_number",
                      help="comma-separated extractors from boxed, answer_tag, gsm8k, "
                      "last_number, full")
  parser.add_argument("--rel-tol", type=float, default=1e-6,
                      help="relative tolerance when either side is a decimal")
  parser.add_argument("--percent", action="store_true",
                      help="allow the answer's x%% (or 'x percent') to mean x/100 (a reference's x%% "
                      "always may)")
  parser.add_argument("--timeout", type=float, default=None,
                      help="hard time limit in seconds for the sympy check (default: the "
                           "VerifierConfig default, 0.9)")
  return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Entry point; returns the exit status: 0 with the JSON object on stdout, 2 with one line
  `error: <message>` on stderr for bad arguments or option values (--help: 0)."""
  try:
    args = _parser().parse_args(argv)
    from rlscale.tasks import verifier  # pylint: disable=g-import-not-at-top (fast --help)
    limit = {} if args.timeout is None else {"timeout_s": args.timeout}
    config = verifier.VerifierConfig(extract_order=args.extract_order, rel_tol=args.rel_tol,
                                     percent=args.percent, **limit)
  except (_UsageError, ValueError, TypeError) as e:  # VerifierConfig names the task.* field
    sys.stderr.write(f"error: {' '.join(str(e).split())}\n")
    return EXIT_USER_ERROR
  score = verifier.verify(args.text, args.reference, config)  # never raises
  print(json.dumps({"reward": score.reward, "extracted": score.extracted, "reason": score.reason}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
