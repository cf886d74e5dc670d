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


class Events:
    """The allocation stream: live bytes, what was live when each phase began, and the
    labels of the last optimizer step (each step labels its own gradients)."""

    def __init__(self, lines):
        self.phases, self.at_phase, self.labels = [], [], {}
        self.made_in = {}  # phase -> the sizes allocated in it
        live, sizes, self.peak = {}, {}, 0
        for line in lines:
            f = line.split()
            if f[0] == "a":
                live[f[1]] = sizes[f[1]] = int(f[2])
                self.made_in.setdefault(self.phases[-1], []).append(int(f[2]))
                self.peak = max(self.peak, sum(live.values()))
            elif f[0] == "f":
                live.pop(f[1])
            elif f[0] == "p":
                self.phases.append(f[1])
                self.at_phase.append(sum(live.values()))
                if f[1] == "optimizer":
                    self.labels = {}
            elif f[0] == "c":
                self.labels[f[1]] = f[2]
        self.sizes = sizes

    def labelled(self, category):
        return sum(self.sizes[i] for i, c in self.labels.items() if c == category)

    def live_at(self, phase, nth=0):
        return [b for p, b in zip(self.phases, self.at_phase) if p == phase][nth]
