"""Lesson 05's catalogue of plausible wrong answers (lessons/checks/mistakes/__init__.py
says how to read it)."""
MISTAKES = [
    ("xavier_bound", """
        def xavier_bound(d_in, d_out):
            return math.sqrt(2.0 / (d_in + d_out))
    """, "that is the standard deviation"),
    ("xavier_bound", ("math.sqrt(6.0 / (d_in + d_out))", "math.sqrt(6.0 / d_in)"),
     "use d_in + d_out"),
    ("xavier_bound", ("math.sqrt(6.0 / (d_in + d_out))", "math.sqrt(6.0 / d_out)"),
     "use d_in + d_out"),
    ("linear_backward", """
        def linear_backward(x, weight, dy):
            d_in, d_out = weight.shape
            return dy @ weight.T, x.reshape(-1, d_in).T @ dy.reshape(-1, d_out), dy
    """, "sum dy over every leading axis"),
    ("linear_backward", ("X.T @ G", "G.T @ X"),
     "dweight has weight's shape (d_in, d_out)"),
    ("linear_backward", ("G.sum(axis=0)", "G.mean(axis=0)"),
     "not mean"),
    ("linear_backward", ("X.T @ G", "X.T @ G / len(X)"),
     "sum over the rows, not mean"),
    ("FeedForward", """
        class FeedForward(nn.Module):
            def __init__(self, d_model, d_ff):
                super().__init__()
                self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
            def forward(self, x):
                return self.w_2(self.w_1(x))
    """, "put a ReLU between the two layers"),
    ("FeedForward", ("self.w_2(self.w_1(x).relu())", "self.w_2(self.w_1(x).relu()).relu()"),
     "no ReLU after the second layer"),
]
