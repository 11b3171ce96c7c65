#!/usr/bin/env python3
"""Perplexity per GGUF format on several texts: offgen native and fp32 weights against llama.cpp's
native and fp32 runs of the same weights, with llama.cpp's own paired error bar.

Splits the integer-path cost (native against the exact fp32 product of the same weights) from
noise. Per text and format: offgen `eval ppl --weight-dtype native` and `--weight-dtype f32` (all
texts in one run each, same tokens as ppl_formats.py: the second half of the first --ctx tokens);
llama-perplexity on the native file and on the same file dequantised to F32 by `llama-quantize
--allow-requantize ... F32` (cached next to the native file); and llama-perplexity's
--kl-divergence of native against F32, whose "Mean ln(PPL(Q)/PPL(base))" comes with the standard
error of the per-token mean: the noise scale of any such cost on one text. Pooled values are the
geometric means over the texts (each scores the same number of tokens). Dev-time only.

  /opt/offgen-dev/bin/python bench/peers/ppl_texts.py --llama-bin ~/.cache/offgen/peers/build-0.3.36-noamx/bin
"""
import argparse
import json
import math
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ppl_formats import run  # noqa: E402  (echoes the command, raises with its output on failure)

REPO = Path(__file__).resolve().parents[2]
BENCH_MODELS = Path.home() / ".cache/offgen/bench"
LICENSES = Path("/usr/share/common-licenses")
DEFAULT_TEXTS = ",".join(str(LICENSES / t) for t in ["GPL-3", "LGPL-2.1", "MPL-1.1", "GFDL-1.3",
                                                      "Apache-2.0"])


def offgen_ppl(model, texts, dtype, ctx, threads):
    with tempfile.TemporaryDirectory() as td:
        js = Path(td) / "ppl.json"
        cmd = [REPO / "build/offgen", "eval", "ppl", "--model", model, "--weight-dtype", dtype,
               "--tokens", ctx, "--prefix", ctx // 2 + 1, "--kv-policy", "full", "--threads",
               threads, "--json", js]
        for t in texts:
            cmd += ["--text", t]
        run(cmd)
        rows = json.loads(js.read_text())
    return {r["text"]: r["value"] for r in rows if r["metric"] == "ppl" and r["policy"] == "full"}


def llama(llama_bin, model, text, ctx, threads, extra=()):
    return run([llama_bin / "llama-perplexity", "-m", model, "-f", text, "-c", ctx, "-b", ctx,
                "--chunks", 1, "-t", threads, *extra])


def llama_ppl(out):
    m = re.search(r"Final estimate: PPL = ([0-9.]+)", out)
    if not m:
        raise RuntimeError("no 'Final estimate' in llama-perplexity output:\n" + out[-2000:])
    return float(m.group(1))


def llama_kld(out):
    m = re.search(r"Mean ln\(PPL\(Q\)/PPL\(base\)\)\s*:\s*([-0-9.]+)\s*±\s*([0-9.]+)", out)
    k = re.search(r"Mean\s+KLD:\s*([-0-9.]+)", out)
    if not m or not k:
        raise RuntimeError("no KL-divergence statistics in llama-perplexity output:\n" + out[-2000:])
    return float(m.group(1)), float(m.group(2)), float(k.group(1))


def geo(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-bin", type=Path, required=True, help="llama.cpp's bin/ directory")
    ap.add_argument("--formats", default="Q6_K,Q8_0")
    ap.add_argument("--texts", default=DEFAULT_TEXTS, help="comma-separated text files")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    texts = [Path(t) for t in args.texts.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as td:
        for fmt in args.formats.split(","):
            model = BENCH_MODELS / f"SmolLM2-135M-Instruct.{fmt}.gguf"
            if not model.exists():
                raise SystemExit(f"{model} missing: run ppl_formats.py first (it requantises)")
            f32 = BENCH_MODELS / f"SmolLM2-135M-Instruct.{fmt}.F32.gguf"
            if not f32.exists():
                run([args.llama_bin / "llama-quantize", "--allow-requantize", model, f32, "F32",
                     "2"])
            on = offgen_ppl(model, texts, "native", args.ctx, args.threads)
            of = offgen_ppl(model, texts, "f32", args.ctx, args.threads)
            for t in texts:
                # llama-perplexity wants 2 * ctx tokens even for one chunk; the text twice over
                # has the same first ctx tokens (offgen reads the text once and checks it holds
                # ctx tokens).
                lt = Path(td) / f"{t.name}.twice"
                lt.write_text(t.read_text() + "\n\n" + t.read_text())
                base = Path(td) / f"{fmt}.{t.name}.kld"
                lf = llama_ppl(llama(args.llama_bin, f32, lt, args.ctx, args.threads,
                                     ["--kl-divergence-base", base]))
                out = llama(args.llama_bin, model, lt, args.ctx, args.threads,
                            ["--kl-divergence-base", base, "--kl-divergence"])
                ln_ratio, ln_err, kld = llama_kld(out)
                ln = llama_ppl(llama(args.llama_bin, model, lt, args.ctx, args.threads))
                rows.append({"format": fmt, "text": t.name, "offgen_native": on[t.name],
                             "offgen_f32": of[t.name], "llama_native": ln, "llama_f32": lf,
                             "llama_ln_ratio": ln_ratio, "llama_ln_ratio_err": ln_err,
                             "llama_kld": kld})
                print(json.dumps(rows[-1]), flush=True)
    print(f"\ntokens [{args.ctx // 2 + 1}, {args.ctx}) of each text; pooled = geometric mean")
    print("| format | text | offgen native | offgen f32 | llama native | llama f32 | "
          "offgen cost | llama cost (± s.e.) | offgen / llama − 1 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for fmt in args.formats.split(","):
        fr = [r for r in rows if r["format"] == fmt]
        pooled = {k: geo([r[k] for r in fr]) for k in
                  ["offgen_native", "offgen_f32", "llama_native", "llama_f32"]}
        err = math.sqrt(sum(r["llama_ln_ratio_err"] ** 2 for r in fr)) / len(fr)
        for r, name, e in [(r, r["text"], r["llama_ln_ratio_err"]) for r in fr] + [
                (pooled, "pooled", err)]:
            print(f"| {fmt} | {name} | {r['offgen_native']:.4f} | {r['offgen_f32']:.4f} | "
                  f"{r['llama_native']:.4f} | {r['llama_f32']:.4f} | "
                  f"{100 * (r['offgen_native'] / r['offgen_f32'] - 1):+.2f}% | "
                  f"{100 * (r['llama_native'] / r['llama_f32'] - 1):+.2f}% (± {100 * e:.2f}%) | "
                  f"{100 * (r['offgen_native'] / r['llama_native'] - 1):+.2f}% |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
