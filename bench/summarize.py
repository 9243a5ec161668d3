#!/usr/bin/env python3
"""Summarise a bench/compare.sh run: median of the rounds per scenario and broker, and the
ratio Ballast / Mosquitto, as a Markdown table."""
import glob
import json
import os
import re
import statistics
import sys

out = sys.argv[1]
figures = {}  # (scenario, figure name) -> broker -> [values]


def add(scenario, name, broker, value):
    if value is None:
        return
    figures.setdefault((scenario, name), {}).setdefault(broker, []).append(value)


for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    m = re.match(r"(\w+)-(\w+)-r(\d+)\.json$", os.path.basename(path))
    if not m:
        continue
    scenario, broker, _ = m.groups()
    with open(path) as f:
        r = json.load(f)
    if "max_sustainable_rate" in r:
        add(scenario, "max sustainable publishes/s", broker, r["max_sustainable_rate"])
        add(scenario, "deliveries/s at that rate", broker, r["max_sustainable_deliveries"])
        best = [s for s in r["steps"] if s["passed"]]
        if best:
            top = max(best, key=lambda s: s["rate"])
            add(scenario, "p99 ms at that rate", broker, top["result"]["latency"]["p99_ms"])
    elif "delivered_ratio" in r:
        add(scenario, "offered rate msg/s", broker, r["args"]["rate"])
        add(scenario, "delivered %", broker, 100.0 * r["delivered_ratio"])
        add(scenario, "p50 latency ms", broker, r["latency"]["p50_ms"])
        add(scenario, "p99 latency ms", broker, r["latency"]["p99_ms"])
    elif "delivery_rate" in r and "clients" in r.get("args", {}):
        add(scenario, "delivery rate %", broker, 100.0 * r["delivery_rate"])
        add(scenario, "mean latency ms", broker, r["latency"]["mean_ms"])
        add(scenario, "p99 latency ms", broker, r["latency"]["p99_ms"])
    elif "steps" in r and "connected" in r:
        last = r["steps"][-1] if r["steps"] else {}
        add(scenario, "connections", broker, r["connected"])
        add(scenario, "KiB per idle connection", broker, last.get("kib_per_connection"))
        add(scenario, "connects/s", broker, r["connects_per_second"])

print("| scenario | figure | ballast (median) | mosquitto (median) | ratio ballast/mosquitto | rounds |")
print("|---|---|---|---|---|---|")
for (scenario, name), by in sorted(figures.items()):
    b = by.get("ballast", [])
    mo = by.get("mosquitto", [])
    mb = statistics.median(b) if b else None
    mm = statistics.median(mo) if mo else None
    ratio = f"{mb / mm:.2f}" if mb is not None and mm else "-"
    fmt = lambda v: "-" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3f}")
    print(f"| {scenario} | {name} | {fmt(mb)} | {fmt(mm)} | {ratio} | {len(b)}/{len(mo)} |")
