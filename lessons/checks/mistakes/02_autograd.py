"""Lesson 02's catalogue of plausible wrong answers (lessons/checks/mistakes/__init__.py
says how to read it)."""
MISTAKES = [
    ("mul", """
        def mul(a, b):
            return make_node(a.data * b.data, (a, b), lambda g: (g * a.data, g * b.data), "mul")
    """, "the gradients are swapped"),
    ("mul", ("return g * b.data, g * a.data", "return b.data, a.data"),
     "multiply by the incoming gradient g"),
    ("reduce_sum", """
        def reduce_sum(x, axis=None, keepdims=False):   # works for axis=0 and None, not for (0, 2)
            out = np.asarray(x.data.sum(axis=axis, keepdims=keepdims))
            return make_node(out, (x,), lambda g: (np.broadcast_to(g, x.shape),), "sum")
    """, "np.expand_dims"),
    ("reduce_sum", """
        # one axis at a time: right for (0, 2), not for (2, 0)
        def reduce_sum(x, axis=None, keepdims=False):
            axes = (tuple(range(x.ndim)) if axis is None
                    else tuple(int(i) % x.ndim for i in np.atleast_1d(axis)))
            out = np.asarray(x.data.sum(axis=axes, keepdims=keepdims))
            def backward(g):
                if not keepdims:
                    for a in axes:
                        g = np.expand_dims(g, a)
                return (np.broadcast_to(g, x.shape),)
            return make_node(out, (x,), backward, "sum")
    """, "all at once, so their order does not matter"),
    ("matmul", """
        def matmul(a, b):
            return make_node(a.data @ b.data, (a, b), lambda g: (g @ b.data, a.data.T @ g),
                             "matmul")
    """, "dA = g B^T"),
    ("matmul", ("return g @ B.T, A.T @ g", "return g @ B.T, g.T @ A"),
     "dB = A^T g is (k, m)(m, n)"),
    ("mul", """
        def mul(a, b):                              # x * x: each parent given the whole 2 g x
            def backward(g):
                if a is b:
                    return 2 * g * a.data, 2 * g * a.data
                return g * b.data, g * a.data
            return make_node(a.data * b.data, (a, b), backward, "mul")
    """, "give each slot its own share"),
    ("mul", """
        def mul(a, b):                              # writes into the incoming gradient
            def backward(g):
                ga = g * b.data
                g *= a.data
                return ga, g
            return make_node(a.data * b.data, (a, b), backward, "mul")
    """, "writing into it corrupts other tensors' gradients"),
    ("matmul", """
        def matmul(a, b):                           # x @ x: each parent given both paths
            A, B = a.data, b.data
            def backward(g):
                if a is b:
                    both = g @ B.T + A.T @ g
                    return both, both
                return g @ B.T, A.T @ g
            return make_node(A @ B, (a, b), backward, "matmul")
    """, "give each slot its own share"),
    ("matmul", """
        def matmul(a, b):                           # dB written into g's memory
            A, B = a.data, b.data
            def backward(g):
                dA = g @ B.T
                if g.shape == B.shape:
                    np.matmul(A.T, g.copy(), out=g)
                    return dA, g
                return dA, A.T @ g
            return make_node(A @ B, (a, b), backward, "matmul")
    """, "changed its input g in place"),
]
