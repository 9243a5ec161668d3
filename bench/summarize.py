#!/usr/bin/env python3
"""Summarise a bench/compare.sh run: median of the rounds per scenario and broker, and the
ratio Ballast / peer for each peer in the run, as a Markdown table."""
import glob
import json
import os
import re
import statistics
import sys

out = sys.argv[1]
figures = {}  # (scenario, figure name) -> broker -> [values]
noisy = []  # (scenario, broker, round, highest steal %) of turns over NOISY_STEAL
# Percent of some CPU's time taken by the hypervisor above which a turn is reported as noisy:
# its figure may be the host's, not the broker's.
NOISY_STEAL = float(os.environ.get("NOISY_STEAL", "5"))


def add(scenario, name, broker, value):
    if value is None:
        return
    figures.setdefault((scenario, name), {}).setdefault(broker, []).append(value)


for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    m = re.match(r"(\w+)-(\w+)-r(\d+)\.json$", os.path.basename(path))
    if not m:
        continue
    scenario, broker, rnd = m.groups()
    with open(path) as f:
        r = json.load(f)
    # Host steal (older results have none). A ladder's figure is suspect when a step above
    # it failed while the host took more than NOISY_STEAL of some CPU even after the retries:
    # the ceiling may be the host's. Steal during steps that passed does not matter.
    if "steps" in r and "max_sustainable_rate" in r:
        best = r["max_sustainable_rate"]
        deciding = [s["result"] for s in r["steps"] if not s["passed"] and s["rate"] > best]
        steal = [max(x["steal_pct"]) for x in deciding if x.get("steal_pct")]
        retried = sum(len(s.get("noisy_attempts", [])) for s in r["steps"])
        if steal or retried:
            add(scenario, "host steal % where the ladder failed", broker, max(steal, default=0.0))
            add(scenario, "steps measured again for steal", broker, retried)
    else:
        steal = [max(r["steal_pct"])] if r.get("steal_pct") else []
        if steal:
            add(scenario, "host steal % during the run", broker, steal[0])
    if steal and max(steal) > NOISY_STEAL:
        noisy.append((scenario, broker, int(rnd), max(steal)))
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

KNOWN = ["ballast", "mosquitto", "rumqttd", "mochi", "hivemq"]
present = {b for by in figures.values() for b in by}
brokers = [b for b in KNOWN if b in present] + sorted(present - set(KNOWN))
peers = [b for b in brokers if b != "ballast"]


def fmt(v):
    if isinstance(v, int):
        return f"{v:,}"
    return "-" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3f}")


def median(values):
    return statistics.median(values) if values else None


head = ["scenario", "figure", "ballast"]
for p in peers:
    head += [p, f"ballast/{p}"]
head.append("rounds")
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for (scenario, name), by in sorted(figures.items()):
    mb = median(by.get("ballast", []))
    row = [scenario, name, fmt(mb)]
    for p in peers:
        mp = median(by.get(p, []))
        # A ratio of the host's steal between turns says nothing about the brokers.
        ratio = mb is not None and mp and "steal" not in name
        row += [fmt(mp), f"{mb / mp:.2f}" if ratio else "-"]
    row.append("/".join(str(len(by.get(b, []))) for b in brokers))
    print("| " + " | ".join(row) + " |")

if noisy:
    print()
    print(f"Turns whose figure was decided under more than {NOISY_STEAL:g}% host steal on some CPU (suspect):")
    for scenario, broker, rnd, st in sorted(noisy):
        print(f"- {scenario} {broker} round {rnd}: {st:.1f}%")
