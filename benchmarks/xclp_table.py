"""Summarise benchmarks/xclp_fashion.sh results as a markdown table (mean ± std over seeds)."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np


def main(folder: str) -> None:
    groups: dict[str, list[dict]] = defaultdict(list)
    for path in sorted(Path(folder).glob("*.json")):
        rec = json.loads(path.read_text())
        name = path.stem.rsplit("_seed", 1)[0]
        groups[name].append(rec)
    print("| run | seeds | mean test accuracy | protocol bytes up + down | wall s |")
    print("|---|---|---|---|---|")
    for name, recs in groups.items():
        acc = [np.mean(r["rounds"][-1]["accuracies"]) for r in recs]
        comm = np.mean([r["communication"]["bytes_up_total"]
                        + r["communication"]["bytes_down_total"] for r in recs])
        wall = np.mean([r["wall_seconds"] for r in recs])
        print(f"| {name} | {len(recs)} | {np.mean(acc):.4f} ± {np.std(acc):.4f} "
              f"| {comm:,.0f} | {wall:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results/xclp")
