"""bench/methods_args.py: bad values are refused with the option named, before any input is made
(standard library only)."""

import contextlib
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import methods_args  # noqa: E402

REQUIRED = ["--mmsparse", "mmsparse", "--out", "out"]


def refusal(*extra):
    """The parser's error message for REQUIRED + extra (it exits with status 2)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), \
            unittest.TestCase().assertRaises(SystemExit) as raised:
        methods_args.parse_args(REQUIRED + list(extra), "methods", ("video",))
    assert raised.exception.code == 2
    return stderr.getvalue()


class MethodsArgsTest(unittest.TestCase):
    def test_defaults_parse(self):
        args = methods_args.parse_args(REQUIRED, "methods", ("video",))
        self.assertEqual(args.presets, ["video"])
        self.assertEqual(args.flashinfer_block, 128)

    def test_bad_values_name_their_option(self):
        for extra, option in ((["--warmup", "-1"], "--warmup"),
                              (["--flashinfer-block", "0"], "--flashinfer-block"),
                              (["--budget-s", "-2"], "--budget-s"),
                              (["--search-targets", "1.5"], "--search-targets"),
                              (["--config-file", "nowhere"], "--config-file"),
                              (["--vs-counts", "1"], "--vs-counts")):
            with self.subTest(option=option):
                self.assertIn(option, refusal(*extra))


if __name__ == "__main__":
    unittest.main()
