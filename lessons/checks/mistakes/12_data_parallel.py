"""Lesson 12's catalogue of plausible wrong answers (lessons/checks/mistakes/__init__.py
says how to read it)."""
MISTAKES = [
    ("shard_weights", """
        # the average of the ranks' own means
        def shard_weights(token_counts, rank, size, average=False):
            own = token_counts[rank::size]
            return [c / sum(own) / size * (size if average else 1) for c in own]
    """, "the average of the ranks' own means"),
    ("shard_weights", ("n = sum(token_counts)", "n = sum(token_counts[rank::size])"),
     "not this rank's own"),
    # a block of neighbours
    ("shard_weights", ("return [scale * c / n for c in token_counts[rank::size]]",
                       "k = len(token_counts) // size\n    return [scale * c / n for c in "
                       "token_counts[rank * k:][:k]]"),
     "every size-th batch"),
    ("shard_weights", ("return [scale * c / n for c in token_counts[rank::size]]",
                       "return [scale / len(token_counts) for c in token_counts[rank::size]]"),
     "n_i / n, not 1 / K"),
    ("shard_weights", ("scale = size if average else 1", "scale = size"),
     "it does not average them"),
    ("shard_weights", ("scale = size if average else 1", "scale = 1"), "this allreduce averages"),
    ("shard_weights", """
        # DDP's default: own mean, averaged
        def shard_weights(token_counts, rank, size, average=False):
            own = token_counts[rank::size]
            if not average:
                return [c / sum(token_counts) for c in own]
            return [c / sum(own) for c in own]
    """, "DistributedDataParallel's default"),
    ("ring_allreduce", """
        def ring_allreduce(arrays):                      # the all-gather left out
            chunks = [np.array_split(np.array(a).reshape(-1), len(arrays)) for a in arrays]
            N = len(arrays)
            for s in range(N - 1):
                sent = [(r, (r - s) % N, chunks[r][(r - s) % N].copy()) for r in range(N)]
                for r, c, data in sent:
                    chunks[(r + 1) % N][c] += data
            return [np.concatenate(c).reshape(np.shape(arrays[0])) for c in chunks]
    """, "the all-gather"),
    ("ring_allreduce", ("chunks[(r + 1) % N][c][...] = data", "chunks[(r + 1) % N][c] += data"),
     "the all-gather copies the finished chunks"),
    ("ring_allreduce",
     (("for s in range(N - 1):" + " " * 50 + "# reduce-scatter", "for s in range(N - 2):"),
      ("for s in range(N - 1):" + " " * 50 + "# all-gather", "for s in range(N - 2):")),
     "each phase takes N - 1 steps"),
    ("ring_allreduce", ("np.array(a).reshape(-1)", "np.asarray(a).reshape(-1)"),
     "ring_allreduce changed its input arrays"),
    ("ring_allreduce", ("np.array(a).reshape(-1)", "np.array(a, dtype=np.float64).reshape(-1)"),
     "keep the inputs' dtype"),
    ("ring_allreduce", ("return [np.concatenate(c).reshape(shape) for c in chunks]",
                        "return [np.concatenate(c).reshape(shape) / N for c in chunks]"),
     "the mean: return the sum"),
    ("ring_allreduce", ("return [np.concatenate(c).reshape(shape) for c in chunks]",
                        "return [np.concatenate(c) for c in chunks]"),
     "the shape of the inputs"),
    ("ring_allreduce", """
        # each rank adds all arrays itself, starting from its own
        def ring_allreduce(arrays):
            N = len(arrays)
            return [sum(arrays[(r + i) % N] for i in range(1, N)) + arrays[r] for r in range(N)]
    """, "every rank must end with the very same numbers"),
    ("ring_allreduce", """
        def ring_allreduce(arrays):                      # no ring: one sum, copied to every rank
            total = np.sum(np.stack(arrays), axis=0)
            return [total.copy() for _ in arrays]
    """, "added in another order than the ring's"),
    ("ring_allreduce",
     (("(r - s) % N, chunks[r][(r - s) % N]", "(r + s) % N, chunks[r][(r + s) % N]"),
      ("chunks[(r + 1) % N][c] += data", "chunks[(r - 1) % N][c] += data"),
      ("(r + 1 - s) % N, chunks[r][(r + 1 - s) % N]",
       "(r - 1 + s) % N, chunks[r][(r - 1 + s) % N]"),
      ("chunks[(r + 1) % N][c][...] = data", "chunks[(r - 1) % N][c][...] = data")),
     "added in another order than the ring's"),                # the ring the other way round
    ("ring_allreduce", ("return [np.concatenate(c).reshape(shape) for c in chunks]",
                        # one object for all
                        "return [np.concatenate(chunks[0]).reshape(shape)] * N"),
     "return one array"),
    ("ring_bytes_sent", """
        def ring_bytes_sent(n_elements, itemsize, size, rank=0):   # the reduce-scatter alone
            return (size - 1) * (n_elements // size) * itemsize
    """, "that is one phase"),
    ("ring_bytes_sent", """
        def ring_bytes_sent(n_elements, itemsize, size, rank=0):   # the whole array each step
            return 2 * (size - 1) * n_elements * itemsize
    """, "one chunk, 1/size of the array"),
    ("ring_bytes_sent", """
        def ring_bytes_sent(n_elements, itemsize, size, rank=0):   # elements, not bytes
            return 2 * (size - 1) * (n_elements // size)
    """, "that counts elements"),
    ("ring_bytes_sent", """
        def ring_bytes_sent(n_elements, itemsize, size, rank=0):   # the limit for many ranks
            return 2 * n_elements * itemsize
    """, "2 x the bytes is the limit for many ranks"),
    ("ring_bytes_sent", """
        def ring_bytes_sent(n_elements, itemsize, size, rank=0):   # sent and received
            return 4 * (size - 1) * (n_elements // size) * itemsize
    """, "not what it sends and receives"),
    ("ring_bytes_sent", """
        def ring_bytes_sent(n_elements, itemsize, size, rank=0):   # equal chunks of n // size
            return 2 * (size - 1) * (n_elements // size) * itemsize
    """, "the first n % size have one more"),
    ("ring_bytes_sent", """
        def ring_bytes_sent(n_elements, itemsize, size, rank=0):   # the formula, in floats
            return 2 * (size - 1) / size * n_elements * itemsize
    """, "the chunks are whole elements"),
    ("ring_bytes_sent", ("sent = [(rank - s) % size", "rank = 0\n    sent = [(rank - s) % size"),
     "that is what rank 0 sends"),
]
