#!/usr/bin/env python3
"""The fewest launches on average any search needs for bench_probe's fragmented trainer when
the first launch (the estimate's batch, more than one past the answer) runs out of memory:
even knowing the trainer's line exactly, the answer is one of the batches whose peaks fall in
the 256 MiB above what that launch reached, and both it and the batch past it must be
launched. An optimal decision tree over those candidates, averaged over every boundary in
1..4096 and 16 positions of the report in its 256 MiB. Later out-of-memory reports, which
narrow the range further, are left out. Also the most launches a search without an estimate
needs at each boundary, after the launches that build its line. Usage: python3 bench/probe_floor.py"""
import functools
import math
import sys

GIB, MIB = 2**30, 2**20
FIXED, CAPACITY, SHORT, FRAG = 16 * GIB, 80 * GIB, 256 * MIB, 0.05


@functools.lru_cache(None)
def bracketed(m):
    """Launches summed over answers 1..m: 1 launched and fitted, m + 1 launched and out of memory."""
    return 0 if m == 1 else min(m + bracketed(m - j + 1) + bracketed(j - 1) for j in range(2, m + 1))


@functools.lru_cache(None)
def above_launched(m):
    """Answers 1..m, m + 1 launched (out of memory), nothing below launched."""
    if m == 0:
        return 0
    return min(m + bracketed(m - k + 1) + above_launched(k - 1) for k in range(1, m + 1))


@functools.lru_cache(None)
def below_launched(m):
    """Answers 1..m, 1 launched (fitted), m + 1 not launched."""
    if m == 1:
        return 1
    return min([m + bracketed(m)] + [m + below_launched(m - j + 1) + bracketed(j - 1) for j in range(2, m + 1)])


@functools.lru_cache(None)
def open_range(m):
    """Answers 1..m, nothing launched among them or past them."""
    return min([m + above_launched(m)] + [m + below_launched(m - k + 1) + above_launched(k - 1) for k in range(1, m + 1)])


def candidates(boundary, positions=16):
    """How many batches may be the answer after the first out-of-memory launch, for each of
    the positions of its report in its 256 MiB."""
    line_at = (boundary + 0.5) / (1 - FRAG)
    slope = (CAPACITY - FIXED) / line_at
    usable = FIXED + slope * (boundary + 0.5)
    for i in range(positions):
        reached = usable - SHORT * (i + 0.5) / positions
        first = math.floor((reached - FIXED) / slope)  # fits for certain
        last = math.floor((reached + SHORT - FIXED) / slope)  # may fit
        yield last - first + 1


def mean_launches(boundary):
    counts = list(candidates(boundary))
    return sum(1 + open_range(n) / n for n in counts) / len(counts)


# Without an estimate the search launches 1, the batch the line through the origin allows and
# one far batch (a line from two batches close together cannot be told from a bend) before
# its prediction runs out of memory.
BEFORE_NO_ESTIMATE = 4


def most_without_estimate(boundary):
    """The most launches without an estimate: the 4 above, then the answers 1..n with nothing
    launched among them or past them take ceil(log2(n + 2)) at worst (each launch halves the
    n + 1 batches that may need one; the recursion above, minimised over its worst case)."""
    return BEFORE_NO_ESTIMATE + max(math.ceil(math.log2(n + 2)) for n in candidates(boundary))


def main():
    sys.setrecursionlimit(10000)
    all_, small = [mean_launches(b) for b in range(1, 4097)], [mean_launches(b) for b in range(1, 65)]
    print("fragmentation 5%%, the line known exactly after one out-of-memory launch: "
          "mean %.2f over 1..4096, %.2f over 1..64" % (sum(all_) / len(all_), sum(small) / len(small)))
    over = [b for b in range(1, 4097) if most_without_estimate(b) > 8]
    print("without an estimate, the line known exactly after %d launches: more than 8 at %d boundaries "
          "(every one from %d) where the report lands low" % (BEFORE_NO_ESTIMATE, len(over), over[0]))


if __name__ == "__main__":
    main()
