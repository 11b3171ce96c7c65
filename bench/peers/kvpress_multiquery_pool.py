#!/usr/bin/env python3
"""Pools the progress logs of kvpress_multiquery.py runs over disjoint shards of contexts.

A full kvpress run over bench/multiquery/multikey.jsonl takes hours on one core, so it may be
split (run the script on a subset of the contexts, keep its stderr). Each log line
`ctx i/n ID C=.. POLICY r=R kept=K agree=A/N acc=C/N` carries one context's counts; only contexts
whose `ctx i/n done` line is present count. This pools them per (policy, r) exactly as the script
does (sums of agreeing / correct answers over all questions; kept = mean over contexts), refuses a
context that appears in two logs, and writes the same kind of markdown table and JSON rows, with
offgen's curve from `offgen eval multiquery --json` side by side.

  python3 bench/peers/kvpress_multiquery_pool.py LOG [LOG ...] --offgen bench/multiquery/offgen_multikey.json \
      --json bench/peers/kvpress_multiquery.json --md bench/peers/kvpress_multiquery.md
"""
import argparse
import json
import re
import sys
from pathlib import Path

ROW = re.compile(r"ctx (\d+)/\d+ (\S+) C=(\d+) (\S+)\s+r=(\S+)\s+kept=(\S+) agree=(\d+)/(\d+) acc=(\d+)/(\d+)")
DONE = re.compile(r"ctx (\d+)/\d+ done")
HEAD = re.compile(r"\] (kvpress .*)$")
# offgen policy name -> the kvpress row that runs the same selection
PAIRS = [("kvzip", "kvzip"), ("snapkv", "snapkv_q1"), ("h2o", "h2o"), ("sinks", "sinks")]


def read_log(path):
    """-> (header line, {context id: [(policy, r, kept, agree, n, acc, n_gold)]}) for finished contexts."""
    lines = Path(path).read_text().splitlines()
    header = next((m.group(1) for m in map(HEAD.search, lines[:1]) if m), "")
    done = {int(m.group(1)) for m in map(DONE.search, lines) if m}
    out = {}
    for line in lines:
        m = ROW.search(line)
        if not m or int(m.group(1)) not in done:
            continue
        _, cid, _, policy, r, kept, a, n, c, n2 = m.groups()
        out.setdefault(cid, []).append((policy, float(r), float(kept), int(a), int(n), int(c), int(n2)))
    return header, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--offgen", type=Path, help="rows of `offgen eval multiquery --json` over the same contexts")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--md", type=Path, required=True)
    args = ap.parse_args()

    contexts, headers = {}, []
    for path in args.logs:
        header, rows = read_log(path)
        headers.append((path.name, header, len(rows)))
        for cid, r in rows.items():
            if cid in contexts:
                sys.exit(f"{path}: context {cid} is also in an earlier log; the shards must be disjoint")
            contexts[cid] = r
    if not contexts:
        sys.exit("no finished context in the logs")

    pooled = {}  # (policy, r) -> [agree, n, acc, n_gold, kept list, contexts]
    for cid in sorted(contexts):
        for policy, r, kept, a, n, c, n2 in contexts[cid]:
            e = pooled.setdefault((policy, r), [0, 0, 0, 0, [], 0])
            e[0] += a; e[1] += n; e[2] += c; e[3] += n2; e[4].append(kept); e[5] += 1
    n_ctx = len(contexts)
    rows = []
    for (policy, r), (a, n, c, n2, kept, k) in sorted(pooled.items()):
        for metric, value, count in [("agreement", a / n, n), ("accuracy", c / n2 if n2 else None, n2),
                                     ("kept_fraction", sum(kept) / len(kept), n)]:
            if value is not None:
                rows.append({"policy": policy, "budget": r, "metric": metric, "value": value,
                             "questions": count, "contexts": k, "system": "kvpress",
                             "logs": [h[0] for h in headers]})

    lines = ["# kvpress multi-query, pooled from shard logs", ""]
    for name, header, k in headers:
        lines.append(f"- `{name}`: {k} finished contexts — {header}")
    lines += ["", f"{n_ctx} contexts in all. A row over fewer contexts says so.", "",
              "| policy | budget r | contexts | kept | agreement | accuracy |", "|---|---:|---:|---:|---:|---:|"]
    for (policy, r), (a, n, c, n2, kept, k) in sorted(pooled.items()):
        acc = f"{c / n2:.3f} ({c}/{n2})" if n2 else "—"
        lines.append(f"| {policy} | {r:g} | {k} | {sum(kept) / len(kept):.3f} | {a / n:.3f} ({a}/{n}) | {acc} |")

    if args.offgen:
        og = {(x["policy"], float(x["budget"]), x["metric"]): x["value"] for x in json.loads(args.offgen.read_text())}
        rs = sorted({r for (p, r) in pooled if r < 1})
        lines += ["", f"Agreement with each system's own full cache, offgen (`{args.offgen.name}`) / kvpress:", "",
                  "| offgen / kvpress policy | " + " | ".join(f"{r:g}" for r in rs) + " |", "|---|" + "---:|" * len(rs)]
        for ours, theirs in PAIRS:
            cells = []
            for r in rs:
                e = pooled.get((theirs, r))
                o = og.get((ours, r, "agreement"))
                cells.append(("—" if o is None else f"{o:.3f}") + " / " + ("—" if e is None else f"{e[0] / e[1]:.3f}"))
            lines.append(f"| {ours} / {theirs} | " + " | ".join(cells) + " |")
    lines += ["", "Generated by `bench/peers/kvpress_multiquery_pool.py`; rows in the JSON next to this file.", ""]
    args.md.write_text("\n".join(lines))
    args.json.write_text("[\n" + ",\n".join(json.dumps(row) for row in rows) + "\n]\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
