#!/usr/bin/env python3
"""Does llama.cpp load what `offgen convert` writes, and give the same greedy text? (issue 30.6)

For each case (a model and a --weight-dtype):
1. `offgen convert --model M --out X.gguf --weight-dtype T` writes the file;
2. llama.cpp loads X.gguf and gives, for each prompt of --prompts, its token ids (its own
   tokeniser, BOS as the file says), the next-token logits and a greedy continuation of --steps
   tokens (gemma_parity/llama_logits.cpp against libllama of the llama-cpp-python sdist build that
   run_peers.py makes; its exact settings: fp32 K/V cache, no flash attention);
3. offgen runs the same ids on X.gguf (--weight-dtype native) and on M quantised at load
   (--weight-dtype T), through bench_offgen_logits.
Reported per case: whether llama.cpp loaded the file, top-1 agreement and identical greedy
continuations llama.cpp vs offgen on the file, and offgen's file vs offgen's at-load path (these
must be identical: one rule table makes both). Quantised activations differ between the two
systems, so on quantised files llama.cpp and offgen may part after some tokens; on f32 files they
should agree.

The default cases: SmolLM2-135M (tools/get-model) re-quantised to q4_k_m, q8_0 and f32; the tiny
Hugging Face checkpoints of tests/data/hf_models (Llama, Mistral, Qwen2, Qwen3, Gemma 3, Phi-3,
Phi-3 LongRoPE) at f32 and q8_0; dummy:smollm2-135m at q4_k_m. --case MODEL:DTYPE (repeatable)
replaces them.

Dev-time only: llama.cpp is built into ~/.cache/offgen/peers by run_peers.py (minutes of both
cores when not cached); nothing here is part of the offgen build or CI.
Usage: python3 bench/peers/convert_llamacpp_check.py [--json out.json] [--case M:T ...]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import run_peers  # noqa: E402  (llama_build: the cached llama.cpp build)

HF = REPO / "tests/data/hf_models"
DEFAULT_CASES = (
    [f"{run_peers.DEFAULT_MODEL}:{t}" for t in ("q4_k_m", "q8_0", "f32")]
    + [f"{HF / n}:{t}" for n in ("llama", "mistral", "qwen2", "qwen3", "gemma3", "phi3", "phi3_longrope")
       for t in ("f32", "q8_0")]
    + ["dummy:smollm2-135m:q4_k_m"]
)
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time,", "1, 2, 3, 4,"]


def sh(cmd, check=True) -> subprocess.CompletedProcess:
    cmd = [str(c) for c in cmd]
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", action="append", help="MODEL:WEIGHT_DTYPE (repeatable; default: see --help)")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--offgen-bin", default=str(REPO / "build"))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--llama-version", default=None)
    ap.add_argument("--llama-rebuild", action="store_true")
    ap.add_argument("--llama-no-amx", action=argparse.BooleanOptionalAction, default=True,
                    help="the llama.cpp build without AMX kernels (run_peers.py's)")
    args = ap.parse_args()
    cases = args.case or DEFAULT_CASES

    info = run_peers.llama_build(args)
    build = Path(info["exe"]).parent.parent
    src = run_peers.CACHE / info["sdist"] / "vendor/llama.cpp"
    work = Path(tempfile.mkdtemp(prefix="offgen-convert-check-"))
    exe = work / "llama_logits"
    sh(["g++", "-O2", "-std=c++17", f"-I{src}/include", f"-I{src}/ggml/include",
        HERE / "gemma_parity/llama_logits.cpp", f"-L{build}/bin", "-lllama", "-lggml", "-lggml-base",
        f"-Wl,-rpath,{build}/bin", "-o", exe])
    prompts = work / "prompts.txt"
    prompts.write_text("".join(p + "\n" for p in PROMPTS))
    offgen = Path(args.offgen_bin) / "offgen"
    logits_bin = Path(args.offgen_bin) / "bench/bench_offgen_logits"

    def offgen_run(model: str, dtype: str, ids: Path, tag: str):
        out = work / f"offgen-{tag}.f32"
        r = sh([logits_bin, "--model", model, "--ids", ids, "--logits", out, "--steps", args.steps,
                "--threads", args.threads, "--weight-dtype", dtype])
        return (np.fromfile(out, dtype=np.float32).reshape(len(PROMPTS), -1),
                [list(map(int, l.split())) for l in r.stdout.splitlines()])

    def agree(x, y) -> dict:
        (a, ga), (b, gb) = x, y
        return {"top1_agree": int(sum(a[i].argmax() == b[i].argmax() for i in range(len(PROMPTS)))),
                "greedy_identical": int(sum(ga[i] == gb[i] for i in range(len(PROMPTS)))),
                "max_abs_dlogit": float(np.abs(a - b).max()), "n": len(PROMPTS)}

    results = []
    for case in cases:
        model, dtype = case.rsplit(":", 1)
        tag = f"{len(results)}"
        row = {"model": model, "weight_dtype": dtype}
        results.append(row)
        out = work / f"converted-{tag}.gguf"
        r = sh([offgen, "convert", "--model", model, "--out", out, "--weight-dtype", dtype,
                "--threads", args.threads], check=False)
        row["convert"] = (r.stdout + r.stderr).strip()[-400:]
        if r.returncode != 0:
            row["converted"] = False
            continue
        row["converted"] = True
        ids = work / f"ids-{tag}.txt"
        logits = work / f"llama-{tag}.f32"
        r = sh([exe, out, prompts, ids, logits, args.steps, args.threads, "exact"], check=False)
        row["llama_loaded"] = r.returncode == 0
        if r.returncode != 0:
            row["llama_error"] = r.stderr.strip()[-1500:]
            continue
        llama = (np.fromfile(logits, dtype=np.float32).reshape(len(PROMPTS), -1),
                 [list(map(int, l.split())) for l in r.stdout.splitlines()])
        on_file = offgen_run(str(out), "native", ids, f"file-{tag}")
        at_load = offgen_run(model, dtype, ids, f"load-{tag}")
        row["llama_vs_offgen_file"] = agree(llama, on_file)
        row["offgen_file_vs_at_load"] = agree(on_file, at_load)
        print(f"{case}: llama.cpp vs offgen on the file {row['llama_vs_offgen_file']}; offgen file "
              f"vs at load {row['offgen_file_vs_at_load']}", flush=True)
        out.unlink()

    doc = {"date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
           "command": " ".join(["python3", "bench/peers/convert_llamacpp_check.py"] + sys.argv[1:]),
           "llama_cpp": {k: info[k] for k in ("sdist", "commit") if k in info},
           "prompts": PROMPTS, "steps": args.steps, "cases": results}
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    bad = [r for r in results if not r.get("llama_loaded")
           or r["offgen_file_vs_at_load"]["greedy_identical"] != len(PROMPTS)]
    for r in bad:
        print(f"FAIL: {r['model']}:{r['weight_dtype']}: "
              f"{r.get('llama_error') or r.get('convert') or r.get('offgen_file_vs_at_load')}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
