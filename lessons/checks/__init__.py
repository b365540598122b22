"""The checkers of lessons/check.py, one file per lesson (NN_topic.py, each with its ITEMS), and
common.py, what they share: Grade, whose cmp compares an answer with the package's
and finds the hint."""
