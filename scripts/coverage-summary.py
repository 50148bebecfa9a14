#!/usr/bin/env python3
"""Recounts the summaries of docs/op-coverage.md from its tables.

A row counts as implemented unless its last cell (the Rust function) is an em dash. The
counts are written twice: in the Summary list at the top (`- <category>: done / total`, and
the total) and in the line under each category's heading (`done / total implemented.`).
Run it after editing rows: `python3 scripts/coverage-summary.py`;
scripts/coverage-check.py fails when the two disagree with the rows.
"""
import pathlib
import re

path = pathlib.Path(__file__).resolve().parent.parent / "docs" / "op-coverage.md"
text = path.read_text()
total_done = total = 0
for section in re.split(r"^## ", text, flags=re.M)[1:]:
    name = section.split("\n", 1)[0].strip()
    body = section.split("\n### ")[0]
    rows = [line for line in body.split("\n") if line.startswith("| `")]
    if not rows:
        continue
    done = sum(1 for line in rows if not line.rstrip().endswith("| — |"))
    text = re.sub(rf"^- {re.escape(name)}: \d+ / \d+$", f"- {name}: {done} / {len(rows)}", text, flags=re.M)
    # The count line right under this category's heading.
    text = re.sub(
        rf"^(## {re.escape(name)}\n\n)\d+ / \d+ implemented\.$",
        rf"\g<1>{done} / {len(rows)} implemented.",
        text,
        flags=re.M,
    )
    total_done += done
    total += len(rows)
text = re.sub(r"^- \*\*total: \d+ / \d+\*\*$", f"- **total: {total_done} / {total}**", text, flags=re.M)
path.write_text(text)
print(f"{total_done} / {total} ops implemented")
