"""The torch learner's data generator (bench/peers/learner_data.py) against
smolvm-learner's (learner/data.cc): the same batches, token for token, for
several lids (negative ones too: the fork warm-up uses -2) and seeds, through
`smolvm-learner batches` (its DPO batches unpacked, as the torch learner runs
them). Needs the build: SMOLVM_BINARY (smolvm-learner lies beside it), set by CTest."""

import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "peers"))

import learner_data  # noqa: E402

BINARY = os.environ.get("SMOLVM_BINARY")
LEARNER = os.path.join(os.path.dirname(BINARY), "smolvm-learner") if BINARY else None


@unittest.skipUnless(LEARNER and os.access(LEARNER, os.X_OK), "needs SMOLVM_BINARY with smolvm-learner beside it (CTest)")
class SameBatchesTest(unittest.TestCase):
    def cpp(self, seed, lid, steps, batch, maxseq):
        p = subprocess.run([LEARNER, "batches", "--seed", str(seed), "--lid", str(lid), "--steps", str(steps),
                            "--batch", str(batch), "--maxseq", str(maxseq)], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return [json.loads(line) for line in p.stdout.splitlines()]

    def test_same_batches_for_several_lids(self):
        # 20 steps of 2 pairs: 40 draws cross the 16-pair pool's epoch twice (reshuffles).
        for seed, lid, batch, maxseq in [(0, 0, 2, 256), (0, 1, 2, 256), (0, 7, 2, 256), (0, 15, 2, 256),
                                         (0, -2, 2, 256), (3, 2, 3, 64), (12345678901, 5, 1, 512)]:
            want = self.cpp(seed, lid, 20, batch, maxseq)
            data = learner_data.PreferenceData(seed, lid)
            for step, w in enumerate(want):
                got = learner_data.dpo_batch(data, batch, maxseq)
                where = "seed %d lid %d step %d" % (seed, lid, step)
                self.assertEqual((got["rows"], got["seq"]), (w["rows"], w["seq"]), where)
                self.assertEqual(got["tokens"], w["tokens"], where)
                self.assertEqual(got["score_pos"], w["score_pos"], where)
                self.assertEqual(got["score_target"], w["score_target"], where)
                self.assertEqual(got["score_example"], w["score_example"], where)

    def test_lids_differ(self):
        a = learner_data.dpo_batch(learner_data.PreferenceData(0, 0), 2, 256)["tokens"]
        b = learner_data.dpo_batch(learner_data.PreferenceData(0, 1), 2, 256)["tokens"]
        self.assertNotEqual(a, b)

    def test_too_short_a_row_is_refused_as_by_the_learner(self):
        with self.assertRaisesRegex(ValueError, "too short"):
            learner_data.dpo_batch(learner_data.PreferenceData(0, 0), 2, 16)
        p = subprocess.run([LEARNER, "batches", "--maxseq", "16"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("too short", p.stderr)


if __name__ == "__main__":
    unittest.main()
