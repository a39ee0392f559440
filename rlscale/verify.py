r"""Debug rewards from the command line: prints one JSON object and exits 0 whatever the input.

  python -m rlscale.verify 'The answer is \boxed{\dfrac12}.' '0.5'
  {"reward": 1.0, "extracted": "\\dfrac12", "reason": "correct: equal numbers"}

  python -m rlscale.verify --extract-order full '(x+1)^2' 'x^2+2x+1'

Options mirror the config's `task` fields (extract_order, rel_tol, percent, timeout_s). JAX is
never imported, so an answer takes about a second (most of it the sympy worker's startup).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
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
                      help="allow x%% (or 'x percent') to mean x/100")
  parser.add_argument("--timeout", type=float, default=None,
                      help="hard time limit in seconds for the sympy check (default: the "
                           "VerifierConfig default, 0.9)")
  return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Entry point; returns the exit status (0, also for bad options, reported in the JSON)."""
  try:
    args = _parser().parse_args(argv)
  except SystemExit as e:
    if e.code == 0:  # --help
      return 0
    print(json.dumps({"reward": 0.0, "extracted": None, "reason": "bad command-line arguments"}))
    return 0
  try:
    from rlscale.tasks import verifier  # pylint: disable=g-import-not-at-top (fast --help)
    limit = {} if args.timeout is None else {"timeout_s": args.timeout}
    config = verifier.VerifierConfig(extract_order=args.extract_order, rel_tol=args.rel_tol,
                                     percent=args.percent, **limit)
    score = verifier.verify(args.text, args.reference, config)
    result = {"reward": score.reward, "extracted": score.extracted, "reason": score.reason}
  except Exception as e:  # pylint: disable=broad-except (e.g. an invalid option value)
    result = {"reward": 0.0, "extracted": None, "reason": f"error: {e}"}
  print(json.dumps(result))
  return 0


if __name__ == "__main__":
  sys.exit(main())
