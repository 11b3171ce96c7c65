#!/usr/bin/env python3
"""Model-size ladder at job scale (FlexGen's headline table) on this machine: Llama-shaped dummy
models whose weights are generated straight in Q4_K and written as GGUF files
(bench/ladder/dummy_gguf), run by offgen and by llama.cpp on the same file and the same prompts.

Per size (default 7B, 13B, 30B, 70B) and per job of 16, 64, 256 and 1024 prompts (prompt 64,
gen 64), offgen's `bench --policy auto` runs
  - "ram":  weights and KV in RAM (`--percent 0 100 0 100 0 100`), where the file fits the RAM
            limit;
  - "disk": weights on disk, KV in RAM (`--percent 0 0 100 0 100 0`);
  - "auto": the planner's free choice (only with --modes ...,auto);
with the planner choosing blocks and overlap within --cpu-mem, and llama.cpp's
llama-batched-bench (weights through mmap: beyond RAM the kernel pages them in; its best flags
that fit, see llama_flags) on the sizes of --llama-sizes. Every point records total tok/s
(FlexGen's definition), the planner's prediction and the roofline bound beside it (measured /
predicted, fraction of the bound), the binding resource (of the job and of a decode step), the
process's maximum RSS, and the disk bytes read per generated token (offgen: its offload file's
reads during the run; both: the process's block reads, /usr/bin/time's "File system inputs",
which include loading). One plot: total tok/s against prompts per size and system. Results go
to --json after every point (--resume skips the points already there), a Markdown table to --md.

Dev-time only; hours on a quiet machine (do not run it beside other work). Needs the build
(build/offgen, build/bench/dummy_gguf, build/bench/plot_lines), fio for the disk reference
(--fio-gib 0 skips it) and, for the peer, the llama.cpp build bench/peers/run_peers.py makes.

  python3 bench/ladder/run_ladder.py --offload-dir /var/tmp/ladder \\
      --llama-bin ~/.cache/offgen/peers/build-0.3.36-noamx/bin \\
      --json bench/ladder/ladder_jobscale.json --md bench/ladder/ladder_jobscale.md \\
      --plot bench/ladder/ladder_jobscale.png

  # smoke test of the driver (a tiny model, two small jobs, seconds):
  python3 bench/ladder/run_ladder.py --quick --offload-dir /tmp/ladder-quick \\
      --json /tmp/ladder-quick/l.json --md /tmp/ladder-quick/l.md --plot /tmp/ladder-quick/l.png
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
PERCENT = {"ram": [0, 100, 0, 100, 0, 100], "disk": [0, 0, 100, 0, 100, 0], "auto": None}
# (layers, KV heads, head dim) of the presets, for llama.cpp's f16 KV cache size.
SHAPES = {"llama-7b": (32, 32, 128), "llama-13b": (40, 40, 128), "llama-30b": (60, 52, 128),
          "llama-70b": (80, 8, 128), "smollm2-135m": (30, 3, 64), "llama-1b": (22, 4, 64)}


def log(msg: str) -> None:
    print(f"[ladder {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(cmd: list, env: dict | None = None) -> str:
    cmd = [str(c) for c in cmd]
    log("$ " + " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} rc={r.returncode}: {(r.stdout + r.stderr)[-3000:]}")
    return r.stdout + r.stderr


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", text.strip().upper())
    if not m:
        raise SystemExit(f"--cpu-mem {text}: expected a size such as 16G")
    return int(float(m[1]) * (1 << (10 * " KMGT".index(m[2] or " "))))


def time_v(out: str) -> dict:
    """/usr/bin/time -v's maximum RSS, block reads and wall time."""
    def field(pattern: str) -> str | None:
        m = re.search(pattern, out)
        return m[1] if m else None
    rss = field(r"Maximum resident set size \(kbytes\): (\d+)")
    reads = field(r"File system inputs: (\d+)")
    wall = field(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)")
    return {"max_rss_bytes": int(rss) * 1024 if rss else None,
            "block_read_bytes": int(reads) * 512 if reads else None,
            "wall_s": sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall.split(":"))))
            if wall else None}


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


