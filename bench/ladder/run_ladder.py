#!/usr/bin/env python3
"""Model-size ladder (FlexGen's headline table) on this machine: Llama-shaped dummy models whose
weights are generated straight in Q4_K (dummy:PRESET:q4_k), held 100% on disk, with the planner's
batch (`--policy auto --percent 0 0 100 0 100 0`: weights on disk, KV cache and activations in
RAM; the planner picks batch sizes and overlap within --cpu-mem). Per model: tok/s, the disk
read rate offgen achieved against fio's sequential O_DIRECT io_uring read of the same directory
in the same run, overlap efficiency, and peak RAM (the engine's accounting and the process's
maximum RSS). The 7B model is also written as a GGUF file (bench/ladder/dummy_gguf) and run
through llama.cpp's llama-batched-bench (weights in RAM through mmap: llama.cpp has no disk
tier) and through offgen with its weights in RAM, same lengths and batch.

Dev-time only. Needs fio and the llama.cpp build bench/peers/run_peers.py makes.

  python3 bench/ladder/run_ladder.py --offload-dir /var/tmp/ladder \
      --llama-bin ~/.cache/offgen/peers/build-0.3.36-noamx/bin --json bench/ladder/ladder.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench/peers"))
import run_peers  # noqa: E402  (run_llama: llama-batched-bench, FlexGen's definitions)

GIB = 1 << 30


def log(msg: str) -> None:
    print(f"[ladder {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(cmd: list) -> str:
    cmd = [str(c) for c in cmd]
    log("$ " + " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} rc={r.returncode}: {(r.stdout + r.stderr)[-3000:]}")
    return r.stdout + r.stderr


def fio_read(directory: Path, size_gib: int, depth: int) -> float:
    """Sequential O_DIRECT read through io_uring, 1 MiB requests: GB/s (1e9 bytes/s)."""
    path = directory / "fio-ladder.dat"
    try:
        out = sh(["fio", "--name=ladder", f"--filename={path}", f"--size={size_gib}G",
                  "--rw=read", "--bs=1M", "--direct=1", "--ioengine=io_uring",
                  f"--iodepth={depth}", "--runtime=20", "--time_based", "--output-format=json"])
        job = json.loads(out[out.index("{"):])["jobs"][0]
        return job["read"]["bw_bytes"] / 1e9
    finally:
        path.unlink(missing_ok=True)


def offgen_bench(args, model: str, extra: list) -> dict:
    js = Path(args.offload_dir) / "ladder-bench.json"
    out = sh(["/usr/bin/time", "-v", REPO / "build/offgen", "bench", "--model", model,
              "--policy", "auto", "--cpu-mem", args.cpu_mem, "--prompt-len", args.prompt_len,
              "--gen-len", args.gen_len, "--num-prompts", args.num_prompts, "--threads",
              args.threads, "--no-warmup", "--offload-dir", args.offload_dir, "--json", js] + extra)
    run = json.loads(js.read_text())  # one KV variant: one object
    js.unlink()
    run["max_rss_bytes"] = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", out)[1]) * 1024
    run["wall_s"] = sum(float(x) * 60 ** i for i, x in enumerate(reversed(re.search(
        r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", out)[1].split(":"))))
    return run


def summary(r: dict) -> dict:
    busy = r["lane_busy_seconds"]
    run_s = r["prefill_seconds"] + r["decode_seconds"]
    return {
        "batch": r["batch_size"], "policy": r["policy_toml"].split("\n[kv]")[0].strip(),
        "prefill_tok_s": r["prefill_throughput"], "decode_tok_s": r["decode_throughput"],
        "total_tok_s": r["total_throughput"], "predicted_total_tok_s": r.get("predicted_total_throughput"),
        "disk_read_gib": r["io_bytes"]["disk_read"] / GIB,
        "disk_gb_s_load_lane": r["io_bytes"]["disk_read"] / 1e9 / busy["load"] if busy["load"] else 0,
        "disk_gb_s_run": r["io_bytes"]["disk_read"] / 1e9 / run_s,
        "load_busy_s": busy["load"], "compute_busy_s": busy["compute"], "run_s": run_s,
        "overlap_efficiency": r["overlap_efficiency"],
        "forward_overlap_efficiency": r.get("forward_overlap_efficiency"),
        "peak_host_gib": r["peak_bytes"]["host"] / GIB, "peak_disk_gib": r["peak_bytes"]["disk"] / GIB,
        "max_rss_gib": r["max_rss_bytes"] / GIB, "process_wall_s": r["wall_s"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="llama-7b,llama-13b,llama-30b,llama-70b")
    ap.add_argument("--format", default="q4_k")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--gen-len", type=int, default=8)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cpu-mem", default="16G", help="the planner's RAM limit")
    ap.add_argument("--offload-dir", required=True)
    ap.add_argument("--llama-bin", type=Path, help="llama.cpp bin dir (skip the peer run if absent)")
    ap.add_argument("--fio-gib", type=int, default=8)
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    Path(args.offload_dir).mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    result = {"date": dt.date.today().isoformat(), "commit": commit, "argv": sys.argv,
              "cpu": run_peers.platform.processor() or "", "loadavg_start": run_peers.loadavg(),
              "fio_gb_s": {}, "offgen": {}, "peer_7b": {}}
    result["fio_gb_s"]["before"] = fio_read(Path(args.offload_dir), args.fio_gib, 64)
    for preset in args.presets.split(","):
        model = f"dummy:{preset}:{args.format}"
        r = offgen_bench(args, model, ["--percent", 0, 0, 100, 0, 100, 0])
        result["offgen"][preset] = summary(r) | {"model": model, "raw": r}
        log(json.dumps({k: v for k, v in result["offgen"][preset].items() if k != "raw"}))
        args.json.write_text(json.dumps(result, indent=1))
    result["fio_gb_s"]["after"] = fio_read(Path(args.offload_dir), args.fio_gib, 64)
    if args.llama_bin:
        preset = args.presets.split(",")[0]
        gguf = Path(args.offload_dir) / f"{preset}-{args.format}.gguf"
        sh([REPO / "build/bench/dummy_gguf", "--model", f"dummy:{preset}:{args.format}", "--out", gguf])
        try:
            ram = offgen_bench(args, str(gguf), [])
            args.model = gguf
            llama = run_peers.run_llama(str(args.llama_bin / "llama-batched-bench"), args, args.num_prompts)
        finally:
            gguf.unlink(missing_ok=True)
        b, p, g = args.num_prompts, args.prompt_len, args.gen_len
        llama["prefill_tok_s"] = b * p / llama["prefill_s"]
        llama["decode_tok_s"] = b * (g - 1) / llama["decode_s"]
        llama["total_tok_s"] = b * g / (llama["prefill_s"] + llama["decode_s"])
        result["peer_7b"] = {"model": str(gguf.name), "offgen_ram": summary(ram) | {"raw": ram},
                             "llama_cpp": llama}
        args.model = None
    result["loadavg_end"] = run_peers.loadavg()
    args.json.write_text(json.dumps(result, indent=1, default=str))
    log(f"wrote {args.json}")


if __name__ == "__main__":
    main()
