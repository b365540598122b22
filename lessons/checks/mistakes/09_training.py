"""Lesson 09's catalogue of plausible wrong answers (lessons/checks/mistakes/__init__.py
says how to read it)."""
MISTAKES = [
    ("noam_lr", """
        def noam_lr(step, d_model, warmup_steps=4000):
            step = max(step, 1)
            return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -0.5)
    """, "step * warmup_steps^-1.5"),
    ("noam_lr", ("min(step ** -0.5, step * warmup_steps ** -1.5)",
                 "max(step ** -0.5, step * warmup_steps ** -1.5)"),
     "the min of the two branches"),
    ("noam_lr", ("return d_model ** -0.5 * min(", "return min("), "multiply by d_model^-0.5"),
    ("noam_lr", ("return d_model ** -0.5 * min(", "return d_model ** 0.5 * min("),
     "d_model^-0.5, not d_model^0.5"),
    ("noam_lr", ("return d_model ** -0.5 * min(", "return d_model ** -1 / 2 * min("),
     "** binds tighter than /"),
    ("noam_lr", ("step = max(step, 1)", "step = step + 1"),
     "steps count from 1: use step as it is"),
    ("noam_lr", ("step = max(step, 1)", "pass"), "step 0 counts as step 1"),
    ("noam_lr", ("step = max(step, 1)", "step = max(step - 1, 1)"), "not step - 1"),
    ("smoothed_targets", """
        # tensor2tensor's: eps over the V - 1 others
        def smoothed_targets(target, vocab_size, eps):
            q = np.full((len(target), vocab_size), eps / (vocab_size - 1))
            q[np.arange(len(target)), target] = 1 - eps
            return q
    """, "tensor2tensor's variant"),
    ("smoothed_targets", ("target] += 1 - eps", "target] = 1 - eps"),
     "the target gets eps / V too"),
    ("loss_floor", """
        def loss_floor(vocab_size, eps):
            q = smoothed_targets(np.array([0]), vocab_size, eps)
            return float(-(q * np.log(q)).sum())
    """, "0 log 0 counts as 0"),
    ("loss_floor", (("-q_t * math.log(q_t)", "-q_t * math.log2(q_t)"),
                    ("q_o * math.log(q_o)", "q_o * math.log2(q_o)")),
     "the loss is in nats"),
    ("adam", ("m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)", "m_hat, v_hat = m, v"),
     "divide m by 1 - beta1^t and v by 1 - beta2^t"),
    ("adam",
     ("m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)", "m_hat, v_hat = m / (1 - b1 ** t), v"),
     "correct v too"),
    ("adam",
     ("m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)", "m_hat, v_hat = m, v / (1 - b2 ** t)"),
     "correct m too"),
    ("adam", ("m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)",       # t counted from 0
              "m_hat, v_hat = m / (1 - b1 ** (t - 1)), v / (1 - b2 ** (t - 1))"),
     "t counts from 1: at t = 1 the corrections divide by 1 - beta"),
    ("adam", ("m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)",
              "m_hat, v_hat = m / (1 - b1 ** (t + 1)), v / (1 - b2 ** (t + 1))"),
     "the corrections use it as it is: 1 - beta^t"),
    ("adam", ("(np.sqrt(v_hat) + eps)", "np.sqrt(v_hat + eps)"),
     "eps goes outside the square root"),
    ("adam", ("return p - lr * m_hat", "return p + lr * m_hat"), "step against the gradient"),
    ("adam", ("v = b2 * v + (1 - b2) * g * g", "v = b2 * v + (1 - b2) * g"),
     "the running mean of g^2"),
    ("adam", (("m = b1 * m + (1 - b1) * g", "m = b2 * m + (1 - b2) * g"),
              ("v = b2 * v + (1 - b2) * g * g", "v = b1 * v + (1 - b1) * g * g")),
     "m decays with beta1"),
    ("adam", ("m = b1 * m + (1 - b1) * g", "m = (1 - b1) * m + b1 * g"),
     "the old mean keeps the weight beta1"),
    ("adam", ("(np.sqrt(v_hat) + eps), m, v", "(np.sqrt(v_hat) + eps), m_hat, v_hat"),
     "return m itself, not m_hat"),
    ("adam", ("(np.sqrt(v_hat) + eps)", "(v_hat + eps)"), "divide by the square root of v_hat"),
    ("adam", ("lr * m_hat / (", "lr * g / ("), "move by the running mean m_hat"),
    ("adam", ("b1, b2 = betas", "b1, b2 = 0.9, 0.98"), "use the betas given"),
    ("adam", """
        # in place, as optim.Adam does its buffers
        def adam(p, g, m, v, t, lr, betas=(0.9, 0.98), eps=1e-9):
            b1, b2 = betas
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            p -= lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
            return p, m, v
    """, "adam changed its input"),
    ("adam", """
        # copies, then in place: 0.0 has no .copy()
        def adam(p, g, m, v, t, lr, betas=(0.9, 0.98), eps=1e-9):
            b1, b2 = betas
            m, v = m.copy(), v.copy()
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            return p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps), m, v
    """, "m and v start as the float 0.0"),
]
