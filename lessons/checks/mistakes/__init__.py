"""The catalogue of plausible wrong answers, one file per lesson (NN_topic.py, as lessons/checks/),
each holding MISTAKES: a list of (function, the wrong answer, words its FAIL line must hold), in
exercise order.

A wrong answer is the answer of lessons/solutions/NN_topic.py with one mistake a learner makes:
either code appended to that file (its definition replaces the right one; it may call the right one,
saved as `_right = name` first), or an (old, new) pair, or a tuple of such pairs, each `old` found
once in the answers and replaced by `new`. tests/test_exercises.py grades every one with
lessons/check.py and asserts that the grader FAILS it with a hint that names the mistake: the
grader's hints are only as good as this list is long, so a mistake the grader let pass belongs here,
with the case and the hint that catch it.
"""
