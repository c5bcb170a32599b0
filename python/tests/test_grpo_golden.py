"""examples/grpo_loop.py's pool: the golden it asks serve for and its share
mode, for every kind of learner (no serve, no machine).

Regression (H100, 2026-12-07, episodes.plan's first-step part): the golden
of a pool without the warm-up (--no-warmup) lost its --config and the
read-only volume of torch's venv, so its machine could not run
/opt/torch/.venv/bin/python3; and the pools forked with share "off", each
clone copying the whole base the learner had loaded inside frozen().
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))
import grpo_loop  # noqa: E402

VENV_PY = "/opt/torch/.venv/bin/python3"


class GrpoGoldenTest(unittest.TestCase):
    def golden(self, *argv):
        a = grpo_loop.parse_args(list(argv))
        return grpo_loop.golden_of(a, "/tmp/adapters"), grpo_loop.share_of(a)

    def test_a_torch_golden_has_its_config_and_its_venv_with_or_without_the_warmup(self):
        for extra in ([], ["--no-warmup"]):
            g, share = self.golden("--config", "qwen2.5-0.5b", "--python", VENV_PY, *extra)
            self.assertEqual(g["cmd"][0], VENV_PY, extra)
            i = g["cmd"].index("--config")
            self.assertEqual(g["cmd"][i + 1], "qwen2.5-0.5b", extra)
            self.assertIn("/opt/torch/.venv:/opt/torch/.venv:ro", g["volumes"], extra)
            self.assertEqual("--no-warmup" in g["cmd"], bool(extra))
            self.assertTrue(g["cuda"])
            self.assertEqual(share, "on", "the clones share the frozen base")

    def test_a_model_directory_is_mounted_with_or_without_the_warmup(self):
        for extra in ([], ["--no-warmup"]):
            g, _ = self.golden("--model", "/models/m", "--python", VENV_PY, *extra)
            self.assertIn("--model", g["cmd"], extra)
            self.assertIn("/models/m:/model:ro", g["volumes"], extra)

    def test_the_stand_in_needs_no_gpu_and_no_venv(self):
        for extra in ([], ["--no-warmup"]):
            g, share = self.golden("--stand-in", *extra)
            self.assertIn("--stand-in", g["cmd"])
            self.assertNotIn("--config", g["cmd"])
            self.assertFalse(g["cuda"])
            self.assertEqual(share, "off")
            self.assertEqual([v for v in g["volumes"] if v.startswith("/usr")], [])


if __name__ == "__main__":
    unittest.main()
