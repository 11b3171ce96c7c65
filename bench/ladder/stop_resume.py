#!/usr/bin/env python3
"""A job-scale stop and resume: `offgen generate --policy auto` over many prompts of a model
whose weights stream from disk, run once uninterrupted, then again with SIGTERM sent while a block
is running (after --stop-after records and --delay seconds more), resumed, and compared: the
resumed output must hold exactly the uninterrupted run's records (one per id, identical).
Reports the plan, the blocks, the achieved fraction of the plan's bound and each run's RSS.

Dev-time only; on a 13B model and 1,000 short prompts it takes about half an hour (run it on a quiet machine):

  build/bench/dummy_gguf --model dummy:llama-13b:q4_k --out /var/tmp/ladder/llama-13b-q4_k.gguf
  python3 bench/ladder/stop_resume.py --model /var/tmp/ladder/llama-13b-q4_k.gguf \\
      --prompts 1000 --max-tokens 16 --vary-tokens --prompt-format "#{i}" --block 250 \\
      --cpu-mem 16G --percent 0 0 100 0 100 0 \\
      --offload-dir /var/tmp/ladder --json bench/ladder/stop_resume_13b.json

  # smoke test (seconds): python3 bench/ladder/stop_resume.py --model dummy:smollm2-135m:q4_0 \\
  #     --prompts 40 --max-tokens 6 --cpu-mem 64M --threads 1 --offload-dir /tmp/sr --json /tmp/sr/r.json
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from run_ladder import GIB, log, time_v  # noqa: E402


def generate(args, output: Path, report: Path, wait: bool = True):
    cmd = ["/usr/bin/time", "-v", REPO / "build/offgen", "generate", "--model", args.model,
           "--policy", "auto", "--cpu-mem", args.cpu_mem, "--threads", args.threads,
           "--offload-dir", args.offload_dir, "--input", args.dir / "in.jsonl", "--output", output,
           "--report", report]
    if args.percent:
        cmd += ["--percent", *args.percent]
    if args.block:
        cmd += ["--batch-size", args.block, "--num-gpu-batches", 1]
    cmd = [str(c) for c in cmd]
    log("$ " + " ".join(cmd))
    err = open(output.with_suffix(".err"), "a")
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    if wait:
        p.wait()
    return p


def records(path: Path) -> list[dict]:
    return [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--cpu-mem", default="16G")
    ap.add_argument("--percent", nargs=6, help="placement the planner keeps (e.g. 0 0 100 0 100 0)")
    ap.add_argument("--block", type=int, default=0,
                    help="prompts per block (default: the planner's choice, which may be the whole job)")
    ap.add_argument("--vary-tokens", action="store_true",
                    help="max_tokens from half of --max-tokens up to it, so records land all through a block")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--offload-dir", required=True)
    ap.add_argument("--stop-after", type=int, default=0,
                    help="records written before the stop (default: the first block's)")
    ap.add_argument("--delay", type=float, default=-1,
                    help="seconds after that before SIGTERM (default: half the clean run's block time)")
    ap.add_argument("--prompt-format", default="Item {i}: write one line about the number {n}.",
                    help="each prompt's text; {i} is its index, {n} = 7i mod 1000 (a short one, e.g. "
                         "'#{i}', keeps prefill small on a dummy model, whose vocabulary splits text finely)")
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    args.dir = Path(args.offload_dir)
    args.dir.mkdir(parents=True, exist_ok=True)
    half = max(1, args.max_tokens // 2)
    vary = lambda i: half + i % (args.max_tokens - half + 1)  # noqa: E731
    with open(args.dir / "in.jsonl", "w") as f:
        for i in range(args.prompts):
            f.write(json.dumps({"id": f"p{i}", "prompt": args.prompt_format.format(i=i, n=i * 7 % 1000),
                                "max_tokens": vary(i) if args.vary_tokens else args.max_tokens}) + "\n")
    clean, stopped = args.dir / "clean.jsonl", args.dir / "stopped.jsonl"
    for p in (clean, stopped):
        p.unlink(missing_ok=True)
        p.with_suffix(".err").unlink(missing_ok=True)
    t0 = time.time()
    generate(args, clean, args.dir / "clean_report.json")
    clean_s = time.time() - t0
    rep = json.loads((args.dir / "clean_report.json").read_text())
    block = rep["batch_size"]
    blocks = -(-args.prompts // block)
    stop_after = args.stop_after or min(block, args.prompts - 1)
    delay = args.delay if args.delay >= 0 else clean_s / blocks / 2

    p = generate(args, stopped, args.dir / "stopped_report.json", wait=False)
    while p.poll() is None and len(records(stopped)) < stop_after:
        time.sleep(0.2)
    time.sleep(delay)
    if p.poll() is None:  # offgen, the child of /usr/bin/time (which passes no signal on)
        children = Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()
        for child in children:
            os.kill(int(child), signal.SIGTERM)
    p.wait()
    stop = json.loads((args.dir / "stopped_report.json").read_text())
    written = len(records(stopped))
    generate(args, stopped, args.dir / "resumed_report.json")
    clean_r = {r["id"]: r for r in records(clean)}
    got = records(stopped)
    same = (len(got) == len({r["id"] for r in got}) == len(clean_r) == args.prompts
            and all(clean_r[r["id"]] == r for r in got))
    plan = rep.get("plan") or {}
    result = {
        "model": args.model, "prompts": args.prompts, "prompt_format": args.prompt_format,
        "prefill_tokens": rep["tokens"]["prefill"], "max_tokens": args.max_tokens, "vary_tokens": args.vary_tokens, "cpu_mem": args.cpu_mem,
        "block": block, "blocks": blocks, "policy": plan.get("policy_toml"),
        "clean": {"seconds": clean_s, "total_tok_s": rep["total_throughput"],
                  "predicted_total_tok_s": plan.get("predicted_total_throughput"),
                  "bound_total_tok_s": (plan.get("roofline") or {}).get("bound_total_throughput"),
                  "bound_fraction": plan.get("bound_fraction"),
                  "binding": (plan.get("roofline") or {}).get("binding"),
                  "max_rss_gib": (time_v(clean.with_suffix(".err").read_text())["max_rss_bytes"] or 0) / GIB,
                  "disk_read_bytes_per_token": rep["io_bytes"]["disk_read"] / max(1, rep["tokens"]["completion"])},
        "stop": {"after_records": stop_after, "delay_s": delay, "interrupted": stop["interrupted"],
                 "interrupted_by": stop.get("interrupted_by"), "records_written": written,
                 "records_past_whole_blocks": written - written // block * block,
                 "unfinished": stop["requests"]["unfinished"],
                 "inside_a_block": stop["interrupted"] and stop["requests"]["unfinished"] > 0},
        "resumed_equals_clean": same,
    }
    args.json.write_text(json.dumps(result, indent=1))
    log(json.dumps(result, indent=1))
    sys.exit(0 if same and result["stop"]["inside_a_block"] else 1)


if __name__ == "__main__":
    main()
