#!/usr/bin/env python3
"""Perplexity per GGUF block format: offgen (native weights) against llama.cpp's llama-perplexity
on the same tokens.

llama-perplexity -c C --chunks 1 scores the tokens [C/2 + 1, C) of the text's first C tokens, each
predicted from all before it; `offgen eval ppl --tokens C --prefix C/2+1` scores the same tokens
(prefix prefilled in one chunk, then teacher-forced). Models: SmolLM2 requantised from the default
Q4_1 file with `llama-quantize --allow-requantize` into the formats given (cached next to the
model). Dev-time only; llama.cpp comes from bench/peers' build cache (run_peers.py builds it).

  /opt/offgen-dev/bin/python bench/peers/ppl_formats.py --llama-bin ~/.cache/offgen/peers/build-0.3.36-noamx/bin
"""
import argparse
import datetime as dt
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODELS = Path.home() / ".cache/offgen/models"
BENCH_MODELS = Path.home() / ".cache/offgen/bench"


def run(cmd):
    print("$", " ".join(map(str, cmd)), flush=True)
    r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} rc={r.returncode}: {(r.stdout + r.stderr)[-2000:]}")
    return r.stdout + "\n" + r.stderr


def model_for(fmt: str, llama_bin: Path) -> Path:
    src = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if fmt == "Q4_1":
        return src
    out = BENCH_MODELS / f"SmolLM2-135M-Instruct.{fmt}.gguf"
    if not out.exists():
        BENCH_MODELS.mkdir(parents=True, exist_ok=True)
        run([llama_bin / "llama-quantize", "--allow-requantize", src, out, fmt, "2"])
    return out


def offgen_ppl(model: Path, text: Path, ctx: int, threads: int) -> float:
    with tempfile.TemporaryDirectory() as td:
        js = Path(td) / "ppl.json"
        run([REPO / "build/offgen", "eval", "ppl", "--model", model, "--weight-dtype", "native",
             "--text", text, "--tokens", ctx, "--prefix", ctx // 2 + 1, "--kv-policy", "full",
             "--threads", threads, "--json", js])
        rows = json.loads(js.read_text())
    return next(r["value"] for r in rows
                if r["metric"] == "ppl" and r["policy"] == "full" and r["text"] == "all")


def llama_ppl(llama_bin: Path, model: Path, text: Path, ctx: int, threads: int) -> float:
    out = run([llama_bin / "llama-perplexity", "-m", model, "-f", text, "-c", ctx, "-b", ctx,
               "--chunks", 1, "-t", threads])
    m = re.search(r"Final estimate: PPL = ([0-9.]+)", out)
    if not m:
        raise RuntimeError("no 'Final estimate' in llama-perplexity output:\n" + out[-2000:])
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-bin", type=Path, required=True, help="llama.cpp's bin/ directory")
    ap.add_argument("--formats", default="Q4_0,Q4_K_M,Q6_K,Q8_0")
    ap.add_argument("--text", type=Path, default=Path("/usr/share/common-licenses/GPL-3"))
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    for fmt in args.formats.split(","):
        model = model_for(fmt, args.llama_bin)
        o = offgen_ppl(model, args.text, args.ctx, args.threads)
        lc = llama_ppl(args.llama_bin, model, args.text, args.ctx, args.threads)
        rows.append({"format": fmt, "offgen": o, "llama_cpp": lc, "rel_diff": o / lc - 1})
        print(f"{fmt:8s} offgen {o:.4f}  llama.cpp {lc:.4f}  diff {100 * (o / lc - 1):+.3f}%",
              flush=True)
    print(f"\n{dt.date.today()} text {args.text.name}, scored tokens [{args.ctx // 2 + 1}, {args.ctx})")
    print("| format | offgen ppl | llama-perplexity | offgen / llama.cpp - 1 |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['format']} | {r['offgen']:.4f} | {r['llama_cpp']:.4f} | {100 * r['rel_diff']:+.3f}% |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
