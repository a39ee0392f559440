"""`task.scorer='native'`: which reasoning-gym scorers may run, and hostile answers against them.

The corpus below is real: `test_corpus_is_live` shows that each payload marked live creates its
canary file when given to Python `eval` or sympy's `parse_expr` (what reasoning-gym's own
countdown, puzzle24, integration, polynomial_multiplication, spiral_matrix, binary_matrix,
n_queens and string_insertion scorers do with an answer), in a throwaway subprocess. The same
payloads then go through `ReasoningGymSource(..., scorer="native").score` for every task whose
scorer reads answers as expressions or literals: reward 0 and no canary.
"""

import inspect
import json
import os
import re
import subprocess
import sys
import time

import pytest
import reasoning_gym
from reasoning_gym import factory

from rlscale.tasks import native
from rlscale.tasks import reasoning_gym_source
from rlscale.tasks import verifier

IMPORT = "__import__('os').system('touch M')"
DOUBLE = "__import__(\"os\").system(\"touch M\")"  # for use inside a single-quoted string


def _reversed_call(marker):
  return "(sympify)('" + DOUBLE.replace("M", marker)[::-1] + "'[::-1])"


# (template with M for the canary path, live: runs under Python eval or sympy parse_expr)
CORPUS = [
    (IMPORT, True),
    ("open('M', 'w')", True),
    ("__import__('pathlib').Path('M').touch()", True),
    ("__import__('subprocess').call(['touch', 'M'])", True),
    ("print(open('M', 'w'))", True),
    # issue 39: a parenthesised callable and escapes inside a string literal
    (f"(sympify)('{DOUBLE}')", True),
    (r"(sympify)('\x5f\x5fimport\x5f\x5f(\x22os\x22).system(\x22touch M\x22)')", True),
    (r"(sympify)('\u005f\u005fimport\u005f\u005f(\u0022os\u0022).system(\u0022touch M\u0022)')",
     True),
    (r"(sympify)('\U0000005f\U0000005fimport\U0000005f\U0000005f(\"os\").system(\"touch M\")')",
     True),
    (r"(sympify)('\N{LOW LINE}\N{LOW LINE}import\N{LOW LINE}\N{LOW LINE}(\"os\")"
     r".system(\"touch M\")')", True),
    (r"(sympify)('\137\137import\137\137(\"os\").system(\"touch M\")')", True),  # octal
    ("(sympify)('_'+'_imp'+'ort_'+'_(\"os\").system(\"touch M\")')", True),
    ("(sympify)(chr(95)*2+'import'+chr(95)*2+'(\"os\").system(\"touch M\")')", True),
    ("(sympify)(''.join([chr(95), chr(95)])+'import__(\"os\").system(\"touch M\")')", True),
    ("(sympify)('%c%cimport%c%c(\"os\").system(\"touch M\")' % (95, 95, 95, 95))", True),
    ("(sympify)('{0}{0}import{0}{0}(\"os\").system(\"touch M\")'.format(chr(95)))", True),
    ("(sympify)('_' '_imp' 'ort_' '_(\"os\").system(\"touch M\")')", True),  # adjacent literals
    ("REVERSED", True),  # built by _reversed_call: the string is reversed at run time
    (f"(S)('{DOUBLE}')", True),
    (f"S('{DOUBLE}')", True),
    (f"sympify('{DOUBLE}')", True),
    (f"(parse_expr)('{DOUBLE}')", True),
    # names and callables reached indirectly
    ("getattr(__import__('os'), 'system')('touch M')", True),
    ("getattr(__import__('o'+'s'), 'sys'+'tem')('touch M')", True),
    (f"[eval][0](\"{IMPORT}\")", True),
    (f"(eval)(\"{IMPORT}\")", True),
    (f"{{'f': eval}}['f'](\"{IMPORT}\")", True),
    ("exec(\"import os; os.system('touch M')\")", True),
    (f"eval(compile(\"{IMPORT}\", 'x', 'eval'))", True),
    (f"(lambda: {IMPORT})()", True),
    (f"lambda: {IMPORT}", True),  # parse_expr's lambda_notation calls it
    ("(lambda f: f('os').system('touch M'))(__import__)", True),
    ("type(lambda: 0)((lambda: __import__('os').system('touch M')).__code__, {})()", True),
    ("[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0]"
     ".__init__.__globals__['system']('touch M')", True),
    ("x.diff.__globals__['__builtins__']['__import__']('os').system('touch M')", True),
    ("globals()['__builtins__']['__import__']('os').system('touch M')", True),
    ("(__builtins__.open if hasattr(__builtins__, 'open') else __builtins__['open'])('M', 'w')",
     True),
    # Unicode: Python NFKC-normalises identifiers (fullwidth, mathematical, script letters)
    (f"\uff45\uff56\uff41\uff4c(\"{IMPORT}\")", True),
    ("_\uff3fimport\uff3f\uff3f('os').system('touch M')", True),
    (f"\U0001d41e\U0001d42f\U0001d41a\U0001d425(\"{IMPORT}\")", True),
    (f"\u212fval(\"{IMPORT}\")", True),
    ("\uff4f\uff50\uff45\uff4e('M', 'w')", True),
    # f-strings, walrus, comprehensions and containers (the list-literal scorers' eval)
    (f"f\"{{{IMPORT}}}\"", True),
    ("f'{open(\"M\", \"w\")}'", True),
    ("(s := __import__('os')).system('touch M')", True),
    ("[s := __import__('os'), s.system('touch M')]", True),
    (f"[{IMPORT}]", True),
    ("[open('M', 'w')]", True),
    (f"['a' for _ in [{IMPORT}]]", True),
    (f"{{{IMPORT}}}", True),
    (f"{{'a': {IMPORT}}}", True),
    (f"(1, {IMPORT})", True),
    (f"[[1, 2], [{IMPORT}, 3]]", True),
    # inside arithmetic the tasks accept
    (f"1 + {IMPORT}", True),
    (f"2*(3 + {IMPORT})", True),
    (f"x**2 + {IMPORT} + C", True),
    (f"sin({IMPORT})", True),
    (f"Integral({IMPORT}, x)", True),
    ("(" * 50 + IMPORT + ")" * 50, True),
    ("1" + "+1" * 100 + "+" + IMPORT, True),
    # statements, comments, newlines, escapes outside strings: not expressions (inert for eval,
    # live for an exec-based scorer)
    (f"1; {IMPORT}", False),
    (f"1\n{IMPORT}", False),
    (f"1 # {IMPORT}", False),
    (f"1\r\n{IMPORT}", False),
    (r"\u005f\u005fimport\u005f\u005f('os').system('touch M')", False),
    ("__imp\u200bort__('os').system('touch M')", False),
    ("import os; os.system('touch M')", False),
    ("`touch M`", False),
    ("$(touch M)", False),
    ("9**9**9**9", None),  # size, not code: never evaluated here (an hour of big integers)
]


