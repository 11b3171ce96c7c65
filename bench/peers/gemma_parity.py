#!/usr/bin/env python3
"""offgen against llama.cpp on the same GGUF (issue 18's acceptance on Gemma 3 270M).

1. Next-token logits after each prompt of gemma_parity/prompts.txt: llama.cpp tokenises the
   prompt (with BOS), decodes it and gives its logits (gemma_parity/llama_logits.cpp, compiled
   here against libllama from the llama-cpp-python sdist build that run_peers.py makes); offgen
   gets the same token ids (bench_offgen_logits, Engine with on_logits). Reported: max |dlogit|
   per prompt, top-1 agreement, and how many greedy continuations of --steps tokens are
   identical (each system argmaxes its own logits, one decode step per token) — on the
   quantised file (offgen's native formats against llama.cpp's defaults and against llama.cpp
   with an fp32 K/V cache and no flash attention, and llama.cpp's two settings against each
   other: the noise floor of quantised activations), and on the same weights dequantised to an
   F32 GGUF by llama-quantize (both in fp32); and each system's native run against its own fp32
   run (KL divergence of the next-token distributions: the cost of its integer path).
   With --chat, the prompts are a JSONL file of {"id", "prompt"} rows (tools/demo_prompts.jsonl)
   rendered as one user message with the GGUF's own chat template (jinja2, add_generation_prompt;
   what `offgen generate --chat` renders), special tokens parsed; all continuations greedy.
   With --hf-reference, Hugging Face transformers loads the same GGUF (dequantised to fp32 by its
   gguf integration, eager attention) and gives its next-token logits and greedy continuation on
   the same ids: the reference both systems' quantised runs are compared to (KL divergence).
2. Perplexity on a Debian text: `llama-perplexity -c N` chunk 1 (it scores tokens N/2+1 .. N-1 of
   the chunk) against `offgen eval ppl --tokens N --prefix N/2+1` (the same tokens, the full cache).

Dev-time only; the llama.cpp build and sources stay in ~/.cache/offgen/peers.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import run_peers  # noqa: E402  (llama_build: the cached llama.cpp build)


def sh(cmd, **kw) -> subprocess.CompletedProcess:
    cmd = [str(c) for c in cmd]
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return r


def gguf_string(model: str, key: str) -> str:
    import gguf  # dev venv

    f = gguf.GGUFReader(model).fields[key]
    return bytes(f.parts[f.data[0]]).decode()


def gguf_int(model: str, key: str) -> int:
    import gguf  # dev venv

    f = gguf.GGUFReader(model).fields[key]
    return int(f.parts[f.data[0]][0])


def chat_prompts(model: str, jsonl: str, work: Path):
    """The JSONL prompts rendered with the GGUF's chat template, and a file of them, escaped one
    per line for llama_logits' "special" mode."""
    import jinja2  # dev venv (transformers' dependency)

    tmpl = jinja2.Environment().from_string(gguf_string(model, "tokenizer.chat_template"))
    rows = [json.loads(l) for l in Path(jsonl).read_text().splitlines() if l.strip()]
    texts = [tmpl.render(messages=[{"role": "user", "content": r["prompt"]}],
                         add_generation_prompt=True) for r in rows]
    out = work / "chat_prompts.txt"
    out.write_text("".join(t.replace("\\", "\\\\").replace("\n", "\\n") + "\n" for t in texts))
    return [r.get("id", r["prompt"]) for r in rows], out


