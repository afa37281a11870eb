#!/usr/bin/env python3
"""Mean signed error of `hkv-bench placement`'s per-run predictions, by placement.

    python3 scripts/placement-bias.py docs/bench/placement-pocl-*.txt

For each output file and each forced placement, over the workloads: the mean and median of
(pred@run - meas) / meas, and the mean err@run. A placement the model predicts one-sidedly
(fast or slow in most workloads) shows here where noise averages out; the bench's own
closing line groups placements by the number of tasks on the device only.
"""
import re
import statistics
import sys
from collections import defaultdict

ROW = re.compile(
    r"\s+(cpu|device|search=\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
    r"\s+[\d.]+%\s+[\d.]+%\s+[\d.]+%\s+([\d.]+)%"
)


def short(name):
    return (
        name.replace("search=", "S=")
        .replace(",insert=device,delete=device", "")
        .replace(",insert=cpu,delete=cpu", "")
    )


def main(paths):
    for path in paths:
        rows = defaultdict(list)
        with open(path) as f:
            for line in f:
                m = ROW.match(line)
                if m:
                    pred, meas = float(m.group(4)), float(m.group(5))
                    rows[m.group(1)].append(((pred - meas) / meas * 100, float(m.group(6))))
        print(path)
        for name, v in rows.items():
            signed = [a for a, _ in v]
            err = [b for _, b in v]
            print(
                f"  {short(name):28s} n={len(v):2d} signed mean {statistics.mean(signed):+5.1f}%"
                f" median {statistics.median(signed):+5.1f}%  err@run {statistics.mean(err):4.1f}%"
            )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