def _payloads(directory):
  """[(payload text, live)]: payload i creates `directory`/m{i} when evaluated."""
  out = []
  for i, (template, live) in enumerate(CORPUS):
    marker = os.path.join(str(directory), f"m{i}")
    text = _reversed_call(marker) if template == "REVERSED" else template.replace("M", marker)
    out.append((text, live))
  return out


def test_corpus_size_and_canary_paths(tmp_path):
  payloads = _payloads(tmp_path)
  assert len(payloads) >= 50
  for i, (text, live) in enumerate(payloads):
    assert live is None or f"m{i}" in text or f"m{i}"[::-1] in text


_LIVENESS_SCRIPT = r"""
import json, signal, sys
from sympy.parsing.sympy_parser import parse_expr
def stop(*_):
  raise TimeoutError
signal.signal(signal.SIGALRM, stop)
for text in json.load(open(sys.argv[1])):
  for run in (eval, parse_expr):
    signal.alarm(5)
    try:
      run(text)
    except BaseException:
      pass
    signal.alarm(0)
"""


def test_corpus_is_live(tmp_path):
  # Runs the payloads through eval and parse_expr in a throwaway subprocess (canaries in tmp_path
  # only), so that the corpus below is known to attack what the original scorers do.
  markers = tmp_path / "markers"
  markers.mkdir()
  payloads = _payloads(markers)
  (tmp_path / "payloads.json").write_text(json.dumps(
      [text for text, live in payloads if live is not None]))
  subprocess.run([sys.executable, "-c", _LIVENESS_SCRIPT, str(tmp_path / "payloads.json")],
                 cwd=tmp_path, timeout=300, check=True, capture_output=True)
  fired = {int(name[1:]) for name in os.listdir(markers)}
  expected = {i for i, (_, live) in enumerate(payloads) if live}
  assert fired == expected, (sorted(expected - fired), sorted(fired - expected))


