"""Lesson 01's catalogue of plausible wrong answers (lessons/checks/mistakes/__init__.py says how to read it)."""
MISTAKES = [
    ("machine_epsilon", """
        def machine_epsilon(dtype):                 # one halving too many
            e = 1.0
            while dtype(1) + dtype(e) != dtype(1):
                e /= 2
            return e
    """, "that is eps/2"),
    ("smallest_lost_power_of_ten", """
        def smallest_lost_power_of_ten(dtype):      # added in Python floats, whatever the dtype
            k = 1
            while 1.0 + 10.0 ** -k != 1.0:
                k += 1
            return k
    """, "16 is float64's answer"),
]
