r"""The verifier against a table of (model output, reference, expected reward) rows.

Each row's expected reward is worked out by hand from the rules in rlscale.tasks.verifier. The
second test compares with HF math-verify 0.9.0 (the `test` extra) on the same rows and asserts
that the rows where the two disagree are exactly those listed in MATH_VERIFY_DISAGREEMENTS,
each with the reason rlscale's answer is the intended one.
"""

import pytest

from rlscale.tasks import verifier

FULL = {"extract_order": "full"}
PCT = {"percent": True}

# (response, reference, expected reward, VerifierConfig overrides)
ROWS = [
    # --- extraction: \boxed (last complete, nested braces, \fbox, box in box, unclosed box)
    (r"\boxed{17}", "17", 1, {}),
    (r"The answer is \boxed{17}.", "17", 1, {}),
    (r"so $\boxed{\frac{1}{2}}$", "1/2", 1, {}),
    (r"\boxed{\frac{\sqrt{2}}{2}}", r"\frac{1}{\sqrt{2}}", 1, {}),
    (r"\fbox{42}", "42", 1, {}),
    (r"first \boxed{3}, corrected: \boxed{5}", "5", 1, {}),
    (r"first \boxed{3}, corrected: \boxed{5}", "3", 0, {}),
    (r"\boxed{5} and again \boxed{5}", "5", 1, {}),
    (r"\boxed{\boxed{5}}", "5", 1, {}),
    (r"\boxed{5", "5", 0, {}),
    (r"\boxed{3} then \boxed{5", "3", 1, {}),
    (r"\boxed 7", "7", 1, {}),
    (r"\boxed{ 8 }", "8", 1, {}),
    (r"\boxed{}", "0", 0, {}),
    # --- extraction: <answer> tags, GSM8K ####, last number
    ("<answer>42</answer>", "42", 1, {}),
    ("<answer> 42 </answer> then 43", "42", 1, {}),
    ("<answer>1</answer> <answer>2</answer>", "2", 1, {}),
    (r"<answer>\boxed{3}</answer>", "3", 1, {}),
    ("<answer>12", "12", 1, {}),
    ("Let me think.\n#### 72", "72", 1, {}),
    ("#### 1,234", "1234", 1, {}),
    ("#### 71\nno, wait\n#### 72", "72", 1, {}),
    ("17", "17", 1, {}),
    ("17\n", "17", 1, {}),
    ("The sum is 8, so the answer is 17", "17", 1, {}),
    ("The sum is 8, so the answer is 17", "8", 0, {}),
    ("answer: -3", "-3", 1, {}),
    ("3 - 5 = -2", "-2", 1, {}),
    ("3-5", "-5", 0, {}),
    ("no digits here", "5", 0, {}),
    ("", "5", 0, {}),
    ("The result is 3/4", "3/4", 1, {}),
    (r"so \frac{3}{4}", "0.75", 1, {}),
    ("it is 50%", "50", 1, {}),
    ("version 2.0, result 7", "7", 1, {}),
    ("x2", "2", 0, {}),
    # --- integers: signs, commas, spaces
    (r"\boxed{1,000}", "1000", 1, {}),
    (r"\boxed{1000}", "1,000", 1, {}),
    (r"\boxed{1 000}", "1000", 1, {}),
    (r"\boxed{1\,000}", "1000", 1, {}),
    (r"\boxed{1{,}000}", "1000", 1, {}),
    (r"\boxed{12,345,678}", "12345678", 1, {}),
    (r"\boxed{1,000,000}", "10^6", 1, {}),
    (r"\boxed{+17}", "17", 1, {}),
    (r"\boxed{-17}", "17", 0, {}),
    ("\\boxed{\u221217}", "-17", 1, {}),
    (r"\boxed{007}", "7", 1, {}),
    (r"\boxed{-0}", "0", 1, {}),
    (r"\boxed{17.0}", "17", 1, {}),
    (r"\boxed{17.5}", "17", 0, {}),
    (r"\boxed{1,00}", "100", 0, {}),
    (r"\boxed{1,001}", "1000", 0, {}),
    (r"\boxed{100}", "1,000", 0, {}),
    (r"\boxed{21}", "12", 0, {}),
    (r"\boxed{10}", "100", 0, {}),
    # --- decimals and fractions
    (r"\boxed{0.5}", "1/2", 1, {}),
    (r"\boxed{1/2}", "0.5", 1, {}),
    (r"\boxed{\frac{1}{2}}", "0.5", 1, {}),
    (r"\boxed{\dfrac12}", "0.5", 1, {}),
    (r"\boxed{\tfrac{1}{2}}", "1/2", 1, {}),
    (r"\boxed{.5}", "1/2", 1, {}),
    (r"\boxed{0.50}", r"\frac12", 1, {}),
    (r"\boxed{2/4}", "1/2", 1, {}),
    (r"\boxed{-\frac{1}{2}}", "-0.5", 1, {}),
    (r"\boxed{\frac{-1}{2}}", "-1/2", 1, {}),
    (r"\boxed{\frac{1}{-2}}", "-1/2", 1, {}),
    (r"\boxed{1.5}", r"\frac{3}{2}", 1, {}),
    (r"\boxed{2.50}", "5/2", 1, {}),
    (r"\boxed{1e3}", "1000", 1, {}),
    (r"\boxed{2.5e-1}", "1/4", 1, {}),
    (r"\boxed{\frac{1}{3}}", "0.3333333", 1, {}),
    (r"\boxed{0.333333333}", "1/3", 1, {}),
    (r"\boxed{1.0000001}", "1", 1, {}),
    (r"\boxed{1.00001}", "1", 0, {}),
    (r"\boxed{0.51}", "1/2", 0, {}),
    (r"\boxed{12}", "1/2", 0, {}),
    (r"\boxed{0.499}", "0.5", 0, {}),
    (r"\boxed{0.33}", r"\frac{1}{3}", 0, {}),
    (r"\boxed{-1/2}", "1/2", 0, {}),
    (r"\boxed{1/2}", "2", 0, {}),
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{3}", 0, {}),
    (r"\boxed{\frac{2}{0}}", "1", 0, {}),
    (r"\boxed{1/0}", "1", 0, {}),
    (r"\boxed{3.14}", r"\pi", 1, {"rel_tol": 1e-2}),
    (r"\boxed{100.4}", "100", 1, {"rel_tol": 1e-2}),
    (r"\boxed{0.5}", "0.5000001", 0, {"rel_tol": 0.0}),
    (r"\boxed{0.5}", "0.5000001", 1, {}),
    # --- percentages (a trailing % may always be dropped; the reference's x% may also be x/100,
    # the answer's only with percent=True: numbers.percent_readings)
    (r"\boxed{50\%}", "50", 1, {}),
    (r"\boxed{50\%}", "0.5", 0, {}),
    (r"\boxed{50\%}", "0.5", 1, PCT),
    (r"\boxed{0.5}", r"50\%", 1, PCT),
    (r"\boxed{0.5}", "50%", 1, {}),  # was 0 (issue 39): the reference's 50% is 0.5
    (r"\boxed{25%}", "1/4", 1, PCT),
    (r"\boxed{25%}", "0.3", 0, PCT),
    ("The rate is 12.5%", r"\frac{1}{8}", 1, PCT),
    (r"\boxed{x\%}", "x/100", 1, PCT),
    # --- simple LaTeX: \sqrt, \pi, ^, \cdot, \left( \right), units
    (r"\boxed{\sqrt{4}}", "2", 1, {}),
    (r"\boxed{2\sqrt{2}}", r"\sqrt{8}", 1, {}),
    (r"\boxed{\sqrt{2}}", "1.41421356", 1, {}),
    (r"\boxed{\sqrt{2}}", "1.41", 0, {}),
    (r"\boxed{\sqrt{2}}", "2", 0, {}),
    (r"\boxed{\sqrt{3}}", r"\sqrt{2}", 0, {}),
    (r"\boxed{\sqrt[3]{27}}", "3", 1, {}),
    (r"\boxed{\sqrt{2}/2}", r"\frac{\sqrt{2}}{2}", 1, {}),
    (r"\boxed{\frac{1}{\sqrt{2}}}", r"\frac{\sqrt{2}}{2}", 1, {}),
    (r"\boxed{\pi}", r"\pi", 1, {}),
    (r"\boxed{2\pi}", r"\pi \cdot 2", 1, {}),
    (r"\boxed{\pi}", "3.14", 0, {}),
    (r"\boxed{\pi}", "3.14159265", 1, {}),
    (r"\boxed{3.15}", r"\pi", 0, {}),
    (r"\boxed{2\pi}", r"\pi", 0, {}),
    (r"\boxed{\frac{\pi}{2}}", r"\pi/2", 1, {}),
    (r"\boxed{\frac{3}{4}\pi}", r"0.75\pi", 1, {}),
    (r"\boxed{2^{10}}", "1024", 1, {}),
    (r"\boxed{2^10}", "1024", 1, {}),
    (r"\boxed{2^{-1}}", "0.5", 1, {}),
    (r"\boxed{3 \cdot 4}", "12", 1, {}),
    (r"\boxed{3 \times 4}", "12", 1, {}),
    (r"\boxed{\left( \frac{1}{2} \right)^2}", "1/4", 1, {}),
    (r"\boxed{90^\circ}", "90", 1, {}),
    (r"\boxed{18 \text{ cm}}", "18", 1, {}),
    (r"\boxed{\$18}", "18", 1, {}),
    (r"\boxed{\text{18}}", "18", 1, {}),
    (r"\boxed{\sin^2 x + \cos^2 x}", "1", 1, {}),
    (r"\boxed{\ln(e^2)}", "2", 1, {}),
    (r"\boxed{\log(e)}", "1", 1, {}),
    (r"\boxed{e}", "2.718281828", 1, {}),
    (r"\boxed{\sqrt{x^2}}", "x", 0, {}),
    # --- algebraic expressions
    (r"\boxed{(x+1)^2}", "x^2+2x+1", 1, {}),
    (r"\boxed{x^2+2x+1}", "(x+1)^2", 1, {}),
    (r"\boxed{x^2}", "2x", 0, {}),
    (r"\boxed{2x}", "x+x", 1, {}),
    (r"\boxed{x^2 - 1}", "(x-1)(x+1)", 1, {}),
    (r"\boxed{(x-1)(x+2)}", "x^2+x-2", 1, {}),
    (r"\boxed{x^2+x-3}", "x^2+x-2", 0, {}),
    (r"\boxed{\frac{x^2-1}{x-1}}", "x+1", 1, {}),
    (r"\boxed{\frac{1}{x}}", "x^{-1}", 1, {}),
    (r"\boxed{x}", "y", 0, {}),
    (r"\boxed{2xy}", "2yx", 1, {}),
    (r"\boxed{a^2b}", "b a^2", 1, {}),
    (r"\boxed{x^{1/2}}", r"\sqrt{x}", 1, {}),
    (r"\boxed{2(x+3)}", "2x+6", 1, {}),
    (r"\boxed{x^3}", r"x \cdot x \cdot x", 1, {}),
    (r"\boxed{(a+b)^2}", "a^2+2ab+b^2", 1, {}),
    (r"\boxed{(a+b)^2}", "a^2+b^2", 0, {}),
    (r"\boxed{\frac{x}{2}}", "0.5x", 1, {}),
    (r"\boxed{3x+2}", "2+3x", 1, {}),
    (r"\boxed{x^2+1}", "x^2-1", 0, {}),
    (r"\boxed{2x+1}", "2x-1", 0, {}),
    (r"\boxed{x+1}", "x", 0, {}),
    (r"\boxed{\sin(2x)}", r"2\sin x \cos x", 1, {}),
    (r"\boxed{e^{x+1}}", r"e \cdot e^x", 1, {}),
    (r"\boxed{x**2 + 2*x}", "x(x+2)", 1, {}),
    # --- equations and tuples
    (r"\boxed{x = 5}", "5", 1, {}),
    (r"\boxed{x=5}", "x = 5", 1, {}),
    (r"\boxed{5}", "x = 5", 1, {}),
    (r"\boxed{x = 6}", "5", 0, {}),
    (r"\boxed{y = 2x + 1}", "2x + 1 = y", 1, {}),
    (r"\boxed{y = 2x + 1}", "y = 2x - 1", 0, {}),
    (r"\boxed{2x = 4}", "4", 0, {}),
    (r"\boxed{(1, 2)}", "(1,2)", 1, {}),
    (r"\boxed{1, 2}", "(1, 2)", 1, {}),
    (r"\boxed{(2, 1)}", "(1, 2)", 0, {}),
    (r"\boxed{(1,2,3)}", "(1,2)", 0, {}),
    (r"\boxed{(0.5, 2)}", r"(\frac12, 2)", 1, {}),
    # --- word answers and references (GSM8K / MATH solutions)
    ("<answer>Paris</answer>", "Paris", 1, {}),
    ("<answer>paris</answer>", "Paris", 1, {}),
    ("<answer>London</answer>", "Paris", 0, {}),
    ("<answer>True</answer>", "True", 1, {}),
    ("<answer>false</answer>", "True", 0, {}),
    (r"\boxed{\text{Yes}}", "yes", 1, {}),
    ("<answer>no  solution</answer>", "No Solution", 1, {}),
    (r"\boxed{72}", "She sold 48/2 = 24 clips.\n#### 72", 1, {}),
    (r"\boxed{0.5}", r"so the answer is $\boxed{\frac{1}{2}}$.", 1, {}),
    # --- the "full" extractor: the whole response is the answer
    ("(x+1)^2", "x^2+2x+1", 1, FULL),
    ("Paris", "paris", 1, FULL),
    ("  42  ", "42", 1, FULL),
    ("x^2", "2x", 0, FULL),
    (r"$\frac{1}{2}$", "0.5", 1, FULL),
    # --- adversarial (also in test_adversarial.py, with timings)
    (r"\boxed{__import__('os').system('ls')}", "0", 0, {}),
    ("__import__('os').system('ls')", "0", 0, FULL),
    (r"\boxed{9^9^9^9}", "1", 0, {}),
    (r"\boxed{9**9**9**9}", "1", 0, {}),
    (r"\boxed{2^{10000}}", "0", 0, {}),
    (r"\boxed{" + "(" * 100 + "1" + ")" * 100 + "}", "1", 0, {}),
    ("17\x00", "17", 0, {}),
    ("\u202e17", "17", 0, {}),
    ("\uff11\uff17", "17", 0, {}),
    ("{" * 10, "1", 0, {}),
    (r"\boxed{\input{/etc/passwd}}", "1", 0, {}),
    (r"\boxed{1}" + "x" * 70000, "1", 0, {}),
]

