#!/usr/bin/env python3
"""Prints the slowest units of a cargo build from its `--timings` report, so the CI log says
where the cold build's time goes (test.sh builds with --timings under CI=true).

Usage: python3 scripts/build-timings.py [target/cargo-timings/cargo-timing.html] [N]
Standard library only; prints nothing but a note when the report is missing or unreadable.
"""
import json
import pathlib
import re
import sys

path = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/cargo-timings/cargo-timing.html")
top = int(sys.argv[2]) if len(sys.argv) > 2 else 15
try:
    html = path.read_text()
    data = re.search(r"const UNIT_DATA = (\[.*?\n\]);", html, re.S)
    units = json.loads(data.group(1))
except (OSError, AttributeError, ValueError) as e:
    print(f"build-timings: no readable report at {path} ({e})")
    sys.exit(0)
units = [u for u in units if u.get("duration", 0) > 0]
total = sum(u["duration"] for u in units)
wall = max((u["start"] + u["duration"] for u in units), default=0.0)
print(f"build-timings: {len(units)} units, {total:.0f} s of compiler time in {wall:.0f} s wall")
print("| unit | s |")
print("|---|---:|")
for u in sorted(units, key=lambda u: -u["duration"])[:top]:
    print(f"| {u['name']} {u['version']}{u['target']} | {u['duration']:.1f} |")
