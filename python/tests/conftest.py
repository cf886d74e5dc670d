"""The tracer's tests run inside one framework's environment (scripts/trace-tests.sh runs
each environment on the tests that need it). The fake-CUDA shim must be loaded before
torch is imported, so it is loaded here, first."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from vramfit.trace import fakecuda  # noqa: E402

fakecuda.load_shim()

TESTS_DIR = os.path.dirname(__file__)
TINY = os.path.join(TESTS_DIR, "..", "..", "tests", "data", "trace")
