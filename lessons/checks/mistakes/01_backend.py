"""Lesson 01's catalogue of plausible wrong answers (lessons/checks/mistakes/__init__.py
says how to read it)."""
MISTAKES = [
    ("machine_epsilon", """
        def machine_epsilon(dtype):                 # one halving too many
            e = 1.0
            while dtype(1) + dtype(e) != dtype(1):
                e /= 2
            return e
    """, "that is eps/2"),
    ("machine_epsilon", ("while dtype(1) + dtype(e / 2) != dtype(1)", "while 1.0 + e / 2 != 1.0"),
     "that is float64's eps"),                 # once "you return zeros": 2.2e-16 is ~0 times 9.8e-4
    ("machine_epsilon", ("while dtype(1) + dtype(e / 2) != dtype(1)",
                         "while np.float32(1) + np.float32(e / 2) != np.float32(1)"),
     "that is float32's eps"),
    ("smallest_lost_power_of_ten", """
        def smallest_lost_power_of_ten(dtype):      # added in Python floats, whatever the dtype
            k = 1
            while 1.0 + 10.0 ** -k != 1.0:
                k += 1
            return k
    """, "16 is float64's answer"),
    ("smallest_lost_power_of_ten", ("while dtype(1) + dtype(10.0 ** -k) != dtype(1)",
                                    "while np.float32(1) + np.float32(10.0 ** -k) "
                                    "!= np.float32(1)"),
     "8 is float32's answer"),                # once "yours is twice the answer" (8 for float16's 4)
    ("smallest_lost_power_of_ten", ("    return k\n", "    return float(k)\n"),
     "return an int"),
]
