"""Tables of bench/measured/README.md: each real-GPU result of a *_gpu_*.jsonl file against
`vramfit trace` and `vramfit estimate` of the same setup (MiB, and the errors of the trace
and of the estimate against the real GPU, allocated then reserved).

usage: python3 bench/measured/compare.py FRAMEWORK RESULTS.jsonl [VRAMFIT]"""
import json
import subprocess
import sys

FLAGS = ("task", "weights", "amp", "method", "lora_r", "lora_targets", "optimizer", "batch", "seq",
         "lengths", "accumulation", "grad_ckpt")


def args_of(framework: str, setup: dict) -> list[str]:
    out = ["--framework", framework]
    for key in FLAGS:
        if key in setup:
            value = setup[key]
            out += [f"--{key.replace('_', '-')}", ",".join(value) if isinstance(value, list) else str(value)]
    return out


def peaks(vramfit: str, command: str, model: str, args: list[str]) -> tuple[int, int]:
    out = subprocess.run([vramfit, command, model, *args, "--json"], capture_output=True, text=True).stdout
    d = json.loads(out)
    d = d["traced"] if command == "trace" else d["peak"]
    return d["allocated_bytes"], d["reserved_bytes"]


def main() -> None:
    framework, results = sys.argv[1], sys.argv[2]
    vramfit = sys.argv[3] if len(sys.argv) > 3 else "build/vramfit"
    print("| setup | real allocated | trace | estimate | real reserved | trace | estimate |")
    print("|---|---|---|---|---|---|---|")
    for line in open(results):
        row = json.loads(line)
        if "error" in row:
            continue
        setup = row["setup"]
        args = args_of(framework, setup)
        traced = peaks(vramfit, "trace", setup["model"], args)
        estimated = peaks(vramfit, "estimate", setup["model"], args)
        real = row["allocated_bytes"], row["reserved_bytes"]
        cells = []
        for k in (0, 1):
            cells += [f"{real[k] / 2**20:.0f}"] + [f"{(x[k] - real[k]) / real[k] * 100:+.1f}%" for x in (traced, estimated)]
        print(f"| {setup['model']} {' '.join(args[2:])} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