PARSING_TASKS = sorted(native.OWN_SCORERS)
CONFIG = verifier.VerifierConfig(extract_order=("boxed", "answer_tag", "full"), timeout_s=10.0,
                                 max_answer_chars=2000)


@pytest.fixture(scope="module")
def sources():
  return {name: reasoning_gym_source.ReasoningGymSource(name, {}, seed=0, scorer="native",
                                                        verifier_config=CONFIG)
          for name in PARSING_TASKS}


def test_hostile_corpus_scores_zero_without_side_effects(sources, tmp_path):
  payloads = [text for text, _ in _payloads(tmp_path)]
  start = time.monotonic()
  calls = 0
  for name, task in sources.items():
    example = task.train_example(0)
    for text in payloads:
      for response in (text, rf"\boxed{{{text}}}", f"<answer>{text}</answer>"):
        score = task.score(response, example)
        calls += 1
        assert score.reward == 0.0, (name, response, score)
        assert score.reason, (name, response)
    assert task.score(f"<answer>{example.answer}</answer>", example).reward in (0.0, 1.0)
  assert os.listdir(tmp_path) == [], os.listdir(tmp_path)
  assert calls == len(PARSING_TASKS) * len(payloads) * 3
  assert time.monotonic() - start < 120.0


def test_refusal_reasons_name_what_was_refused(sources, tmp_path):
  example = sources["countdown"].train_example(0)
  marker = str(tmp_path / "m")
  cases = [
      (IMPORT.replace("M", marker), "character '_' not allowed (native countdown scorer)"),
      ("(sympify)('x')", "name 'sympify' not allowed (native countdown scorer)"),
      ("\uff45\uff56\uff41\uff4c('1')", "character '\uff45' not allowed (native countdown scorer)"),
      ("9**9**9**9", "operator '**' not allowed (native countdown scorer)"),
  ]
  for text, reason in cases:
    score = sources["countdown"].score(text, example)
    assert (score.reward, score.reason) == (0.0, reason)
  integration = sources["intermediate_integration"]
  score = integration.score("9**9**9**9", integration.train_example(0))
  assert score.reward == 0.0 and "exponent" in score.reason


def test_no_eval_on_the_answer_in_process():
  # Trace every call while rlscale's own scorers read the corpus: no builtin eval or exec, no
  # sympy parse_expr, and sympify never on a string.
  calls = []

  def profile(frame, event, arg):
    if event == "c_call" and getattr(arg, "__name__", "") in ("eval", "exec"):
      calls.append(arg.__name__)
    elif event == "call" and frame.f_code.co_name in ("parse_expr", "eval_expr"):
      calls.append(frame.f_code.co_name)
    elif event == "call" and frame.f_code.co_name == "sympify":
      if isinstance(frame.f_locals.get("a"), str):
        calls.append("sympify(str)")

  entries = {name: reasoning_gym.create_dataset(name, size=1, seed=0)[0] for name in PARSING_TASKS}
  payloads = [text for text, _ in _payloads("/nonexistent-canary-dir")]
  sys.setprofile(profile)
  try:
    for name, entry in entries.items():
      for text in payloads:
        native.score_native(name, text, entry)
  finally:
    sys.setprofile(None)
  assert calls == []


# ----------------------------------------------------------------------------- policy


def test_every_generator_is_classified_once():
  own, passthrough, refused = set(native.OWN_SCORERS), native.PASSTHROUGH, set(native.REFUSED)
  assert not (own & passthrough) and not (own & refused) and not (passthrough & refused)
  assert own | passthrough | refused == set(factory.DATASETS)
  assert own == {"countdown", "puzzle24", "simple_integration", "intermediate_integration",
                 "polynomial_multiplication", "spiral_matrix", "binary_matrix", "n_queens",
                 "string_insertion"}
  assert refused == {"composite"}


@pytest.mark.parametrize("name, why", [
    ("composite", "forwards each item to another generator's scorer"),
    ("some_future_generator", "was not audited"),
])
def test_refused_at_config_time(name, why):
  message = (f"task.scorer='native' is not allowed for reasoning-gym '{name}' (.*{why}.*); "
             "use task.scorer='verifier'")
  with pytest.raises(ValueError, match=message):
    native.check_native_scorer(name)