def offgen_point(args, model: Path, mode: str, prompts: int) -> dict:
    js = Path(args.offload_dir) / "ladder-bench.json"
    cmd = ["/usr/bin/time", "-v", REPO / "build/offgen", "bench", "--model", model, "--policy", "auto",
           "--cpu-mem", args.cpu_mem, "--prompt-len", args.prompt_len, "--gen-len", args.gen_len,
           "--num-prompts", prompts, "--threads", args.threads, "--no-warmup",
           "--offload-dir", args.offload_dir, "--json", js]
    if PERCENT[mode]:
        cmd += ["--percent", *PERCENT[mode]]
    out = sh(cmd, env=args.env)
    r = json.loads(js.read_text())  # one KV variant: one object
    js.unlink()
    tv = time_v(out)
    generated = prompts * args.gen_len
    rl = r.get("roofline") or {}
    predicted = r.get("predicted_total_throughput")
    return {
        "system": "offgen", "mode": mode, "prompts": prompts, "batch": r["batch_size"],
        "policy": r["policy_toml"].split("\n[kv]")[0].strip(),
        "prefill_tok_s": r["prefill_throughput"], "decode_tok_s": r["decode_throughput"],
        "total_tok_s": r["total_throughput"], "predicted_total_tok_s": predicted,
        "measured_over_predicted": r["total_throughput"] / predicted if predicted else None,
        "bound_total_tok_s": rl.get("bound_total_throughput"), "bound_fraction": r.get("bound_fraction"),
        "binding": rl.get("binding"), "decode_step_binding": (rl.get("decode_step") or {}).get("binding"),
        "max_rss_gib": tv["max_rss_bytes"] / GIB if tv["max_rss_bytes"] else None,
        "disk_read_bytes_per_token": r["io_bytes"]["disk_read"] / generated,
        "block_read_bytes_per_token": tv["block_read_bytes"] / generated if tv["block_read_bytes"] is not None else None,
        "process_wall_s": tv["wall_s"], "raw": r,
    }


def llama_kv_bytes(preset: str, contexts: int) -> int | None:
    shape = SHAPES.get(preset)
    return contexts * shape[0] * 2 * shape[1] * shape[2] * 2 if shape else None


