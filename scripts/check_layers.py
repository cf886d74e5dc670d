#!/usr/bin/env python3
"""Checks that the library's #includes follow its layers (`make check` runs it as the test
`layers`; docs/ARCHITECTURE.md explains the rooms).

Each folder under src/ is a room, and a room may include only the rooms below it:

    base  <-  core  <-  io  <-  edit  <-  sys  <-  cli

so data flows one way (a model is read, estimated, planned, then written into configs) and
no room calls back up. Beyond that:
  - an internal header (internal.h, or NAME_internal.h) is included only by the files of its
    own folder;
  - the command-line tool (cli/) uses the public API (include/) and base/ alone;
  - the public headers (include/) include only public headers.

usage: check_layers.py [ROOT]   (ROOT: the checkout, default: this script's parent folder)
Prints one line per offending include (FILE:LINE: why) and exits 1, or exits 0.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

LAYERS = ["base", "core", "io", "edit", "sys", "cli"]
CLI_MAY_USE = {"base", "cli"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def is_internal(header: str) -> bool:
    name = header.rsplit("/", 1)[-1]
    return name == "internal.h" or name.endswith("_internal.h")


def is_public(header: str) -> bool:
    return header == "vramfit.h" or header.startswith("vramfit/")


def problem(src: Path, file: Path, header: str) -> str | None:
    """Why file (under src/) may not include header, or None when it may."""
    if is_public(header):
        return None
    room = file.relative_to(src).parts[0]
    target = header.split("/", 1)[0]
    if target not in LAYERS:
        return f'"{header}" is in no room of src/ ({", ".join(LAYERS)})'
    if is_internal(header) and (src / header).parent != file.parent:
        return f'"{header}" is internal to src/{Path(header).parent}/'
    if room == "cli" and target not in CLI_MAY_USE:
        return f'the command-line tool uses the public API and base/ only, not "{header}"'
    if LAYERS.index(target) > LAYERS.index(room):
        return f'{room}/ is below {target}/: "{header}" runs back up the layers'
    return None


def check(root: Path) -> list[str]:
    src, errors = root / "src", []
    rooms = sorted(p.name for p in src.iterdir() if p.is_dir())
    for room in rooms:
        if room not in LAYERS:
            errors.append(f"src/{room}/: a room the layers do not name (scripts/check_layers.py LAYERS)")
    for file in sorted(src.rglob("*.[ch]")) + sorted((root / "include").rglob("*.h")):
        public = file.is_relative_to(root / "include")
        for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            header = m.group(1)
            why = (None if is_public(header) else f'a public header includes "{header}"') if public \
                else problem(src, file, header)
            if why:
                errors.append(f"{file.relative_to(root)}:{n}: {why}")
    return errors


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    errors = check(root)
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
