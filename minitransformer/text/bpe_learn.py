"""The BPE merge learners: given word counts, which pairs of tokens to merge, in order.

Two learners with the same word counts in and the same merges out: learn_merges_naive recounts every
pair at each merge (slow, plain: the reference) and learn_merges updates the counts incrementally
(what BPE.train uses). Encoding applies the merges to a word, the same two ways: apply_merges_naive
(the lowest-rank pair, again and again) and apply_merges (a heap, what BPE.encode uses). The
tokenizer itself (pre-tokenization, encoding, the file) is in bpe.py, which imports this module;
this one imports nothing of the package (lesson 08).
"""
import heapq
from collections import defaultdict

from tqdm import tqdm

# the most ids a vocabulary holds: learn_merges stores an id as a character, chr(id)
MAX_VOCAB = 0x110000
# the longest token: learning stops before a merge that would make a longer one
MAX_TOKEN_BYTES = 1 << 12


def merge(ids, pair, new_id):
    """Replace each occurrence of pair in ids by new_id, left to right.

    merge([1, 2, 3, 1, 2], (1, 2), 4) -> [4, 3, 4];  merge([5, 5, 5], (5, 5), 6) -> [6, 5]
    """
    out = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


# ---- applying the merges to one word (encoding): plain and fast, same ids out -------------------
# ranks: (left id, right id) -> id of the merged token; a later merge has a larger id (its rank).

def apply_merges_naive(ids, ranks):
    """Merge the lowest-rank adjacent pair everywhere, again, until no pair has a rank: as training
    did. O(n^2) in the word's length n. Fast form: apply_merges.

    apply_merges_naive([97, 97, 98], {(97, 97): 256, (256, 98): 257}) -> [257]  ("aa", then "aab")
    """
    while len(ids) > 1:
        pair = min(zip(ids, ids[1:]), key=lambda p: ranks.get(p, 1 << 62))
        if pair not in ranks:
            break
        ids = merge(ids, pair, ranks[pair])
    return ids


def apply_merges(ids, ranks):
    """The same ids as apply_merges_naive in O(n log n): a heap of (rank, position) over a linked
    list of symbols. Equal ranks pop left to right, as merge() goes; a merge only makes pairs of a
    larger rank (a merge uses earlier ids), so every occurrence of a pair is merged before any pair
    made from it. An entry whose pair has changed since it was pushed is stale and skipped."""
    ids = list(ids)  # None: merged away
    n = len(ids)
    nxt = list(range(1, n + 1))   # the linked list
    prv = list(range(-1, n - 1))
    heap = [(ranks[p], i) for i, p in enumerate(zip(ids, ids[1:])) if p in ranks]
    heapq.heapify(heap)
    while heap:
        rank, i = heapq.heappop(heap)
        j = nxt[i]
        if ids[i] is None or j >= n or ranks.get((ids[i], ids[j])) != rank:
            continue                                                    # stale
        ids[i] = rank                                                   # i becomes the merged token
        ids[j] = None
        nxt[i] = nxt[j]
        if nxt[i] < n:
            prv[nxt[i]] = i
            if (ids[i], ids[nxt[i]]) in ranks:
                heapq.heappush(heap, (ranks[ids[i], ids[nxt[i]]], i))
        if prv[i] >= 0 and (ids[prv[i]], ids[i]) in ranks:
            heapq.heappush(heap, (ranks[ids[prv[i]], ids[i]], prv[i]))
    return [t for t in ids if t is not None]


# ---- the two learners: same word counts in, same merges out ----------------------------------
# Rule for ties, in both: of the pairs with the highest count, take the smallest
# (left id, right id).

def learn_merges_naive(word_counts, num_merges, min_frequency, offset):
    """Each step: count every adjacent pair, merge the most frequent one everywhere.

    With byte ids offset by 0: learn_merges_naive({"aaab": 1}, 1, 1, 0) -> [(97, 97)]
    """
    words = [[b + offset for b in w.encode("utf-8")] for w in word_counts]
    freqs = list(word_counts.values())
    merges = []
    size = {}  # bytes of each merged token (a byte is 1)
    nbytes = lambda t: size.get(t, 1)
    for k in range(num_merges):
        stats = defaultdict(int)
        for w, f in zip(words, freqs):
            for pair in zip(w, w[1:]):
                stats[pair] += f
        if not stats:
            break
        best = min(stats, key=lambda p: (-stats[p], p))
        merged_bytes = nbytes(best[0]) + nbytes(best[1])
        if stats[best] < max(1, min_frequency) or merged_bytes > MAX_TOKEN_BYTES:
            break
        size[offset + 256 + k] = merged_bytes
        words = [merge(w, best, offset + 256 + k) for w in words]
        merges.append(best)
    return merges