def llama_flags(args, gguf: Path, preset: str, prompts: int) -> tuple[int, tuple]:
    """llama.cpp's best batch and flags that fit: every prompt at once when its f16 KV cache fits
    the budget, else the largest halving of it (a job of more prompts runs in such waves); its
    per-sequence caches (the default, each padded to 256 cells) when they fit, else one unified
    cache (-kvu); the whole prefill in one pass over the weights (-b/-ub up to 8192 tokens);
    flash attention; and, for a file larger than half the RAM, --no-repack: repacked weights are
    anonymous memory, which cannot page, so beyond RAM it runs on the mmap'd file as stored."""
    ctx = args.prompt_len + args.gen_len
    budget = parse_size(args.llama_kv_max)
    kv = lambda cells: llama_kv_bytes(preset, cells) or 0
    npl = prompts
    while npl > 1 and kv(npl * ctx) > budget:
        npl //= 2
    unified = kv(npl * -(-ctx // 256) * 256) > budget
    ub = min(npl * args.prompt_len, 8192)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    flags = ("-b", ub, "-ub", ub, "-fa", "on", *(("-kvu",) if unified else ()),
             *(("--no-repack",) if gguf.stat().st_size > ram // 2 else ()))
    return npl, flags


def llama_point(args, gguf: Path, preset: str, prompts: int) -> dict:
    npl, flags = llama_flags(args, gguf, preset, prompts)
    ns = argparse.Namespace(model=str(gguf), prompt_len=args.prompt_len, gen_len=args.gen_len,
                            threads=args.threads)
    r = run_peers.run_llama(str(args.llama_bin / "llama-batched-bench"), ns, npl,
                            prefix=("/usr/bin/time", "-v"), flags=flags)
    tv = time_v(r["raw"]["output_tail"])
    generated = npl * args.gen_len
    run_s = r["prefill_s"] + r["decode_s"]
    return {
        "system": "llama.cpp", "mode": "mmap", "prompts": prompts, "batch": npl,
        "flags": r["raw"]["cmd"].split(str(args.llama_bin / "llama-batched-bench"))[-1].strip(),
        "prefill_tok_s": npl * args.prompt_len / r["prefill_s"],
        "decode_tok_s": npl * (args.gen_len - 1) / r["decode_s"],
        "total_tok_s": generated / run_s, "predicted_total_tok_s": None,
        "max_rss_gib": tv["max_rss_bytes"] / GIB if tv["max_rss_bytes"] else None,
        "disk_read_bytes_per_token": None,
        "block_read_bytes_per_token": tv["block_read_bytes"] / generated if tv["block_read_bytes"] is not None else None,
        "process_wall_s": tv["wall_s"], "raw": r,
    }


def fmt(v, spec: str = ".3g") -> str:
    return "–" if v is None else format(v, spec)


def markdown(result: dict) -> str:
    rows = ["| size | prompts | system | batch | total tok/s | predicted | measured / predicted | bound "
            "| of bound | binds (job / decode step) | max RSS GiB | disk read / gen token (run / process) |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for preset, points in result["points"].items():
        for key in sorted(points, key=lambda k: (points[k]["prompts"], points[k]["system"], points[k]["mode"])):
            p = points[key]
            if "error" in p:
                said = re.search(r"offgen: error: ([^\n]*)", p["error"])  # offgen's own line
                rows.append(f"| {preset} | {p['prompts']} | {key} | error: "
                            f"{(said.group(1) if said else p['error'])[:160]} |||||||||")
                continue
            rows.append(
                f"| {preset} | {p['prompts']} | {p['system']} {p['mode']} | {p['batch']} | {fmt(p['total_tok_s'])} "
                f"| {fmt(p['predicted_total_tok_s'])} | {fmt(p.get('measured_over_predicted'), '.2f')} "
                f"| {fmt(p.get('bound_total_tok_s'))} | {fmt(p.get('bound_fraction'), '.0%')} "
                f"| {p.get('binding') or '–'} / {p.get('decode_step_binding') or '–'} | {fmt(p['max_rss_gib'], '.1f')} "
                f"| {fmt(p['disk_read_bytes_per_token'], '.3g')} / {fmt(p['block_read_bytes_per_token'], '.3g')} |")
    return "\n".join(rows) + "\n"


def plot(args, result: dict) -> None:
    series = {}
    for preset, points in result["points"].items():
        for p in points.values():
            if "error" in p:
                continue
            name = f"{preset} {p['system']} {p['mode']}"
            series.setdefault(name, []).append([p["prompts"], p["total_tok_s"]])
    spec = {"title": f"Total tok/s against prompts per job (prompt {args.prompt_len}, gen {args.gen_len}, "
                     f"{args.threads} threads, --cpu-mem {args.cpu_mem})",
            "x_label": "prompts in the job", "y_label": "total tok/s", "log_x": True, "log_y": True,
            "series": [{"name": n, "points": sorted(pts)} for n, pts in sorted(series.items())]}
    spec_path = args.plot.with_suffix(".plot.json")
    spec_path.write_text(json.dumps(spec, indent=1))
    sh([REPO / "build/bench/plot_lines", "--spec", spec_path, "--out", args.plot])


def merge(args) -> None:
    result = {"points": {}, "merged": []}
    for f in args.merge.split(","):
        part = json.loads(Path(f).read_text())
        for preset, points in part["points"].items():
            result["points"].setdefault(preset, {}).update(points)
        result["merged"].append({k: part.get(k) for k in ("date", "commit", "cpu_mem", "loadavg")}
                                | {"file": f})
    # The plot's title names the run settings: those of the last file, and every --cpu-mem used.
    for k in ("prompt_len", "gen_len", "threads"):
        setattr(args, k, part.get(k, getattr(args, k)))
    args.cpu_mem = " / ".join(sorted({str(m["cpu_mem"]) for m in result["merged"]}))
    args.json.write_text(json.dumps(result, indent=1, default=str))
    if args.md:
        args.md.write_text(markdown(result))
    if args.plot:
        plot(args, result)
    log(f"wrote {args.json}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="llama-7b,llama-13b,llama-30b,llama-70b")
    ap.add_argument("--format", default="q4_k")
    ap.add_argument("--prompts", default="16,64,256,1024", help="prompts per job")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--gen-len", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cpu-mem", default="16G", help="offgen's RAM limit (the planner's and admission's)")
    ap.add_argument("--modes", default="ram,disk", help="offgen placements: ram, disk, auto")
    ap.add_argument("--ram-fit", type=float, default=0.8,
                    help="'ram' runs where the file is at most this share of --cpu-mem")
    ap.add_argument("--offload-dir", required=True, help="offload files and the GGUF files")
    ap.add_argument("--profile", help="hardware profile (OFFGEN_PROFILE; default offgen's cache)")
    ap.add_argument("--llama-bin", type=Path, help="llama.cpp bin dir (no peer points without it)")
    ap.add_argument("--llama-sizes", default="llama-30b,llama-70b", help="presets llama.cpp runs")
    ap.add_argument("--llama-kv-max", default="12G", help="llama.cpp's f16 KV cache at most")
    ap.add_argument("--keep-gguf", action="store_true", help="keep the GGUF files written")
    ap.add_argument("--fio-gib", type=int, default=8, help="fio reference read size (0: none)")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--md", type=Path, help="Markdown table")
    ap.add_argument("--plot", type=Path, help="PNG: total tok/s against prompts (build/bench/plot_lines)")
    ap.add_argument("--resume", action="store_true", help="skip points already in --json")
    ap.add_argument("--merge", help="runs nothing: merges the points of these JSON files (comma "
                    "separated, later ones win a point both hold) into --json, --md and --plot")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: smollm2-135m in Q4_0, jobs of 2 and 4 prompts, prompt 8, gen 4, "
                         "1 thread, no fio; llama.cpp on it when --llama-bin is given")
    args = ap.parse_args()
    if args.merge:
        merge(args)
        return
    if args.quick:
        args.presets, args.format, args.prompts = "smollm2-135m", "q4_0", "2,4"
        args.prompt_len, args.gen_len, args.threads, args.fio_gib = 8, 4, 1, 0
        args.cpu_mem, args.llama_sizes = "2G", "smollm2-135m"
    args.env = dict(os.environ)
    if args.profile:
        args.env["OFFGEN_PROFILE"] = str(Path(args.profile).resolve())
    offload = Path(args.offload_dir)
    offload.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    result = {"points": {}}
    if args.resume and args.json.exists():
        result = json.loads(args.json.read_text())
    result.update({"date": dt.date.today().isoformat(), "commit": commit, "argv": sys.argv,
                   "cpu": run_peers.platform.processor() or "", "prompt_len": args.prompt_len,
                   "gen_len": args.gen_len, "threads": args.threads, "cpu_mem": args.cpu_mem})
    result.setdefault("loadavg", []).append({"start": run_peers.loadavg()})
    if args.fio_gib:
        result.setdefault("fio_gb_s", {})["before"] = fio_read(offload, args.fio_gib, 64)

    def save() -> None:
        args.json.write_text(json.dumps(result, indent=1, default=str))

    ram = parse_size(args.cpu_mem)
    for preset in args.presets.split(","):
        points = result["points"].setdefault(preset, {})
        gguf = offload / f"{preset}-{args.format}.gguf"
        if not gguf.exists():
            sh([REPO / "build/bench/dummy_gguf", "--model", f"dummy:{preset}:{args.format}", "--out", gguf])
        size = gguf.stat().st_size
        modes = [m for m in args.modes.split(",") if m != "ram" or size <= args.ram_fit * ram]
        try:
            for n in map(int, args.prompts.split(",")):
                runs = [("offgen " + m, lambda m=m: offgen_point(args, gguf, m, n)) for m in modes]
                if args.llama_bin and preset in args.llama_sizes.split(","):
                    runs.append(("llama.cpp mmap", lambda: llama_point(args, gguf, preset, n)))
                for name, fn in runs:
                    key = f"{name} {n}"
                    if key in points and "error" not in points[key]:
                        continue
                    try:
                        points[key] = fn() | {"file_bytes": size}
                    except (RuntimeError, KeyError, ValueError) as e:
                        system, mode = name.split(" ", 1)
                        points[key] = {"system": system, "mode": mode, "prompts": n,
                                       "error": str(e)[-1500:]}
                    log(json.dumps({k: v for k, v in points[key].items() if k != "raw"}))
                    save()
        finally:
            if not args.keep_gguf:
                gguf.unlink(missing_ok=True)
    if args.fio_gib:
        result["fio_gb_s"]["after"] = fio_read(offload, args.fio_gib, 64)
    result["loadavg"][-1]["end"] = run_peers.loadavg()
    save()
    if args.md:
        args.md.write_text(markdown(result))
    if args.plot:
        plot(args, result)
    log(f"wrote {args.json}")


if __name__ == "__main__":
    main()