def detokenizer(model: str):
    """ids -> text for byte-level BPE vocabularies (GPT-2 byte map); other vocabularies: the
    token strings joined."""
    import gguf  # dev venv

    r = gguf.GGUFReader(model)
    f = r.fields["tokenizer.ggml.tokens"]
    toks = [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_of = {chr(c): b for b, c in zip(bs, cs)}

    def detok(ids):
        s = "".join(toks[i] for i in ids)
        if all(ch in byte_of for ch in s if not ch.isspace()):
            return bytes(byte_of.get(ch, 32) for ch in s).decode("utf-8", "replace")
        return s

    return detok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(Path.home() / ".cache/offgen/models/gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--prompts", default=str(HERE / "gemma_parity/prompts.txt"))
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--chat", action="store_true",
                    help="--prompts is a JSONL of {id, prompt}, rendered with the model's chat template")
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--ctx", default="1024,2048", help="perplexity contexts (llama-perplexity -c), comma-separated")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--offgen-bin", default=str(REPO / "build"))
    ap.add_argument("--kv-dtype", default="f32", help="offgen's KV cache storage (default f32)")
    ap.add_argument("--skip-ppl", action="store_true")
    ap.add_argument("--hf-reference", action="store_true",
                    help="also compare both systems against transformers loading the same GGUF")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--llama-version", default=None)
    ap.add_argument("--llama-rebuild", action="store_true")
    ap.add_argument("--llama-no-amx", action=argparse.BooleanOptionalAction, default=True,
                    help="the llama.cpp build without AMX kernels (run_peers.py's; default on: "
                         "the -march=native build's AMX matmul crashes on this machine)")
    args = ap.parse_args()

    info = run_peers.llama_build(args)
    build = Path(info["exe"]).parent.parent
    src = run_peers.CACHE / info["sdist"] / "vendor/llama.cpp"
    work = Path(tempfile.mkdtemp(prefix="offgen-gemma-parity-"))
    exe = work / "llama_logits"
    sh(["g++", "-O2", "-std=c++17", f"-I{src}/include", f"-I{src}/ggml/include",
        HERE / "gemma_parity/llama_logits.cpp", f"-L{build}/bin", "-lllama", "-lggml", "-lggml-base",
        f"-Wl,-rpath,{build}/bin", "-o", exe])
    prompts_file = args.prompts
    if args.chat:
        prompts, prompts_file = chat_prompts(args.model, args.prompts, work)
    else:
        prompts = [l for l in Path(args.prompts).read_text().splitlines() if l]
    ids = work / "ids.txt"

    def llama(model: str, mode: str, tag: str):
        logits = work / f"llama-{tag}.f32"
        r = sh([exe, model, prompts_file, ids, logits, args.steps, args.threads, mode]
               + (["special"] if args.chat else []))
        return (np.fromfile(logits, dtype=np.float32).reshape(len(prompts), -1),
                [list(map(int, l.split())) for l in r.stdout.splitlines()])

    def offgen(model: str, dtype: str, tag: str):
        logits = work / f"offgen-{tag}.f32"
        r = sh([Path(args.offgen_bin) / "bench/bench_offgen_logits", "--model", model, "--ids", ids,
                "--logits", logits, "--steps", args.steps, "--threads", args.threads,
                "--weight-dtype", dtype, "--kv-dtype", args.kv_dtype])
        return (np.fromfile(logits, dtype=np.float32).reshape(len(prompts), -1),
                [list(map(int, l.split())) for l in r.stdout.splitlines()])

    detok = detokenizer(args.model)
    eos = gguf_int(args.model, "tokenizer.ggml.eos_token_id")

    def hf_reference():
        """transformers on the same GGUF (dequantised, fp32): logits after each prompt's ids and
        a greedy continuation of --steps tokens (no EOS stop), as llama() and offgen() return."""
        import torch
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(args.threads)
        m = AutoModelForCausalLM.from_pretrained(str(Path(args.model).parent), gguf_file=Path(args.model).name,
                                                 dtype=torch.float32, attn_implementation="eager")
        m.eval()
        rows, greedy = [], []
        for line in Path(ids).read_text().splitlines():
            x = torch.tensor([list(map(int, line.split()))])
            with torch.no_grad():
                out = m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=args.steps,
                                 do_sample=False, output_logits=True, return_dict_in_generate=True,
                                 eos_token_id=None, pad_token_id=0, min_new_tokens=args.steps)
            rows.append(out.logits[0][0].float().numpy())
            greedy.append(out.sequences[0, x.shape[1]:].tolist())
        return np.stack(rows), greedy

    def to_eos(g):  # a greedy continuation as a generate call gives it: up to its first EOS
        return g[:g.index(eos) + 1] if eos in g else g

    def compare(x, y) -> dict:
        (a, ga), (b, gb) = x, y
        rows = []
        for i, p in enumerate(prompts):
            d = np.abs(a[i] - b[i])
            same = 0
            while same < args.steps and ga[i][same] == gb[i][same]:
                same += 1
            la = a[i] - a[i].max() - np.log(np.exp(a[i] - a[i].max()).sum())
            lb = b[i] - b[i].max() - np.log(np.exp(b[i] - b[i].max()).sum())
            rows.append({"prompt": p, "max_abs_dlogit": float(d.max()), "mean_abs_dlogit": float(d.mean()),
                         "kld": float(np.sum(np.exp(la) * (la - lb))),
                         "top1_same": bool(a[i].argmax() == b[i].argmax()), "greedy_same_prefix": same,
                         "text_same_to_eos": to_eos(ga[i]) == to_eos(gb[i])})
            if same < args.steps:
                rows[-1]["common"] = detok(ga[i][:same])
                rows[-1]["first"], rows[-1]["second"] = detok(ga[i][same:]), detok(gb[i][same:])
        return {"max_abs_dlogit": max(r["max_abs_dlogit"] for r in rows),
                "mean_abs_dlogit": float(np.mean([r["mean_abs_dlogit"] for r in rows])),
                "mean_kld": float(np.mean([r["kld"] for r in rows])),
                "kld_stderr": float(np.std([r["kld"] for r in rows]) / np.sqrt(len(rows))),
                "top1_agree": sum(r["top1_same"] for r in rows),
                "greedy_identical": sum(r["greedy_same_prefix"] == args.steps for r in rows),
                "greedy_identical_32": sum(r["greedy_same_prefix"] >= min(32, args.steps) for r in rows),
                "text_identical_to_eos": sum(r["text_same_to_eos"] for r in rows),
                "n": len(rows), "prompts": rows}

    # The quantised file as each system runs it: llama.cpp's defaults (f16 K/V, flash attention)
    # and its exact settings (fp32 K/V, no flash attention), offgen's native block formats.
    llama_default = llama(args.model, "default", "default")
    llama_exact = llama(args.model, "exact", "exact")
    off_native = offgen(args.model, "native", "native")
    # The same weights dequantised: llama-quantize --allow-requantize ... F32 writes them as fp32,
    # which both run in fp32 (llama.cpp then quantises no activations).
    f32 = work / "model-f32.gguf"
    sh([build / "bin/llama-quantize", "--allow-requantize", args.model, f32, "F32", args.threads])
    llama_f32 = llama(str(f32), "exact", "f32")
    off_f32 = offgen(str(f32), "f32", "f32")
    f32.unlink()
    out = {"date": dt.datetime.now().astimezone().isoformat(timespec="seconds"), "model": args.model,
           "llama_cpp": {**{k: info[k] for k in ("sdist", "commit")}, "build": build.name},
           "steps": args.steps,
           "quantized_offgen_native_vs_llama_default": compare(llama_default, off_native),
           "quantized_offgen_native_vs_llama_exact": compare(llama_exact, off_native),
           "quantized_llama_default_vs_llama_exact": compare(llama_default, llama_exact),
           "dequantized_f32_offgen_vs_llama": compare(llama_f32, off_f32),
           # Each system's own cost of its integer path: native against its fp32 product of the
           # same weights (kld: KL(fp32 || native) of the next-token distributions).
           "offgen_f32_vs_offgen_native": compare(off_f32, off_native),
           "llama_f32_vs_llama_exact": compare(llama_f32, llama_exact),
           "llama_f32_vs_llama_default": compare(llama_f32, llama_default)}
    if args.hf_reference:
        hf = hf_reference()
        out["hf_gguf_vs_offgen_native"] = compare(hf, off_native)
        out["hf_gguf_vs_llama_default"] = compare(hf, llama_default)
        out["hf_gguf_vs_llama_exact"] = compare(hf, llama_exact)
        out["hf_gguf_vs_offgen_f32"] = compare(hf, off_f32)
    out["greedy_texts"] = {tag: [detok(to_eos(g)) for g in run[1]] for tag, run in
                           [("llama_default", llama_default), ("llama_exact", llama_exact),
                            ("offgen_native", off_native), ("llama_f32", llama_f32),
                            ("offgen_f32", off_f32)]}
    if not args.skip_ppl:
        ppl_exe = build / "bin/llama-perplexity"
        if not ppl_exe.exists():
            sh(["cmake", "--build", build, "-j2", "--target", "llama-perplexity"])
        out["ppl"] = []
        for ctx in map(int, args.ctx.split(",")):
            r = sh([ppl_exe, "-m", args.model, "-f", args.text, "-c", ctx, "--chunks", 1,
                    "-t", args.threads, "--no-repack"])
            m = re.search(r"\[1\]([0-9.]+)", r.stdout + r.stderr)
            if m is None:
                raise RuntimeError(f"llama-perplexity printed no chunk-1 estimate for {args.model} "
                                   f"at -c {ctx}:\n{(r.stdout + r.stderr)[-1500:]}")
            jp = work / "ppl.json"
            sh([Path(args.offgen_bin) / "offgen", "eval", "ppl", "--model", args.model,
                "--weight-dtype", "native", "--text", args.text, "--tokens", ctx,
                "--prefix", ctx // 2 + 1, "--kv-policy", "full", "--kv-budget", "1",
                "--kv-dtype", args.kv_dtype,
                "--threads", args.threads, "--json", jp])
            full = [x for x in json.loads(jp.read_text())
                    if x["policy"] == "full" and x["metric"] == "ppl" and x["text"] == "all"][0]
            row = {"text": args.text, "ctx": ctx, "llama_perplexity_chunk1": float(m.group(1)),
                   "offgen": full["value"], "offgen_scored_tokens": full["tokens"]}
            row["rel_diff"] = row["offgen"] / row["llama_perplexity_chunk1"] - 1
            out["ppl"].append(row)
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
