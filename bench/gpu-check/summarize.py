#!/usr/bin/env python3
"""Summarises a bench/gpu-check run: the steps' exit codes and times, the [cuda] test tally, and
offgen vs FlexGen throughput per placement (same workload: prompt 512, gen 32, FlexGen's
throughput definitions) with their ratios.

Usage: summarize.py RAW_DIR SUMMARY.md RESULTS.json
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

PLACEMENTS = [("gpu", "weights 100% GPU"), ("w50", "weights 50% GPU / 50% CPU"),
              ("w0", "weights 100% CPU")]


def load(raw: Path, name: str):
    p = raw / f"{name}.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def fmt(v, digits=1):
    return "—" if v is None else f"{v:.{digits}f}"


def main() -> int:
    raw, md_path, json_path = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    steps = []
    if (raw / "status.tsv").exists():
        for line in (raw / "status.tsv").read_text().splitlines():
            name, rc, secs = (line.split("\t") + ["", "", ""])[:3]
            steps.append({"step": name, "rc": rc, "seconds": secs})
    env = (raw / "env.txt").read_text() if (raw / "env.txt").exists() else ""
    tests = (raw / "test_cuda.txt").read_text() if (raw / "test_cuda.txt").exists() else ""
    tally = re.findall(r"^(All tests passed.*|test cases:.*|assertions:.*|SKIP:.*)$", tests, re.M)
    results = {"env": env, "steps": steps, "tests": tally, "runs": {}}
    lines = ["# offgen GPU check", "", "```", env.strip(), "```", "", "## Steps", "",
             "| step | exit | seconds |", "|---|---|---|"]
    lines += [f"| {s['step']} | {s['rc']} | {s['seconds']} |" for s in steps]
    lines += ["", "## [cuda] tests", "", "```", *(tally or ["(no test output)"]), "```", "",
              "## Throughput: dummy OPT-6.7B, prompt 512, gen 32, batch 32 (tokens/s)", "",
              "| placement | offgen prefill | offgen decode | offgen total | FlexGen total | "
              "offgen / FlexGen |", "|---|---|---|---|---|---|"]
    for key, label in PLACEMENTS:
        ours, theirs = load(raw, f"offgen_opt67_{key}"), load(raw, f"flexgen_opt67_{key}")
        results["runs"][f"offgen_opt67_{key}"] = ours
        results["runs"][f"flexgen_opt67_{key}"] = {k: v for k, v in (theirs or {}).items() if k != "log"} or None
        o = ours.get("total_throughput") if ours else None
        t = theirs.get("total_throughput") if theirs else None
        ratio = f"{o / t:.2f}x" if o and t else "—"
        lines.append(f"| {label} | {fmt(ours and ours.get('prefill_throughput'))} | "
                     f"{fmt(ours and ours.get('decode_throughput'))} | {fmt(o)} | {fmt(t)} | {ratio} |")
    sm = load(raw, "offgen_smollm2_gpu")
    results["runs"]["offgen_smollm2_gpu"] = sm
    lines += ["", "## SmolLM2-135M shape (dummy weights), all on the GPU, batch 64", "",
              f"prefill {fmt(sm and sm.get('prefill_throughput'))}, decode "
              f"{fmt(sm and sm.get('decode_throughput'))}, total {fmt(sm and sm.get('total_throughput'))} "
              "tokens/s", ""]
    md_path.write_text("\n".join(lines) + "\n")
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