# Kinds added for issue 12 (answers as real users hand them in). The first rows of each kind are
# the issue's cases, the rest are further instances of the same kind.
INTERVAL_ROWS = [
    (r"\boxed{(1, 2)}", "[1, 2]", 0, {}),  # open ends against closed ends (was 1: both pairs)
    (r"\boxed{(-\infty, 0]}", r"(-\infty,0]", 1, {}),  # half-open with infinity (was 0)
    (r"\boxed{[1, 2]}", "[1,2]", 1, {}),
    (r"\boxed{[1, 2)}", "[1, 2]", 0, {}),
    (r"\boxed{(1, 2]}", "(1, 2)", 0, {}),  # a pair against an interval reads as open
    (r"\boxed{(2, 1)}", "[1, 2]", 0, {}),
    (r"\boxed{(0, \infty)}", r"(0,\infty)", 1, {}),  # a pair against a pair stays a pair
    (r"\boxed{[0.5, 2)}", r"[\frac{1}{2}, 2)", 1, {}),  # endpoints compare as values
    (r"\boxed{\left[ 1, \sqrt{4} \right)}", "[1, 2)", 1, {}),
    ("\\boxed{(-\u221e, 3]}", r"(-\infty, 3]", 1, {}),
    (r"\boxed{[0, \infty]}", r"[0, \infty)", 1, {}),  # an infinite end is never a member
    (r"\boxed{(-\infty, 0) \cup (1, \infty)}", r"(1,\infty)\cup(-\infty,0)", 1, {}),
    (r"\boxed{(-\infty, 0) \cup (1, \infty)}", r"(-\infty,0]\cup(1,\infty)", 0, {}),
    (r"\boxed{(-\infty, 0)}", r"(-\infty,0)\cup(1,\infty)", 0, {}),
    (r"\boxed{[-2, -1] \cup [1, 2] \cup [3, 4)}", "[3,4) \\cup [-2,-1] \\cup [1,2]", 1, {}),
    (r"\boxed{x \in [2, 5]}", "[2, 5]", 1, {}),
    (r"\boxed{[2, 5]}", "2, 5", 0, {}),  # an interval is not a list of two numbers
    (r"\boxed{[a, b)}", "[a, b)", 1, {}),
]
UNIT_ROWS = [
    (r"\boxed{5\text{ cm}^2}", "25", 0, {}),  # the unit's exponent went to the number (was 1)
    (r"\boxed{5\text{ cm}^2}", "5", 1, {}),
    (r"\boxed{5 \mathrm{cm}^{2}}", "5", 1, {}),
    (r"\boxed{5\mbox{ m}^3}", "125", 0, {}),
    (r"\boxed{5\textrm{ km}^2}", "5", 1, {}),
    (r"\boxed{9.8 \operatorname{m/s}^2}", "9.8", 1, {}),
    (r"\boxed{12\,\mathrm{m\,s^{-1}}}", "12", 1, {}),
    (r"\boxed{18 meters}", "18", 1, {}),
    (r"\boxed{4 ft^2}", "16", 0, {}),
    (r"\boxed{4 ft^2}", "4", 1, {}),
    (r"\boxed{60 km/h}", "60", 1, {}),
    (r"\boxed{5 square meters}", "5", 1, {}),
    ("The area is 5 cm^2.", "5", 1, {}),  # last number: the unit's exponent is not the answer
    (r"The area is 5\text{ cm}^{2}", "2", 0, {}),
    (r"\boxed{2\mathrm{e}^{x}}", "2e^x", 1, {}),  # roman-type maths is not a unit
    (r"\boxed{3 m}", "3", 0, {}),  # a bare single letter may be a variable: 3m
]
SCIENTIFIC_ROWS = [
    ("The probability is 1e-1.", "0.1", 1, {}),  # was 1 extracted, reward 0
    ("The probability is 1e-1.", "1", 0, {}),
    ("so c = 3 \\times 10^{8} m/s", "300000000", 1, {}),
    ("about 6.02E23 atoms", r"6.02 \times 10^{23}", 1, {}),
    ("it is 1.5 \\times 10^{-3}", "0.0015", 1, {}),
    ("roughly 2.5e-1", "1/4", 1, {}),
    ("roughly 2.5e-1", "2.5", 0, {}),
    ("it is 3.0E+8", "3e8", 1, {}),
    ("5 \\cdot 10^-3", "0.005", 1, {}),
    ("the mass is 2e3 kg", "2000", 1, {}),
]
PERCENT_WORD_ROWS = [
    (r"\boxed{28 percent}", r"28\%", 1, {}),  # was 0
    (r"\boxed{28\%}", r"28\%", 1, {}),
    (r"\boxed{28 percent}", "0.28", 1, PCT),  # follows task.percent as % does
    (r"\boxed{28 percent}", "0.28", 0, {}),
    ("The rate is 12.5 percent", r"\frac{1}{8}", 1, PCT),
    ("The rate is 12.5 percent", "12.5", 1, {}),
    (r"\boxed{50 per cent}", "50%", 1, {}),
    (r"\boxed{50\text{ percent}}", "0.5", 1, PCT),
    (r"\boxed{0.5}", "50 percent", 1, PCT),
    (r"\boxed{40 percent}", "0.5", 0, PCT),
]
# Issue 23, item 1: each kind of false positive, with mutated wrong answers that must score 0
# (a digit changed, a term dropped, a box removed from a multi-box reference). "was 1" marks
# rows the old verifier rewarded.
LAST_NUMBER_ROWS = [
    (r"$\frac{1+\sqrt{5}}{2}$", "2", 0, {}),  # was 1: the denominator inside \frac
    (r"$\frac{1+\sqrt{5}}{2}$", r"\frac{1+\sqrt{5}}{2}", 1, {}),
    (r"$\frac{1+\sqrt{6}}{2}$", r"\frac{1+\sqrt{5}}{2}", 0, {}),
    (r"$-[0,1)$", "1", 0, {}),  # was 1: an endpoint of an interval
    ("The probability is 2/3.", "3", 0, {}),  # was 1: a/b before a period
    ("The probability is 2/3.", "2/3", 1, {}),
    ("The probability is 2/5.", "2/3", 0, {}),
    ("so the answer is 2^{10}", "10", 0, {}),  # was 1: an exponent
    ("the total is 3 + 4", "4", 0, {}),  # was 1: a term of a sum
    ("the total is 3 + 4 = 7", "7", 1, {}),
    ("the total is 3 + 4 = 8", "7", 0, {}),
    ("the total is 4 + 4 = 7", "7", 0, {}),  # was 1: a false equation in prose
    ("so x = 2 * 3 = 6.", "6", 1, {}),
    ("the point is (12, 102)", "102", 0, {}),  # was 1: a coordinate of a pair
    (r"Thus $x = 5$ is the answer.", "5", 1, {}),
    (r"Thus $x = 6$ is the answer.", "5", 0, {}),
    (r"We find that $x \approx 11$", "11", 1, {}),  # a math span after the last number
]
MULTI_BOX_ROWS = [
    (r"\boxed{-2, 1}", r"\(\boxed{1}\) and \(\boxed{-2}\).", 1, {}),
    (r"\boxed{-2}", r"\(\boxed{1}\) and \(\boxed{-2}\).", 0, {}),  # was 1: a box removed
    (r"\boxed{1}", r"\(\boxed{1}\) and \(\boxed{-2}\).", 0, {}),
    (r"\boxed{1} and \boxed{-2}", r"\boxed{1}, \boxed{-2}", 1, {}),
    (r"\boxed{1} and \boxed{-3}", r"\boxed{1}, \boxed{-2}", 0, {}),
    (r"\boxed{-2, 1, 3}", r"\boxed{1}, \boxed{-2}", 0, {}),
    (r"\boxed{(1, 2)}, \boxed{(2, 1)}", "(2, 1), (1, 2)", 1, {}),
    (r"\boxed{(1, 2)}", "(2, 1), (1, 2)", 0, {}),
]
SCALE_WORD_ROWS = [
    (r"\boxed{5\text{ thousand}}", "5", 0, {}),  # was 1: the scale word vanished
    (r"\boxed{5\text{ thousand}}", "5000", 1, {}),
    (r"\boxed{6\text{ thousand}}", "5000", 0, {}),
    (r"\boxed{2.5 \text{ million}}", "2500000", 1, {}),
    (r"\boxed{2.5 million}", "2.5", 0, {}),
    (r"\boxed{3\mbox{ billion}}", "3000000000", 1, {}),
]
TEXT_FALLBACK_ROWS = [
    (r"\boxed{\overline{ab}}", r"\overline{AB}", 0, {}),  # was 1: unreadable maths as text
    (r"\boxed{\overline{AB}}", r"\overline{AB}", 1, {}),  # identical text
    (r"\boxed{a'}", "A'", 0, {}),  # was 1: a single letter keeps its case
    (r"\boxed{A'}", "A'", 1, {}),
    (r"\boxed{\text{regular hexagon}}", r"\text{Regular Hexagon}", 1, {}),  # words: any case
]
GROUPING_ROWS = [
    (r"\boxed{0,111}", "111", 0, {}),  # was 1: a zero leading group is not grouping
    (r"\boxed{(12,102)}", "12102", 0, {}),  # was 1: a comma in brackets separates
    (r"\boxed{(12,102)}", "(12, 102)", 1, {}),
    (r"\boxed{12,102}", "12102", 1, {}),
    (r"\boxed{1000,99}", "1000.99", 1, {}),  # a decimal comma, against a decimal point only
    (r"\boxed{1000,98}", "1000.99", 0, {}),
    (r"\boxed{1,220}", "1.22", 0, {}),  # three digits after the comma: 1220
]
# Issue 23, item 2: answer kinds of real math data sets.
RELATION_ROWS = [
    (r"\boxed{x \geq 5}", "x >= 5", 1, {}),
    (r"\boxed{5 \geq x}", r"x \leq 5", 1, {}),  # sides swapped
    (r"\boxed{5 \geq x}", r"x \geq 5", 0, {}),
    (r"\boxed{x \le 6}", r"x \leq 5", 0, {}),
    (r"\boxed{-x > -1}", "x < 1", 1, {}),
    (r"\boxed{-x \ge -1}", "x < 1", 0, {}),
    (r"\boxed{x \neq 3}", "x != 3", 1, {}),
    (r"\boxed{x \ne 4}", r"x \neq 3", 0, {}),
    (r"\boxed{x \le 5}", r"(-\infty, 5]", 1, {}),  # an inequality against an interval
    (r"\boxed{x < 5}", r"(-\infty, 5]", 0, {}),
    (r"\boxed{-2 \le x < 7}", "[-2, 7)", 1, {}),
    (r"\boxed{-2 \le x \le 7}", "[-2, 7)", 0, {}),
    (r"\boxed{(-793, 10)}", "-793 < a < 10", 1, {}),
    (r"\boxed{(-793, 11)}", "-793 < a < 10", 0, {}),
    (r"\boxed{z \in [-\frac{3}{2}, -1] \cup [1, \frac{3}{2}]}", r"1 \leq |z| \leq \frac{3}{2}", 1,
     {}),
    (r"\boxed{z \in [-2, -1] \cup [1, \frac{3}{2}]}", r"1 \leq |z| \leq \frac{3}{2}", 0, {}),
    (r"\boxed{f(4) > f(1) > f(2)}", "f(2) < f(1) < f(4)", 1, {}),
    (r"\boxed{f(3) < f(1) < f(4)}", "f(2) < f(1) < f(4)", 0, {}),  # f(3) is not 3f
]
EQUATION_ROWS = [
    (r"\boxed{y = -\frac{1}{2}x + \frac{3}{4}}", "2x + 4y - 3 = 0", 1, {}),  # a factor of 4
    (r"\boxed{y = -\frac{1}{2}x + \frac{3}{2}}", "2x + 4y - 3 = 0", 0, {}),
    (r"\boxed{10 = 2x}", "x = 5", 1, {}),
    (r"\boxed{10 = 3x}", "x = 5", 0, {}),
    (r"\boxed{1}", "f(x) = 1", 1, {}),  # labelled answers
    (r"\boxed{2}", "f(x) = 1", 0, {}),
    (r"\boxed{f(x) = 1}", "1", 1, {}),
    (r"\boxed{g(x) = 1}", "f(x) = 1", 0, {}),
    (r"\boxed{(3, 2)}", "(p, q) = (3, 2)", 1, {}),
    (r"\boxed{(2, 3)}", "(p, q) = (3, 2)", 0, {}),
    (r"\boxed{1}", "|AB| = 1", 1, {}),
    (r"\boxed{3}", r"\sqrt{x} = 3", 0, {}),  # a function of x is no name: x = 9
    (r"\boxed{\frac{1}{\sqrt{6}}}", r"\frac{NO}{BO} = \frac{1}{\sqrt{6}}", 1, {}),
    (r"\boxed{7:32}", r"S_{MBCN}:S = 7:32", 1, {}),
    (r"\boxed{7:33}", r"S_{MBCN}:S = 7:32", 0, {}),
    (r"\boxed{4, 5}", "AB = 4, CD = 5", 1, {}),
    (r"\boxed{4, 6}", "AB = 4, CD = 5", 0, {}),
    (r"\boxed{a_{37} = 19, a_3 = 2}", "a_3 = 2, a_{37} = 19", 1, {}),
    (r"\boxed{a_{37} = 18, a_3 = 2}", "a_3 = 2, a_{37} = 19", 0, {}),
    (r"\boxed{x = 5 + 5 + 1 = 11}", "11", 1, {}),  # a true chain
    (r"\boxed{x = 5 + 5 + 2 = 11}", "11", 0, {}),  # a false link
    (r"\boxed{x = 5 + 5 + 1 = 7 = 11}", "x = 11", 0, {}),
    (r"\boxed{x = \frac{1}{3} \approx 0.333}", "1/3", 1, {}),
    (r"\boxed{x = \frac{1}{3} \approx 1.3}", "1/3", 0, {}),
    (r"\boxed{x = \frac{1}{3} \approx 0.343}", "1/3", 0, {}),  # 3% off
    (r"\boxed{12:00}", "1:00", 0, {}),  # a ratio by zero is undefined, not equal
]
SET_ROWS = [
    (r"\boxed{\{3, 1\}}", r"\{1, 3\}", 1, {}),
    (r"\boxed{\{3, 2\}}", r"\{1, 3\}", 0, {}),
    (r"\boxed{\{1\}}", r"\{1, 3\}", 0, {}),
    (r"\boxed{3, 1}", r"\{1, 3\}", 1, {}),  # a bare list against a set
    (r"\boxed{(3, 1)}", r"\{1, 3\}", 0, {}),  # a tuple is not a set
    (r"\boxed{2, 1}", "1, 2", 1, {}),  # was 0 (issue 39): a bare list is a set of answers
    (r"\boxed{(2, 1), (1, 2)}", "(1, 2), (2, 1)", 1, {}),  # a list of solutions has no order
    (r"\boxed{(2, 1), (1, 3)}", "(1, 2), (2, 1)", 0, {}),
    (r"\boxed{-2021, 2021}", r"\pm 2021", 1, {}),
    (r"\boxed{2021}", r"\pm 2021", 0, {}),
    (r"\boxed{6, 8}", r"6 \text{ and } 8", 1, {}),
    (r"\boxed{6, 9}", r"6 \text{ and } 8", 0, {}),
    (r"\boxed{-10, -8, 4}", r"a = 4, -8, -10", 1, {}),
    (r"\boxed{-10, -8, 5}", r"a = 4, -8, -10", 0, {}),
    (r"\boxed{(7, 2), (5, 2)}", "p=5,q=2;p=7,q=2", 1, {}),  # ";" separates solutions
    (r"\boxed{(7, 2), (5, 3)}", "p=5,q=2;p=7,q=2", 0, {}),
]
MATRIX_ROWS = [
    (r"\boxed{\begin{pmatrix}1 & 0 \\ 0 & 1\end{pmatrix}}",
     r"\begin{bmatrix}1 & 0 \\ 0 & 1\end{bmatrix}", 1, {}),
    (r"\boxed{\begin{pmatrix}1 & 0 \\ 2 & 1\end{pmatrix}}",
     r"\begin{bmatrix}1 & 0 \\ 0 & 1\end{bmatrix}", 0, {}),
    (r"\boxed{\left[\begin{array}{cc}1 & 2 \\ 3 & 4\end{array}\right]}",
     r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}", 1, {}),
    (r"\boxed{\begin{pmatrix}1 & 2\end{pmatrix}}", r"\begin{pmatrix}1 \\ 2\end{pmatrix}", 0, {}),
    (r"\boxed{\begin{vmatrix}1 & 2 \\ 3 & 4\end{vmatrix}}", "-2", 1, {}),  # a determinant
    (r"\boxed{\begin{vmatrix}1 & 2 \\ 3 & 4\end{vmatrix}}", "2", 0, {}),
    (r"The sum is $\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix} + \begin{pmatrix}5 & 6 \\ 7 & 8"
     r"\end{pmatrix}$", r"\begin{pmatrix}6 & 8 \\ 10 & 12\end{pmatrix}", 1, {}),
    (r"The sum is $\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix} + \begin{pmatrix}5 & 6 \\ 7 & 8"
     r"\end{pmatrix}$", r"\begin{pmatrix}6 & 8 \\ 10 & 13\end{pmatrix}", 0, {}),
]
NOTATION_ROWS = [
    (r"\boxed{\cfrac{1}{3}}", "1/3", 1, {}),
    (r"\boxed{\cfrac{1}{4}}", "1/3", 0, {}),
    (r"\boxed{28 pct}", r"28\%", 1, {}),
    (r"\boxed{28 percentage}", r"28\%", 1, {}),
    (r"\boxed{27 pct}", r"28\%", 0, {}),
    (r"\boxed{11,\! 111,\! 100}", "11111100", 1, {}),
    (r"\boxed{11,\! 111,\! 101}", "11111100", 0, {}),
    ("so it is 14{,}916.", "14916", 1, {}),  # separators in prose: one number
    ("so it is 14{,}916.", "916", 0, {}),  # was 1: the last group
    (r"is 32,\! 349", "32349", 1, {}),
    (r"is 32,\! 349", "349", 0, {}),
]
# Issue 39, item 6: false negatives on answers Math-Verify scores as right, with the near misses
# that must still score 0. Percentages: a reference's x% may also be x/100 (28% accepts 28, 28%
# and 0.28), an answer's only with task.percent. Lists: a bare comma list is a set of answers;
# brackets make an ordered tuple; a list of values named by different names keeps its order.
# Labels: `x = 3`, `A = (1, 2)` against the bare value compare the value; two labels must
# match (Math-Verify: y = 3 is not x = 3). "was 0" marks rows the old verifier refused.
ISSUE39_PERCENT_ROWS = [
    (r"\boxed{28}", r"28\%", 1, {}),  # a trailing % may be dropped
    (r"\boxed{28\%}", r"28\%", 1, {}),
    (r"\boxed{0.28}", r"28\%", 1, {}),  # was 0: the reference's % may mean x/100
    (r"\boxed{0.45}", r"45\%", 1, {}),
    (r"\boxed{\frac{7}{25}}", r"28\%", 1, {}),  # 7/25 = 0.28
    (r"\boxed{0.28}", "28 percent", 1, {}),
    (r"\boxed{0.29}", r"28\%", 0, {}),
    (r"\boxed{2800}", r"28\%", 0, {}),  # neither 28 nor 0.28
    (r"\boxed{0.0028}", r"28\%", 0, {}),
    (r"\boxed{0.28}", "28", 0, {}),  # a plain reference is no percentage (Math-Verify: 0)
    (r"\boxed{28}", "0.28", 0, {}),
    (r"\boxed{0.28\%}", r"28\%", 0, {}),  # two percentages compare as written
    (r"\boxed{0.28\%}", r"28\%", 0, PCT),  # was 1: 0.28 (answer) = 28/100 (reference)
    (r"\boxed{2800\%}", r"28\%", 0, PCT),  # was 1: 2800/100 (answer) = 28 (reference)
    (r"\boxed{28\%}", "0.28", 1, PCT),
    (r"\boxed{\frac{x}{100}}", r"x\%", 1, {}),  # sympy path: the reference's x% is x/100
    (r"\boxed{x}", r"x\%", 1, {}),
    (r"\boxed{\frac{x}{10}}", r"x\%", 0, {}),
    (r"\boxed{0.2, 0.1}", r"10\%, 20\%", 1, {}),
    (r"\boxed{0.2, 0.2}", r"10\%, 20\%", 0, {}),
]
ISSUE39_SET_ROWS = [
    (r"\boxed{3, 1}", "1, 3", 1, {}),  # was 0: a bare list is a set of answers
    (r"\boxed{3, -2, 1}", "1, -2, 3", 1, {}),
    (r"\boxed{-1, \frac{1}{2}}", r"\frac12, -1", 1, {}),
    (r"\boxed{3, 2}", "1, 3", 0, {}),
    (r"\boxed{1, 3, 5}", "1, 3", 0, {}),  # an extra solution
    (r"\boxed{1}", "1, 3", 0, {}),  # a missing solution
    (r"\boxed{x = 3, x = 1}", "1, 3", 1, {}),
    (r"\boxed{3, 1}", "x = 1, x = 3", 1, {}),
    (r"\boxed{x = 3, x = 2}", "x = 1, x = 3", 0, {}),
    (r"\boxed{(2, 1)}", "(1, 2)", 0, {}),  # brackets make an ordered tuple
    (r"\boxed{(3, 2, 1)}", "(1, 2, 3)", 0, {}),
    (r"\boxed{(1, 2, 3)}", "(1, 2, 3)", 1, {}),
    (r"\boxed{[3, 2, 1]}", "[1, 2, 3]", 0, {}),
    (r"\boxed{3, 1}", "(1, 3)", 0, {}),  # the reference's form decides: a tuple is ordered
    (r"\boxed{(3, 1)}", "1, 3", 0, {}),  # an answer in brackets states an order
    (r"\boxed{(1, 3)}", "1, 3", 1, {}),
    (r"\boxed{1, 2}", "x = 1, y = 2", 1, {}),  # named values: each position is one name
    (r"\boxed{2, 1}", "x = 1, y = 2", 0, {}),
    (r"\boxed{5, 4}", "AB = 4, CD = 5", 0, {}),
    (r"\boxed{y = 2, x = 1}", "x = 1, y = 2", 1, {}),
    (r"\boxed{x = 2, y = 1}", "x = 1, y = 2", 0, {}),
    (r"\boxed{1} and \boxed{2}", "x = 1, y = 2", 1, {}),  # boxes follow the same rules
    (r"\boxed{2} and \boxed{1}", "x = 1, y = 2", 0, {}),  # was 1: says x = 2
    (r"\boxed{\{2, 1\}}", "x = 1, y = 2", 0, {}),  # was 1: a set of values gives no names
    (r"\boxed{3} and \boxed{1}", "1, 3", 1, {}),
    (r"\boxed{\{3, 1\}}", "x = 1, x = 3", 1, {}),  # one name: its solution set
]
ISSUE39_LABEL_ROWS = [
    (r"\boxed{x = 3}", "3", 1, {}),
    (r"\boxed{3}", "x = 3", 1, {}),
    (r"\boxed{x = 3}", "x = 3", 1, {}),
    (r"\boxed{x = 4}", "x = 3", 0, {}),  # a wrong value with the right label
    (r"\boxed{x = 4}", "3", 0, {}),
    (r"\boxed{y = 3}", "x = 3", 0, {}),  # another label, the same value (Math-Verify: 0)
    (r"\boxed{A = (1, 2)}", "(1, 2)", 1, {}),  # was 0: a named point
    (r"\boxed{A=(1,2)}", "(1, 2)", 1, {}),
    (r"\boxed{(1, 2)}", "A = (1, 2)", 1, {}),
    (r"\boxed{A=(1,2)}", "A = (1, 2)", 1, {}),
    (r"\boxed{P = (0, -1)}", "(0, -1)", 1, {}),
    (r"\boxed{B = (1, 2)}", "A = (1, 2)", 0, {}),  # another name (Math-Verify: 0)
    (r"\boxed{A = (2, 1)}", "A = (1, 2)", 0, {}),
    (r"\boxed{A = (2, 1)}", "(1, 2)", 0, {}),
    (r"\boxed{A = (1, 3)}", "(1, 2)", 0, {}),
    (r"\boxed{A = \{2, 1\}}", r"\{1, 2\}", 1, {}),
    (r"\boxed{A = (1, 2), B = (3, 4)}", "(3, 4), (1, 2)", 1, {}),
    (r"\boxed{(3, 4), (1, 2)}", "A = (1, 2), B = (3, 4)", 0, {}),
    (r"\boxed{A = \begin{pmatrix}1 & 2\end{pmatrix}}", r"\begin{pmatrix}1 & 2\end{pmatrix}", 1,
     {}),
]
ISSUE39_ROWS = ISSUE39_PERCENT_ROWS + ISSUE39_SET_ROWS + ISSUE39_LABEL_ROWS
ISSUE23_FALSE_POSITIVE_ROWS = (LAST_NUMBER_ROWS + MULTI_BOX_ROWS + SCALE_WORD_ROWS +
                               TEXT_FALLBACK_ROWS + GROUPING_ROWS)
