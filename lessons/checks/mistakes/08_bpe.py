"""Lesson 08's catalogue of plausible wrong answers (lessons/checks/mistakes/__init__.py
says how to read it)."""
MISTAKES = [
    ("merge", """
        def merge(ids, pair, new_id):               # moves on by one after a merge, not two
            out, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                    out.append(new_id)
                else:
                    out.append(ids[i])
                i += 1
            return out
    """, "skip past both ids"),
    ("merge", """
        def merge(ids, pair, new_id):               # the first occurrence only
            i = next((i for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) == pair), None)
            return list(ids) if i is None else ids[:i] + [new_id] + ids[i + 2:]
    """, "replace EVERY occurrence"),
    ("merge", """
        def merge(ids, pair, new_id):               # in place
            i = 0
            while i < len(ids) - 1:
                if (ids[i], ids[i + 1]) == pair:
                    ids[i:i + 2] = [new_id]
                i += 1
            return ids
    """, "changed its input ids"),
    ("merge", """
        def merge(ids, pair, new_id):               # as text: "31 4 1 41" holds "1 4" too
            text = " ".join(map(str, ids)).replace(f"{pair[0]} {pair[1]}", str(new_id))
            return [int(t) for t in text.split()]
    """, "compare whole ids, not their digits"),
    ("merge", """
        _right = merge
        def merge(ids, pair, new_id):               # the list itself when there is nothing to merge
            return ids if pair not in zip(ids, ids[1:]) else _right(ids, pair, new_id)
    """, "it returned ids itself"),
    ("learn_merges", ("best = min(counts, key=lambda p: (-counts[p], p))",
                      "best = max(counts, key=lambda p: (counts[p], p))"),
     "a tie goes to the smallest"),
    ("learn_merges",
     ("best = min(counts, key=lambda p: (-counts[p], p))", "best = max(counts, key=counts.get)"),
     "a tie goes to the smallest"),                            # the first pair seen wins a tie
    # "(101, 102)" < "(35, 100)" as text
    ("learn_merges", ("best = min(counts, key=lambda p: (-counts[p], p))",
                      "best = min(counts, key=lambda p: (-counts[p], str(p)))"),
     "a tie goes to the smallest"),
    ("learn_merges",
     ("if counts[best] < max(1, min_frequency):", "if counts[best] <= min_frequency:"),
     "still occurs"),
    ("learn_merges", ("if counts[best] < max(1, min_frequency):", "if counts[best] < 1:"),
     "stop when the best pair occurs fewer than min_frequency"),
    ("learn_merges",
     ("counts[pair] = counts.get(pair, 0) + f", "counts[pair] = counts.get(pair, 0) + 1"),
     "times its word's count"),
    ("learn_merges", ("for pair in zip(w, w[1:]):", "for pair in set(zip(w, w[1:])):"),
     "a pair twice in a word counts twice"),
    ("learn_merges", ("words = [merge(w, best, offset + 256 + k) for w in words]", "pass"),
     "after each merge, replace the pair in every word"),
    ("learn_merges", ("words = [merge(w, best, offset + 256 + k) for w in words]",
                      "words = [merge(w, best, 256 + k) for w in words]"),
     "makes id offset + 256 + "),
    ("learn_merges", ('words = [[b + offset for b in w.encode("utf-8")] for w in word_counts]',
                      'words = [list(w.encode("utf-8")) for w in word_counts]'),
     "byte b has id b + offset"),
    ("learn_merges", ('words = [[b + offset for b in w.encode("utf-8")] for w in word_counts]',
                      'words = [[b + 3 for b in w.encode("utf-8")] for w in word_counts]'),
     "use the offset given (4), not 3"),
    ("learn_merges", ("""        for w, f in zip(words, freqs):
            for pair in zip(w, w[1:]):""", """        # the words side by side
        stream = [(i, f) for w, f in zip(words, freqs) for i in w]
        for (a, f), (b, _) in zip(stream, stream[1:]):
            for pair in [(a, b)]:"""), "never across two"),
    ("encode", """
        def encode(word, merges, offset=3):         # characters, not bytes
            ids = [ord(c) + offset for c in word]
            for k, pair in enumerate(merges):
                ids = merge(ids, pair, offset + 256 + k)
            return ids
    """, "start from the UTF-8 bytes"),
    ("encode", """
        # the leftmost known pair first, not the lowest rank
        def encode(word, merges, offset=3):
            ids = [b + offset for b in word.encode('utf-8')]
            new = {pair: offset + 256 + k for k, pair in enumerate(merges)}
            while True:
                i = next((i for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) in new), None)
                if i is None:
                    return ids
                ids[i:i + 2] = [new[ids[i], ids[i + 1]]]
    """, "that is the leftmost known pair first"),
    ("encode", ("ids = merge(ids, pair, offset + 256 + rank[pair])",
                "ids = merge(ids, pair, 256 + rank[pair])"),
     "merge k makes the id offset + 256 + k"),
    # the latest first
    ("encode", ("key=lambda p: rank.get(p, len(merges)))", "key=lambda p: -rank.get(p, -1))"),
     "apply the merge of the lowest rank first"),
    ("encode",
     ('ids = [b + offset for b in word.encode("utf-8")]', 'ids = list(word.encode("utf-8"))'),
     "byte b has id b + offset"),
    ("encode", ('ids = [b + offset for b in word.encode("utf-8")]',
                'ids = [b + 3 for b in word.encode("utf-8")]'),
     "use the offset given (4), not 3"),
    ("encode", ("ids = merge(ids, pair, offset + 256 + rank[pair])",
                "ids = merge(ids, pair, 3 + 256 + rank[pair])"),
     "with offset 4: byte b has id b + 4, and merge k makes 4 + 256 + k"),
]