def test_source_refuses_composite_before_building_anything():
  with pytest.raises(ValueError, match="not allowed for reasoning-gym 'composite'"):
    reasoning_gym_source.ReasoningGymSource("composite", {}, seed=0, scorer="native")


def test_worker_refuses_a_generator_that_is_not_allowed():
  from rlscale.tasks import worker  # pylint: disable=g-import-not-at-top
  response, _ = worker.client().call(
      dict(op="native", name="composite", kwargs={}, entry={}, answer="1"), timeout_s=30.0)
  assert response["error"].startswith("ValueError: task.scorer='native' is not allowed")


# Source files of passthrough generators that mention eval-like calls, and why each is safe.
_AUDITED = {
    "bitwise_arithmetic.py": "eval of the generated problem (metadata), int(answer, 0)",
    "number_sorting.py": "eval of the reference answer only; the answer goes to json.loads",
    "basic_arithmetic.py": "eval_floordiv on generated expressions while generating",
    "codeio.py": "exec of the data set's code while generating; the answer goes to json.loads",
    "propositional_logic.py": "its own recursive parser named parse_expr, no Python eval",
}
# Builtins only (not re.compile, obj.eval(...)), and sympy's string parsers by name.
_EVAL_RE = re.compile(r"(?<![\w.])(eval|exec|compile)\(|parse_expr|sympify|parse_latex")


def test_passthrough_sources_do_not_evaluate_answers():
  # A static re-check of the audit in native.py's docstring for the installed reasoning-gym.
  flagged = {}
  for name in sorted(native.PASSTHROUGH):
    path = inspect.getsourcefile(factory.DATASETS[name][0])
    source = open(path, encoding="utf-8").read()
    if _EVAL_RE.search(source):
      flagged[os.path.basename(path)] = name
  assert set(flagged) <= set(_AUDITED), sorted(set(flagged) - set(_AUDITED))


_PROBES = ["1", "x", "[1, 2]", "[[1, 2], [3, 4]]", "['a', 'b']", '{"a": 1}', "(1)", "1 2\n3 4",
           "x**2/2 + C", "P ∨ Q", "_ Q\nQ _"]


@pytest.mark.slow
def test_passthrough_scorers_call_no_eval_on_probes(tmp_path):
  # Dynamic re-check: each passthrough scorer, on its own references and on probe answers of
  # many shapes, never calls builtin eval/exec or sympy's parse_expr; and the hostile corpus
  # through the worker leaves no canary.
  calls = {}

  def profile(frame, event, arg):
    if event == "c_call" and getattr(arg, "__name__", "") in ("eval", "exec"):
      calls.setdefault(current, set()).add(arg.__name__)
    elif event == "call" and frame.f_code.co_name == "parse_expr" and "sympy" in (
        frame.f_globals.get("__name__", "")):
      calls.setdefault(current, set()).add("parse_expr")

  for current in sorted(native.PASSTHROUGH):
    dataset = reasoning_gym.create_dataset(current, size=2, seed=0)
    for entry in dataset:
      for answer in [str(entry["answer"])] + _PROBES:
        sys.setprofile(profile)
        try:
          dataset.score_answer(answer, entry)
        except Exception:  # pylint: disable=broad-except (a probe may not fit the task)
          pass
        finally:
          sys.setprofile(None)
  # bitwise_arithmetic evaluates its generated problem and number_sorting its reference answer
  # (both audited, neither the answer); nothing else may.
  assert calls == {"bitwise_arithmetic": {"eval"}, "number_sorting": {"eval"}}, calls

  from rlscale.tasks import worker  # pylint: disable=g-import-not-at-top
  payloads = [text for text, _ in _payloads(tmp_path)]
  for name in sorted(native.PASSTHROUGH):
    entry = reasoning_gym.create_dataset(name, size=1, seed=0)[0]
    entry = json.loads(json.dumps(entry, default=str))
    worker.client().preload(dict(op="native_setup", name=name, kwargs={}))
    for text in payloads:
      worker.client().call(dict(op="native", name=name, kwargs={}, entry=entry, answer=text),
                           timeout_s=10.0)
  assert os.listdir(tmp_path) == []
