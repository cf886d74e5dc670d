"""Random event files for the allocator comparison (README.md): allocations of mixed sizes
on a few streams, frees in random order, record_stream on other streams, synchronizations
of streams, the device and CUDA events, and empty_cache, in the tracer's event format. Deterministic for a seed.

    python3 bench/alloc_check/random_events.py SEED EVENTS > FILE
"""
from __future__ import annotations

import random
import sys

MIB = 1 << 20
# Small blocks, the 1-10 MiB band of 20 MiB segments, large ones, and sizes near the
# boundaries where rounding and splitting change.
SIZES = [(1, 4096), (4096, MIB), (MIB - 512, MIB + 1024), (MIB, 10 * MIB),
         (10 * MIB - 4096, 10 * MIB + 4096), (10 * MIB, 200 * MIB), (200 * MIB, 1200 * MIB)]


def size(rng: random.Random) -> int:
    low, high = rng.choice(SIZES)
    return rng.randrange(low, high)


def events(seed: int, count: int, streams: int = 3) -> list[str]:
    rng = random.Random(seed)
    live: list[int] = []
    out = ["vramfit-trace-events 1", "p forward"]
    next_id = 1
    next_event = 0
    for _ in range(count):
        roll = rng.random()
        if roll < 0.5 or not live:
            out.append(f"a {next_id} {size(rng)} {rng.randrange(streams)}")
            live.append(next_id)
            next_id += 1
        elif roll < 0.85:
            out.append(f"f {live.pop(rng.randrange(len(live)))}")
        elif roll < 0.93:
            out.append(f"r {rng.choice(live)} {rng.randrange(streams)}")
        elif roll < 0.96:
            out.append("s" if rng.random() < 0.3 else f"s {rng.randrange(streams)}")
        elif roll < 0.98:
            next_event += 1
            out.append(f"m {next_event} {rng.randrange(streams)}")
        elif roll < 0.995 and next_event:
            out.append(f"w {rng.randrange(1, next_event + 1)}")
        else:
            out.append("e")
    return out


def main(argv: list[str]) -> int:
    seed, count = int(argv[1]), int(argv[2])
    print("\n".join(events(seed, count)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