ISSUE23_KIND_ROWS = RELATION_ROWS + EQUATION_ROWS + SET_ROWS + MATRIX_ROWS + NOTATION_ROWS
NEW_KIND_ROWS = (INTERVAL_ROWS + UNIT_ROWS + SCIENTIFIC_ROWS + PERCENT_WORD_ROWS +
                 ISSUE23_FALSE_POSITIVE_ROWS + ISSUE23_KIND_ROWS + ISSUE39_ROWS)
ROWS = ROWS + NEW_KIND_ROWS


def _score(row):
  response, reference, _, overrides = row
  return verifier.verify(response, reference, verifier.VerifierConfig(**overrides))


def test_table_is_large_enough():
  assert len(ROWS) >= 150
  assert sum(r[2] == 0 for r in ROWS) >= 50  # plenty of near-misses


@pytest.mark.parametrize("row", ROWS, ids=[f"row{i}" for i in range(len(ROWS))])
def test_verifier_table(row):
  score = _score(row)
  assert score.reward == row[2], (row[:2], score)
  assert 0.0 <= score.reward <= 1.0 and score.reason


# Rows where HF math-verify 0.9.0 (default parse + verify) disagrees with the expected reward,
# keyed by (response, reference), with the reason rlscale's reward is the intended one.
MATH_VERIFY_DISAGREEMENTS = {
    (r"\fbox{42}", "42"):
        "math-verify only looks for \\boxed; \\fbox is LaTeX's other box command.",
    (r"first \boxed{3}, corrected: \boxed{5}", "5"):
        "math-verify joins all boxes into the set {3, 5}; the final answer is the last box.",
    ("<answer>42</answer>", "42"):
        "math-verify has no <answer>-tag extraction (reasoning-gym's format).",
    ("<answer> 42 </answer> then 43", "42"):
        "math-verify takes the last number 43; the <answer> block is the declared answer.",
    ("<answer>1</answer> <answer>2</answer>", "2"):
        "no <answer>-tag extraction in math-verify; the last block is the answer.",
    ("<answer>12", "12"):
        "unclosed tag: ours falls back to the last number (12), math-verify finds nothing.",
    (r"\boxed{1 000}", "1000"):
        "math-verify reads '1 000' as the product 1*0; a space between groups of three digits "
        "is a thousands separator (SI style).",
    (r"\boxed{1\,000}", "1000"):
        "LaTeX thin space \\, between digit groups is a thousands separator, not 1*0.",
    (r"\boxed{1e3}", "1000"):
        "math-verify reads 1e3 as 1*e*3; digits-e-digits is scientific notation in model text.",
    (r"\boxed{2.5e-1}", "1/4"):
        "scientific notation 2.5e-1 = 0.25, not 2.5e - 1.",
    (r"\boxed{1.0000001}", "1"):
        "within the configured relative tolerance (rel_tol=1e-6) for decimals; math-verify "
        "rounds to its own precision.",
    (r"\boxed{50\%}", "0.5"):
        "math-verify always reads x% as x/100; ours reads the answer's % so only where the task "
        "says so (percent=True; see the PCT rows), otherwise 50% means the number 50 (the "
        "reference's % always may mean x/100: 0.5 against 50% scores 1).",
    (r"\boxed{\log(e)}", "1"):
        "math-verify reads \\log as base 10; ours as the natural log (the convention in "
        "competition maths and sympy).",
    (r"\boxed{x**2 + 2*x}", "x(x+2)"):
        "math-verify's LaTeX parser mangles Python-style ** (it extracts 2); ours reads ** "
        "as a power, the common plain-text notation.",
    (r"\boxed{2x = 4}", "4"):
        "math-verify compares the right-hand side of any equation; ours only when the "
        "left-hand side is a single variable (2x = 4 means x = 2, so 4 is not the answer).",
    ("<answer>Paris</answer>", "Paris"):
        "word answer in <answer> tags: math-verify finds no answer and reads the reference "
        "as the product a*i*p*r*s.",
    ("<answer>paris</answer>", "Paris"):
        "word answers compare case-insensitively as text.",
    ("<answer>True</answer>", "True"):
        "word answer; math-verify reads the reference True as E*r*t*u.",
    ("<answer>no  solution</answer>", "No Solution"):
        "word answers compare as case-folded, whitespace-collapsed text.",
    # Issue 12's kinds (rerun with math-verify 0.9.0).
    ("\\boxed{(-\u221e, 3]}", r"(-\infty, 3]"):
        "math-verify does not read the unicode infinity sign and extracts 3; \u221e is \\infty.",
    (r"\boxed{9.8 \operatorname{m/s}^2}", "9.8"):
        "math-verify leaves a unit in \\operatorname unparsed; every unit wrapper is dropped "
        "with its exponent.",
    (r"\boxed{4 ft^2}", "4"):
        "math-verify reads the bare unit as the product 4*f*t^2; ft^2 after a number is a unit.",
    (r"\boxed{60 km/h}", "60"):
        "math-verify reads 60*k*m/h; km/h after a number is a unit.",
    (r"\boxed{2\mathrm{e}^{x}}", "2e^x"):
        "math-verify drops \\mathrm{e}^{x} as if it were a unit and extracts 2; roman-type e is "
        "Euler's number, and only unit words in \\mathrm are units.",
    (r"\boxed{3 m}", "3"):
        "math-verify drops a bare single letter after a number as a unit; ours keeps it, since "
        "'3 m' may be 3 times the variable m (only words of two or more letters, or units in a "
        "wrapper like \\text{m}, are dropped bare).",
    ("The probability is 1e-1.", "0.1"):
        "math-verify extracts 1 from plain-text scientific notation; 1e-1 is one number, 0.1.",
    ("The probability is 1e-1.", "1"):
        "same: the answer is 1e-1 = 0.1, not its mantissa.",
    ("so c = 3 \\times 10^{8} m/s", "300000000"):
        "math-verify extracts the base 10 of the power; 3 \\times 10^{8} is one number.",
    ("about 6.02E23 atoms", r"6.02 \times 10^{23}"):
        "math-verify extracts the mantissa 6.02; 6.02E23 is one number.",
    ("it is 1.5 \\times 10^{-3}", "0.0015"):
        "math-verify extracts 10; 1.5 \\times 10^{-3} is one number.",
    ("roughly 2.5e-1", "1/4"):
        "math-verify extracts the mantissa 2.5; 2.5e-1 = 1/4.",
    ("roughly 2.5e-1", "2.5"):
        "same: the answer is 2.5e-1 = 0.25, not its mantissa 2.5.",
    ("it is 3.0E+8", "3e8"):
        "math-verify extracts 3.0 and reads the reference 3e8 as 3*e*8; both are 300000000.",
    ("5 \\cdot 10^-3", "0.005"):
        "math-verify drops the mantissa and extracts 10^-3; 5 \\cdot 10^-3 is one number.",
    ("the mass is 2e3 kg", "2000"):
        "math-verify extracts 2; 2e3 is one number, 2000.",
    (r"\boxed{28 percent}", "0.28"):
        "math-verify always reads x percent as x/100; ours reads the answer's so only where the "
        "task says so (percent=True), exactly as for the % sign (see the PCT rows).",
    # Issue 23's kinds (rerun with math-verify 0.9.0): math-verify rewards these wrong answers.
    (r"\boxed{x = 5 + 5 + 1 = 7 = 11}", "x = 11"):
        "math-verify compares the last value of a chain; 11 = 7 is a false link, so the response "
        "states a falsehood and scores 0.",
    (r"\boxed{x = 5 + 5 + 2 = 11}", "11"):
        "same: the link 5 + 5 + 2 = 11 is false.",
    (r"\boxed{x = \frac{1}{3} \approx 1.3}", "1/3"):
        "1.3 is no approximation of 1/3 (\\approx holds within 1%); math-verify ignores it.",
    (r"\boxed{x = \frac{1}{3} \approx 0.343}", "1/3"):
        "same: 0.343 is 3% off 1/3.",
    ("the total is 4 + 4 = 7", "7"):
        "math-verify takes the last number 7 of a false equation; in prose the equation before "
        "the number is part of the final expression, and its link 4 + 4 = 7 is false.",
    ("the point is (12, 102)", "102"):
        "math-verify takes the last number 102 out of the pair (12, 102); a coordinate of a "
        "pair is not the answer.",
    (r"\boxed{\overline{ab}}", r"\overline{AB}"):
        "math-verify lower-cases unparsed text; AB and ab are different segments.",
    (r"\boxed{a'}", "A'"):
        "same: a single letter keeps its case.",
    (r"\boxed{5\text{ thousand}}", "5"):
        "math-verify drops the scale word like a unit; 5 thousand is 5000.",
    (r"\boxed{(3, 1)}", r"\{1, 3\}"):
        "a tuple is not a set; math-verify matches the pair (3, 1) to the set {1, 3}.",
    # ... and refuses these right ones.
    (r"\boxed{5\text{ thousand}}", "5000"):
        "math-verify drops the scale word; 5 thousand is 5000.",
    (r"\boxed{2.5 \text{ million}}", "2500000"):
        "same for million.",
    (r"\boxed{3\mbox{ billion}}", "3000000000"):
        "same for billion.",
    (r"\boxed{1000,99}", "1000.99"):
        "a comma followed by two digits is a decimal comma against a reference with a decimal "
        "point; math-verify reads it here only in its expression (non-LaTeX) extraction.",
    (r"\boxed{x \le 5}", r"(-\infty, 5]"):
        "an inequality in one variable is the interval it describes (math-verify: only with "
        "allow_set_relation_comp).",
    (r"\boxed{-2 \le x < 7}", "[-2, 7)"):
        "same: -2 <= x < 7 is [-2, 7).",
    (r"\boxed{10 = 2x}", "x = 5"):
        "equations equal up to a constant factor and with sides swapped (10 = 2x is x = 5).",
    (r"\boxed{f(4) > f(1) > f(2)}", "f(2) < f(1) < f(4)"):
        "the same chain written from the other side; math-verify compares relations only as "
        "written.",
    ("so it is 14{,}916.", "14916"):
        "math-verify takes the last digit group 916 out of 14{,}916 in prose; LaTeX digit "
        "separators join groups into one number.",
    (r"is 32,\! 349", "32349"):
        "same for ,\\! between groups.",
    (r"is 32,\! 349", "349"):
        "the wrong side of the same rule: math-verify rewards the last group 349.",
    # Issue 39's kinds (rerun with math-verify 0.9.0).
    (r"\boxed{\frac{x}{100}}", r"x\%"):
        "math-verify reads % as x/100 only after a number; the reference's x% of an expression "
        "follows the same rule as 28%.",
    (r"\boxed{x}", r"x\%"):
        "same: a trailing % may be dropped, after an expression too.",
    (r"\boxed{(3, 1)}", "1, 3"):
        "math-verify matches the pair (3, 1) to the set {1, 3}; an answer in brackets states an "
        "order, so against a bare list it is compared in order ((1, 3) scores 1).",
    (r"\boxed{2, 1}", "x = 1, y = 2"):
        "math-verify compares lists as sets and so rewards x = 2, y = 1; values named by "
        "different names keep their order when the answer drops the names.",
    (r"\boxed{5, 4}", "AB = 4, CD = 5"):
        "same: the answer says AB = 5, CD = 4.",
    (r"\boxed{2} and \boxed{1}", "x = 1, y = 2"):
        "same, with the answer in two boxes.",
    (r"\boxed{\{2, 1\}}", "x = 1, y = 2"):
        "same: the set {2, 1} does not say which value is x.",
    (r"\boxed{A = (1, 2), B = (3, 4)}", "(3, 4), (1, 2)"):
        "math-verify does not match a named point in a list to the bare point (it does for one "
        "point: A = (1, 2) against (1, 2)); ours compares each named point's value.",
}


def _math_verify_reward(math_verify, response, reference):
  gold = math_verify.parse("$" + reference + "$" if "\\boxed" not in reference and "####" not in
                           reference else reference)
  pred = math_verify.parse(response)
  return float(math_verify.verify(gold, pred))


def test_math_verify_disagreements_are_documented():
  math_verify = pytest.importorskip("math_verify")
  disagreements = {}
  for row in ROWS:
    response, reference, expected, overrides = row
    if overrides or len(response) > 1000 or "\x00" in response:
      continue  # config-specific rows and oversized inputs have no math-verify counterpart
    try:
      theirs = _math_verify_reward(math_verify, response, reference)
    except Exception:  # pylint: disable=broad-except
      theirs = 0.0
    if theirs != expected:
      disagreements[(response, reference)] = theirs
  assert set(disagreements) == set(MATH_VERIFY_DISAGREEMENTS), disagreements