def learn_merges(word_counts, num_merges, min_frequency, offset, progress=False):
    """learn_merges_naive's merges, but a merge costs what it changes, not the corpus size.

    Keeps pair counts, an index pair -> words that may hold it, and a heap of (-count, pair)
    whose stale entries are re-queued when popped. A pair's count grows only at the merge that
    creates it (it holds the new token); after that it can only fall.
    Speed trick: a word is a str whose characters are token ids (chr(id)) and a pair is a
    2-character str, so str.find and str.replace do the scanning in C (replace merges left to
    right like merge()), and 2-character strs sort like (left, right) tuples.
    learn_merges({"aaab": 1}, 1, 1, 0) -> [(97, 97)]
    """
    if offset + 256 + num_merges > MAX_VOCAB:
        raise ValueError(f"vocab_size {offset + 256 + num_merges:,} is too large: ids are stored "
                         f"as characters, so at most {MAX_VOCAB:,} ids")
    min_frequency = max(1, min_frequency)
    # 1. Every word as a str of token ids (byte b -> chr(b + offset)), with its count.
    shift = {b: b + offset for b in range(256)}
    words = [w.encode("utf-8").decode("latin-1").translate(shift) for w in word_counts]
    freqs = list(word_counts.values())
    # 2. Count every adjacent pair once, and remember which words hold it.
    counts = defaultdict(int)
    where = defaultdict(list)
    for i, (w, f) in enumerate(zip(words, freqs)):
        for k in range(len(w) - 1):
            pair = w[k:k + 2]
            counts[pair] += f
            where[pair].append(i)
    # 3. A heap of (-count, pair): the top is the most frequent pair, ties by the smallest pair.
    heap = [(-c, pair) for pair, c in counts.items() if c >= min_frequency]
    heapq.heapify(heap)
    merges = []
    size = {}  # bytes of each merged token (a byte is 1)
    bar = tqdm(total=num_merges, desc="bpe merges", disable=not progress)
    while len(merges) < num_merges and heap:
        # 4. Pop the best pair; an entry whose count has fallen since it was pushed is stale: put it
        #    back with its true count (counts only fall after a pair is created, so none is missed).
        neg, pair = heapq.heappop(heap)
        if counts[pair] != -neg:
            if counts[pair] >= min_frequency:
                heapq.heappush(heap, (-counts[pair], pair))
            continue
        # 5. The new token z = a b gets the next id (unless it is too long: then learning stops).
        a, b = pair
        z = chr(offset + 256 + len(merges))
        if size.get(a, 1) + size.get(b, 1) > MAX_TOKEN_BYTES:
            break
        size[z] = size.get(a, 1) + size.get(b, 1)
        merges.append((ord(a), ord(b)))
        bar.update()
        # 6. In every word that holds "ab", each occurrence x a b y turns into x z y: the neighbour
        #    pairs (x, a) and (b, y) lose f (the word's count) and (x, z), (z, y) gain f. Two
        #    occurrences in a row (a b a b) make one (z, z) instead of (z, a) and (b, z).
        new = defaultdict(int)  # counts of the new pairs, those that hold z
        # once per word: a long word is listed once per occurrence
        for i in dict.fromkeys(where.pop(pair)):
            w = words[i]
            f = freqs[i]
            j = w.find(pair)  # this occurrence
            end = -1          # just after the previous one
            while j >= 0:
                if j == end:  # right after the previous occurrence: (b, a) is gone already
                    new[z + z] += f
                    where[z + z].append(i)
                elif j > 0:   # the left neighbour x: (x, a) -> (x, z)
                    x = w[j - 1]
                    counts[x + a] -= f
                    new[x + z] += f
                    where[x + z].append(i)
                end = j + 2
                j = w.find(pair, end)
                # the right neighbour y: (b, y) -> (z, y), unless the next occurrence starts at y
                # (then it adds (z, z) itself)
                if end < len(w):
                    y = w[end]
                    counts[b + y] -= f
                    if j != end:
                        new[z + y] += f
                        where[z + y].append(i)
            # left to right, as merge(); a no-op where the index was stale
            words[i] = w.replace(pair, z)
        # 7. The merged pair is gone; the new pairs enter the heap with their counts.
        counts[pair] = 0
        for p, c in new.items():
            counts[p] = c
            if c >= min_frequency:
                heapq.heappush(heap, (-c, p))
    bar.close()
    return merges
