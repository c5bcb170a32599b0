"""smolvm-learner's training data in Python, exactly (learner/data.cc, learner/rng.h).

The torch learner (peft_dpo.py) trains on the same seeded synthetic arithmetic
preference pairs as smolvm-learner: the same pool per (seed, lid), the same
shuffles, the same byte tokens. CI compares both, batch for batch, through
`smolvm-learner batches` (python/tests/test_learner_data.py).

Pure Python, no torch: a batch is a dict of lists, as `smolvm-learner batches`
prints it (DPO unpacked: 2n rows of `seq` tokens, chosen rows first).
"""

_MASK = (1 << 64) - 1
POOL_SIZE = 16
_OFFSETS = (-2, -1, 1, 2, 3)


class Rng:
    """splitmix64 (learner/rng.h's Rng)."""

    def __init__(self, seed):
        self.state = seed & _MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def int(self, lo, hi):
        return lo + self.next() % (hi - lo + 1)


def mix_seed(a, b):
    """learner/rng.h's MixSeed (64-bit wrap-around; b as uint64, so lid -2 works)."""
    return Rng(((a * 0x2545F4914F6CDD1D) & _MASK) ^ (((b & _MASK) + 0x632BE59BD9B4E019) & _MASK)).next()


def question(a, b):
    return "### Q: what is %d+%d?\n### A:" % (a, b)


def min_seq_len():
    return len(question(99, 99)) + len(" 201")


class PreferenceData:
    """The stream of (prompt, chosen, rejected, history) pairs of learner `lid` under `seed`."""

    def __init__(self, seed, lid):
        self.rng = Rng(mix_seed(mix_seed(seed, 0xDA7A), lid))
        self.pool = []
        self.order = []
        self.next_index = 0

    def _history_line(self):
        a = self.rng.int(0, 99)
        b = self.rng.int(0, 99)
        return question(a, b) + " %d\n" % (a + b)

    def _fresh(self):
        a = self.rng.int(0, 99)
        b = self.rng.int(0, 99)
        d = _OFFSETS[self.rng.int(0, 4)]
        if a + b + d < 0:
            d = -d
        history = ""
        while len(history) < 4096:
            history += self._history_line()
        return (question(a, b), " %d" % (a + b), " %d" % (a + b + d), history)

    def next(self):
        if not self.pool:
            self.pool = [self._fresh() for _ in range(POOL_SIZE)]
        if self.next_index == len(self.order):
            self.order = list(range(len(self.pool)))
            for i in range(len(self.order) - 1, 0, -1):
                j = self.rng.next() % (i + 1)
                self.order[i], self.order[j] = self.order[j], self.order[i]
            self.next_index = 0
        p = self.pool[self.order[self.next_index]]
        self.next_index += 1
        return p


def _prefix(pair, length):
    text = pair[3] + pair[0]
    return text[-length:] if len(text) >= length else " " * (length - len(text)) + text


def dpo_batch(data, n, seq):
    """n pairs as 2n plain rows of `seq` byte tokens (chosen rows, then rejected),
    each completion in the same slot at the end of its row, padded with '\\n'.
    Scored: the completion's tokens at columns [prefix, prefix + len), each
    predicted from the column before."""
    if n <= 0:
        raise ValueError("batch must be positive")
    if seq < min_seq_len():
        raise ValueError("maxseq %d is too short for a question and answer (need at least %d)" % (seq, min_seq_len()))
    pairs = [data.next() for _ in range(n)]
    slot = max(max(len(p[1]), len(p[2])) for p in pairs)
    prefix = seq - slot
    rows = [_prefix(p, prefix) + p[1] + "\n" * (slot - len(p[1])) for p in pairs]
    rows += [_prefix(p, prefix) + p[2] + "\n" * (slot - len(p[2])) for p in pairs]
    completions = [len(p[1]) for p in pairs] + [len(p[2]) for p in pairs]
    tokens = [list(r.encode()) for r in rows]
    score_pos, score_target, score_example = [], [], []
    for row, length in enumerate(completions):
        for k in range(length):
            score_pos.append(row * seq + prefix - 1 + k)
            score_target.append(tokens[row][prefix + k])
            score_example.append(row)
    return {"rows": 2 * n, "seq": seq, "completion_start": prefix, "completions": completions,
            "tokens": [t for r in tokens for t in r], "score_pos": score_pos, "score_target": score_target,
            "score_example": score_example}
