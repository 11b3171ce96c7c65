#!/usr/bin/env python3
"""Cost model and planner against measurements (issue 9), in one run on this machine.

1. `offgen calibrate` writes a fresh hardware profile (disk, RAM, and the model's units).
2. Prediction error: `offgen bench --predict` on configurations with weights / KV in RAM and on
   disk, overlap on and off, with and without H2O; predicted vs measured total throughput.
3. Plan vs grid: for an I/O-bound and a KV-bound workload, `offgen bench --policy auto` (the plan's
   choice) and >= 12 hand-picked policies under the same memory limit; the plan's measured
   throughput against the best of the grid.

Writes bench/plan/validation.json and validation.md. Dev-time only; not part of the runtime.
Usage: bench/plan/validate.py [--bin build/offgen] [--model PATH] [--offload-dir DIR] [--quick]
                             [--no-recalibrate-disk]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent

# (name, percent, gpu batch size, num gpu batches, extra flags); prompt 128, gen 32. RAM shares go
# on the host (CPU) tier, as the planner places them on the CPU backend.
ACCURACY = [
    ("all RAM", "0 100 0 100 100 0", 32, 2, []),
    ("weights 100% disk", "0 0 0 100 100 0", 32, 2, []),
    ("weights 50% disk", "0 50 0 100 100 0", 32, 2, []),
    ("weights 100% disk, no overlap", "0 0 0 100 100 0", 32, 2, ["--no-overlap"]),
    ("KV 100% disk", "0 100 0 0 100 0", 16, 2, []),
    ("KV 50% disk", "0 100 0 50 100 0", 16, 2, []),
    ("weights + KV 100% disk", "0 0 0 0 100 0", 16, 2, []),
    ("all RAM, h2o@0.2", "0 100 0 100 100 0", 32, 2, ["--kv-policy", "h2o", "--kv-budget", "0.2"]),
    ("KV 100% disk, h2o@0.2", "0 100 0 0 100 0", 16, 2, ["--kv-policy", "h2o", "--kv-budget", "0.2"]),
    ("weights 100% disk, h2o@0.2", "0 0 0 100 100 0", 32, 2, ["--kv-policy", "h2o", "--kv-budget", "0.2"]),
]

# Workloads for the plan-vs-grid check: (name, prompt, gen, cpu_mem, grid of (percent, gbs, k)).
WORKLOADS = [
    ("I/O-bound: weights do not fit in RAM", 128, 32, "256M", [
        ("0 0 0 100 100 0", 8, 1), ("0 0 0 100 100 0", 16, 1), ("0 0 0 100 100 0", 20, 1),
        ("0 0 0 50 100 0", 32, 1), ("0 0 0 0 100 0", 32, 1), ("0 0 0 0 100 0", 32, 2),
        ("0 0 0 0 100 0", 32, 4), ("0 0 0 0 100 0", 64, 4), ("0 50 0 100 100 0", 4, 1),
        ("0 50 0 0 100 0", 32, 2), ("0 30 0 0 100 0", 32, 4), ("0 50 0 0 100 0", 64, 4),
    ]),
    ("KV-bound: the KV cache limits the batch", 512, 64, "1G", [
        ("0 100 0 100 100 0", 8, 1), ("0 100 0 100 100 0", 16, 1), ("0 100 0 100 100 0", 24, 1),
        ("0 100 0 100 100 0", 8, 3), ("0 100 0 100 100 0", 26, 1), ("0 100 0 50 100 0", 32, 1),
        ("0 100 0 50 100 0", 48, 1), ("0 100 0 0 100 0", 64, 1), ("0 100 0 0 100 0", 32, 4),
        ("0 50 0 100 100 0", 28, 1), ("0 0 0 100 100 0", 32, 1), ("0 50 0 50 100 0", 40, 1),
    ]),
]


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def run(cmd: list[str], env: dict) -> tuple[int, str]:
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, env=env, text=True, capture_output=True)
    if p.returncode != 0:
        print(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "(no output)", flush=True)
    return p.returncode, p.stdout + p.stderr


def bench(args, env, extra: list[str], tag: str) -> dict | None:
    if args.recalibrate_disk:
        # This VM's disk drifts up to 2x within minutes: re-measure the disk and RAM figures
        # (the profile keeps the compute entries) so the prediction sees today's disk.
        rc, text = run([args.bin, "calibrate", "--offload-dir", args.offload_dir], env)
        if rc != 0:
            return {"error": "calibrate failed: " + text.strip()[-200:]}
    out = Path(env["OFFGEN_TMP"]) / f"{tag}.json"
    cmd = [args.bin, "bench", "--model", args.model, "--weight-dtype", "bf16", "--threads",
           str(args.threads), "--offload-dir", args.offload_dir, "--json", str(out)] + extra
    rc, text = run(cmd, env)
    if rc != 0:
        return {"error": text.strip().splitlines()[-1] if text.strip() else f"exit {rc}",
                "command": " ".join(cmd)}
    j = json.loads(out.read_text())
    j["command"] = " ".join(cmd)
    return j


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "build/offgen"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--offload-dir", default=os.environ.get("TMPDIR", "/tmp"))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quick", action="store_true", help="2 configurations, 3 grid points (smoke)")
    ap.add_argument("--no-recalibrate-disk", dest="recalibrate_disk", action="store_false",
                    help="measure the disk once at the start instead of before every run")
    ap.add_argument("--render", metavar="JSON", help="only rewrite the .md from a saved report")
    args = ap.parse_args()
    if args.render:
        report = json.loads(Path(args.render).read_text())
        (OUT / Path(args.render).with_suffix(".md").name).write_text(markdown(report))
        return 0
    if args.model is None:
        args.model = subprocess.run([str(ROOT / "tools/get-model")], text=True,
                                    capture_output=True, check=True).stdout.strip()
    tmp = tempfile.mkdtemp(prefix="offgen-validate-")
    env = dict(os.environ, OFFGEN_PROFILE=str(Path(tmp) / "profile.json"), OFFGEN_TMP=tmp)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], text=True,
                            capture_output=True).stdout.strip()
    report: dict = {"date": dt.date.today().isoformat(), "commit": commit, "threads": args.threads,
                    "offload_dir": args.offload_dir, "recalibrate_disk": args.recalibrate_disk}

    rc, text = run([args.bin, "calibrate", "--model", args.model, "--weight-dtype", "bf16",
                    "--threads", str(args.threads), "--offload-dir", args.offload_dir], env)
    if rc != 0:
        print(text)
        return 1
    report["calibrate"] = text
    report["profile"] = json.loads(Path(env["OFFGEN_PROFILE"]).read_text())

    accuracy = ACCURACY[:2] if args.quick else ACCURACY
    rows = []
    for i, (name, percent, gbs, k, extra) in enumerate(accuracy):
        flags = ["--prompt-len", "128", "--gen-len", "32", "--percent", *percent.split(),
                 "--gpu-batch-size", str(gbs), "--num-gpu-batches", str(k), "--predict", *extra]
        j = bench(args, env, flags, f"acc{i}")
        j["name"] = name
        if "error" not in j:
            j["ratio"] = j["total_throughput"] / j["predicted_total_throughput"]
            print(f"  {name}: measured {j['total_throughput']:.1f}, predicted "
                  f"{j['predicted_total_throughput']:.1f} tok/s (x{j['ratio']:.2f})", flush=True)
        rows.append(j)
    report["accuracy"] = rows

    plans = []
    for wi, (name, prompt, gen, mem, grid) in enumerate(WORKLOADS):
        if args.quick:
            grid = grid[:3]
        base = ["--prompt-len", str(prompt), "--gen-len", str(gen), "--cpu-mem", mem]
        auto = bench(args, env, base + ["--policy", "auto"], f"w{wi}-auto")
        results = []
        for gi, (percent, gbs, k) in enumerate(grid):
            j = bench(args, env, base + ["--percent", *percent.split(), "--gpu-batch-size", str(gbs),
                                         "--num-gpu-batches", str(k), "--predict"], f"w{wi}-g{gi}")
            j["policy"] = f"--percent {percent} --gpu-batch-size {gbs} --num-gpu-batches {k}"
            results.append(j)
        limit = parse_size(mem)
        for r in results:  # the planner counts every RAM byte (resident tensors too)
            if "error" not in r and r["peak_bytes"]["host"] > limit:
                r["error"] = f"uses {r['peak_bytes']['host'] / 2**20:.0f} MiB of RAM, over {mem}"
        ok = [r for r in results if "error" not in r]
        best = max(ok, key=lambda r: r["total_throughput"]) if ok else None
        entry = {"name": name, "prompt": prompt, "gen": gen, "cpu_mem": mem, "auto": auto,
                 "grid": results}
        if best and "error" not in auto:
            entry["auto_over_best"] = auto["total_throughput"] / best["total_throughput"]
            print(f"  {name}: plan {auto['total_throughput']:.1f} tok/s, best of grid "
                  f"{best['total_throughput']:.1f} ({best['policy']}): x{entry['auto_over_best']:.3f}",
                  flush=True)
        plans.append(entry)
    report["plans"] = plans

    write(report, "_quick" if args.quick else "")
    return 0


def write(report: dict, suffix: str) -> None:
    (OUT / f"validation{suffix}.json").write_text(json.dumps(report, indent=1) + "\n")
    (OUT / f"validation{suffix}.md").write_text(markdown(report))
    print((OUT / f"validation{suffix}.md").read_text())


def markdown(r: dict) -> str:
    lines = [f"# Cost model vs measurement ({r['date']}, commit {r['commit']}, {r['threads']} threads)",
             "", "Prompt 128, gen 32, bf16 weights; `offgen bench --predict`; compute profile "
             "calibrated at the start of the run, disk and RAM figures "
             + ("re-measured (`offgen calibrate`) right before every bench." if r.get("recalibrate_disk")
                else "measured once at the start."), "",
             "| configuration | batch | measured total tok/s | predicted | measured/predicted | "
             "disk read GB/s during the run |",
             "|---|---:|---:|---:|---:|---:|"]
    for a in r["accuracy"]:
        if "error" in a:
            lines.append(f"| {a['name']} | | error: {a['error']} | | | |")
            continue
        # Bytes read over the load lane's busy time: the rate the disk gave this run.
        read, busy = a["io_bytes"]["disk_read"], a["lane_busy_seconds"]["load"]
        rate = f"{read / busy / 1e9:.2f}" if read > 0 and busy > 0 else ""
        lines.append(f"| {a['name']} | {a['batch_size']} | {a['total_throughput']:.1f} | "
                     f"{a['predicted_total_throughput']:.1f} | {a['ratio']:.2f} | {rate} |")
    for p in r["plans"]:
        auto = p["auto"]
        lines += ["", f"## {p['name']} (prompt {p['prompt']}, gen {p['gen']}, --cpu-mem {p['cpu_mem']})",
                  "", "| policy | batch | measured total tok/s | predicted |", "|---|---:|---:|---:|"]
        if "error" in auto:
            lines.append(f"| **plan (--policy auto)** | | error: {auto['error']} | |")
        else:
            pol = auto["policy_toml"].replace("\n", " ")
            lines.append(f"| **plan (--policy auto)**: `{pol[:120]}` | {auto['batch_size']} | "
                         f"{auto['total_throughput']:.1f} | {auto['predicted_total_throughput']:.1f} |")
        for g in p["grid"]:
            if "error" in g:
                lines.append(f"| `{g['policy']}` | | does not run: {g['error'][:80]} | |")
            else:
                lines.append(f"| `{g['policy']}` | {g['batch_size']} | {g['total_throughput']:.1f} | "
                             f"{g['predicted_total_throughput']:.1f} |")
        if "auto_over_best" in p:
            lines += ["", f"Plan / best of grid: **{p['auto_over_best']:.3f}**"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
