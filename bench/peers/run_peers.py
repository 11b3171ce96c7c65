#!/usr/bin/env python3
"""Peer comparison: offgen vs llama.cpp (llama-batched-bench) vs Hugging Face transformers on CPU.

One run measures all three systems on the same model, prompt length, generation length, batch
sizes and thread count, interleaved batch size by batch size (offgen B, llama.cpp B, HF B, then the
next B) so that machine noise hits every system alike. All numbers use FlexGen's definitions:

    prefill tok/s = B*P / prefill_s
    decode  tok/s = B*(G-1) / decode_s
    total   tok/s = B*G / (prefill_s + decode_s)

See bench/peers/README.md for what each system runs and how its times are taken.
Dev-time only (Python from PyPI); never part of the runtime.
"""
from __future__ import annotations

import argparse
import datetime as dt
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("OFFGEN_PEERS_CACHE", Path.home() / ".cache/offgen/peers"))
DEFAULT_MODEL = Path.home() / ".cache/offgen/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def log(msg: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def run(cmd, **kw) -> subprocess.CompletedProcess:
    log("$ " + " ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], text=True, capture_output=True, **kw)


# --------------------------------------------------------------------------------------------
# Prompt token ids: bit-exact replica of bench_generate's std::mt19937(1234) +
# std::uniform_int_distribution<int32_t>(100, vocab-1) as implemented by libstdc++ (GCC >= 11:
# Lemire's nearly-divisionless method on a 64-bit product for a 32-bit engine).
# --------------------------------------------------------------------------------------------
class MT19937:
    def __init__(self, seed: int):
        mt = [seed & 0xFFFFFFFF]
        for i in range(1, 624):
            mt.append((1812433253 * (mt[-1] ^ (mt[-1] >> 30)) + i) & 0xFFFFFFFF)
        self.mt, self.idx = mt, 624

    def _twist(self) -> None:
        mt = self.mt
        for i in range(624):
            y = (mt[i] & 0x80000000) | (mt[(i + 1) % 624] & 0x7FFFFFFF)
            v = mt[(i + 397) % 624] ^ (y >> 1)
            mt[i] = v ^ 0x9908B0DF if y & 1 else v
        self.idx = 0

    def __call__(self) -> int:
        if self.idx >= 624:
            self._twist()
        y = self.mt[self.idx]
        self.idx += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        return y ^ (y >> 18)


def uniform_int(g: MT19937, a: int, b: int) -> int:
    r = b - a + 1
    p = g() * r
    if (p & 0xFFFFFFFF) < r:
        threshold = ((1 << 32) - r) % r
        while (p & 0xFFFFFFFF) < threshold:
            p = g() * r
    return a + (p >> 32)


def offgen_prompt_ids(batch: int, prompt_len: int, vocab: int) -> list[list[int]]:
    """The prompts `bench_generate --batch-sizes <batch>` (a single batch size) feeds the engine."""
    g = MT19937(1234)
    return [[uniform_int(g, 100, vocab - 1) for _ in range(prompt_len)] for _ in range(batch)]


def gguf_vocab_size(model: Path) -> int:
    from gguf import GGUFReader

    r = GGUFReader(str(model))
    return len(r.fields["tokenizer.ggml.tokens"].data)


# --------------------------------------------------------------------------------------------
# offgen
# --------------------------------------------------------------------------------------------
def offgen_binary(args) -> Path:
    exe = REPO / "build/bench/bench_generate"
    if not exe.exists():
        log("bench_generate missing: building it")
        r = run(["cmake", "--build", REPO / "build", "-j2", "--target", "bench_generate"])
        if r.returncode != 0:
            raise RuntimeError("building bench_generate failed:\n" + r.stdout[-3000:] + r.stderr[-3000:])
    return exe


def run_offgen(exe: Path, args, batch: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="peers-offgen-") as td:
        out = Path(td) / "out.json"
        t0, c0 = time.time(), children_cpu()
        r = run([exe, "--model", args.model, "--batch-sizes", batch, "--prompt-len", args.prompt_len,
                 "--gen-len", args.gen_len, "--threads", args.threads, "--weight-dtype",
                 args.weight_dtype, "--json", out])
        wall, cpu = time.time() - t0, children_cpu() - c0
        if r.returncode != 0:
            raise RuntimeError(f"bench_generate rc={r.returncode}: {r.stderr.strip()[-2000:]}")
        row = json.loads(out.read_text())[0]
    return {"prefill_s": row["prefill_seconds"], "decode_s": row["decode_seconds"], "wall_s": wall,
            "cores": cpu / wall, "raw": row}


# --------------------------------------------------------------------------------------------
# llama.cpp (llama-batched-bench from the llama.cpp vendored in the llama-cpp-python sdist)
# --------------------------------------------------------------------------------------------
def llama_changelog_commit(src_root: Path) -> str:
    """The llama.cpp commit a llama-cpp-python release vendors, from its CHANGELOG."""
    text = (src_root / "CHANGELOG.md").read_text(errors="replace")
    ver = re.search(r"^Version:\s*(\S+)", (src_root / "PKG-INFO").read_text(), re.M).group(1)
    sec = re.search(rf"^## \[{re.escape(ver)}\](.*?)(?=^## \[)", text, re.M | re.S)
    m = re.search(r"llama\.cpp@([0-9a-f]{7,40})", sec.group(1) if sec else "")
    return m.group(1) if m else "unknown"


def llama_build(args) -> dict:
    """Find or build llama-batched-bench. Layout under CACHE: sdist/<name>.tar.gz, <name>/ (the
    unpacked sdist) and build-<version>/ (cmake build dir + build_info.json)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    suffix = "-noamx" if args.llama_no_amx else ""
    infos = sorted(CACHE.glob("build-*/build_info.json"), key=lambda p: p.stat().st_mtime)
    infos = [p for p in infos if p.parent.name.endswith("-noamx") == bool(suffix)]
    if args.llama_version:
        infos = [p for p in infos if p.parent.name == f"build-{args.llama_version}{suffix}"]
    infos = [p for p in infos if (p.parent / "bin/llama-batched-bench").exists()]
    if infos and not args.llama_rebuild:
        info = json.loads(infos[-1].read_text())
        info["cached"] = True
        return info
    spec = "llama-cpp-python" + (f"=={args.llama_version}" if args.llama_version else "")
    dl = CACHE / "sdist"
    dl.mkdir(exist_ok=True)
    r = run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-d", dl, spec])
    if r.returncode != 0:
        raise RuntimeError("pip download llama-cpp-python failed: " + r.stderr.strip()[-2000:])
    m = re.search(r"(llama_cpp_python-[0-9][^\s/]*?)\.tar\.gz", r.stdout + r.stderr)
    tarball = dl / (m.group(1) + ".tar.gz") if m else sorted(dl.glob("llama_cpp_python-*.tar.gz"))[-1]
    name = tarball.name[: -len(".tar.gz")]
    version = name.split("-", 1)[1]
    src = CACHE / name
    if not (src / "vendor/llama.cpp/CMakeLists.txt").exists():
        with tarfile.open(tarball) as tf:
            tf.extractall(CACHE)
    commit = llama_changelog_commit(src)
    build = CACHE / f"build-{version}{suffix}"
    t0 = time.time()
    # -march=native, or (--llama-no-amx) every AVX-512 extension this CPU has but AMX: llama.cpp's
    # AMX kernels stop with SIGILL/SIGSEGV on some machines that report AMX.
    isa = (["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
            "-DGGML_BMI2=ON", "-DGGML_AVX_VNNI=ON", "-DGGML_AVX512=ON", "-DGGML_AVX512_VBMI=ON",
            "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX512_BF16=ON", "-DGGML_AMX_TILE=OFF",
            "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]
           if suffix else ["-DGGML_NATIVE=ON"])
    cfg = ["cmake", "-S", src / "vendor/llama.cpp", "-B", build, "-DCMAKE_BUILD_TYPE=Release",
           *isa, "-DGGML_CUDA=OFF", "-DGGML_BLAS=OFF", "-DLLAMA_BUILD_TESTS=OFF",
           "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF",
           "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TOOLS=ON", f"-DLLAMA_BUILD_COMMIT={commit}"]
    for cmd in (cfg, ["cmake", "--build", build, "-j2", "--target", "llama-batched-bench",
                      "llama-perplexity", "llama-quantize"]):
        r = run(cmd)
        if r.returncode != 0:
            raise RuntimeError("llama.cpp build failed:\n" + r.stdout[-3000:] + r.stderr[-3000:])
    info = {"exe": str(build / "bin/llama-batched-bench"), "sdist": name, "commit": commit,
            "cmake_isa": " ".join(isa), "build_seconds": round(time.time() - t0, 1), "build_loadavg_after": loadavg(),
            "build_date": dt.datetime.now().astimezone().isoformat(timespec="seconds")}
    (build / "build_info.json").write_text(json.dumps(info, indent=2))
    info["cached"] = False
    return info


ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|" + r"\s*([\d.]+)\s*\|" * 6)


def run_llama(exe: str, args, batch: int, prefix: tuple = (),
              flags: tuple = ("-b", 2048, "-ub", 512)) -> dict:
    """`prefix`: a command the run goes through (e.g. /usr/bin/time -v); its output is in
    raw["output_tail"]. `flags`: batch and cache flags (default: its -b/-ub defaults)."""
    ntg = args.gen_len - 1  # see README: the prefill yields token 1, then G-1 decode steps
    ctx = batch * (args.prompt_len + args.gen_len)
    cmd = [*prefix, exe, "-m", args.model, "-c", ctx, *flags, "-npp", args.prompt_len,
           "-ntg", ntg, "-npl", batch, "-t", args.threads, "-tb", args.threads]
    t0, c0 = time.time(), children_cpu()
    r = run(cmd)
    wall, cpu = time.time() - t0, children_cpu() - c0
    out = r.stdout + "\n" + r.stderr
    if r.returncode != 0:
        raise RuntimeError(f"llama-batched-bench rc={r.returncode}: {out.strip()[-2000:]}")
    rows = [m for m in map(ROW.match, out.splitlines()) if m]
    if not rows:
        raise RuntimeError("no result row in llama-batched-bench output (context too small?):\n" + out[-2000:])
    pp, tg, b, n_kv, t_pp, s_pp, t_tg, s_tg, t, s = rows[-1].groups()
    assert int(pp) == args.prompt_len and int(tg) == ntg and int(b) == batch, rows[-1].group(0)
    hdr = next((l.strip() for l in out.splitlines() if "n_kv_max" in l and "flash_attn" in l), "")
    return {"prefill_s": float(t_pp), "decode_s": float(t_tg), "wall_s": wall, "cores": cpu / wall,
            "raw": {"table_row": rows[-1].group(0).strip(), "S_PP": float(s_pp), "S_TG": float(s_tg),
                    "S": float(s), "header": hdr, "cmd": " ".join(map(str, cmd)),
                    "output_tail": out[-3000:] if prefix else ""}}


# --------------------------------------------------------------------------------------------
# Hugging Face transformers (fp32, CPU)
# --------------------------------------------------------------------------------------------
class HF:
    def __init__(self, args):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(1)
        self.torch, self.version = torch, transformers.__version__
        t0 = time.time()
        m = Path(args.model)
        self.model = AutoModelForCausalLM.from_pretrained(
            str(m.parent), gguf_file=m.name, dtype=torch.float32).eval()
        self.load_s = time.time() - t0
        self.attn = self.model.config._attn_implementation
        with torch.inference_mode():  # warm-up (thread pool, kernel selection): a short generate
            self.model.generate(torch.arange(100, 100 + args.prompt_len)[None], max_new_tokens=3,
                                min_new_tokens=3, do_sample=False, pad_token_id=0)

    def run(self, args, ids: list[list[int]], do_generate: bool) -> dict:
        torch = self.torch
        x = torch.tensor(ids, dtype=torch.long)
        B, P = x.shape
        G = args.gen_len
        with torch.inference_mode():
            # Prefill: one forward of the whole prompt batch, filling a DynamicCache; only the last
            # position's logits are computed (as generate() does).
            c0, t0 = time.process_time(), time.perf_counter()
            out = self.model(input_ids=x, use_cache=True, logits_to_keep=1)
            tok = out.logits[:, -1].argmax(-1)
            t1 = time.perf_counter()
            cache, toks = out.past_key_values, [tok]
            # Decode: G-1 greedy single-token steps over the KV cache.
            for step in range(G - 1):
                pos = torch.tensor([P + step])
                out = self.model(input_ids=tok[:, None], past_key_values=cache, use_cache=True,
                                 cache_position=pos, position_ids=pos[None].expand(B, 1),
                                 logits_to_keep=1)
                tok = out.logits[:, -1].argmax(-1)
                toks.append(tok)
            t2, c2 = time.perf_counter(), time.process_time()
            del cache, out
            res = {"prefill_s": t1 - t0, "decode_s": t2 - t1, "wall_s": t2 - t0,
                   "cores": (c2 - c0) / (t2 - t0), "raw": {}}
            if do_generate:
                # Cross-check: the stock generate() call, timed as a whole.
                t3 = time.perf_counter()
                gen = self.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=G,
                                          min_new_tokens=G, do_sample=False, pad_token_id=0)
                t4 = time.perf_counter()
                manual = torch.stack(toks, 1)
                res["raw"] = {"generate_s": t4 - t3,
                              "generate_total_tps": B * G / (t4 - t3),
                              "generate_minus_prefill_decode_tps":
                                  B * (G - 1) / ((t4 - t3) - (t1 - t0)) if (t4 - t3) > (t1 - t0) else None,
                              "greedy_agreement": float((gen[:, P:] == manual).float().mean())}
        return res


# --------------------------------------------------------------------------------------------
def metrics(r: dict, B: int, P: int, G: int) -> dict:
    r["prefill_tps"] = B * P / r["prefill_s"]
    r["decode_tps"] = B * (G - 1) / r["decode_s"]
    r["total_tps"] = B * G / (r["prefill_s"] + r["decode_s"])
    return r


def fmt(v, nd=1, unit=""):
    return "—" if v is None else f"{v:,.{nd}f}{unit}"


def ratio(a, b):
    return None if a is None or b is None else a / b


def render(meta: dict, results: dict, batches, args) -> str:
    names = {"offgen": "offgen", "llamacpp": "llama.cpp", "hf": "transformers"}
    L = []
    L.append(f"# offgen peer comparison — {meta['date']}\n")
    L.append(f"Command: `{meta['command']}`\n")
    L.append("| | |\n|---|---|")
    for k in ("model", "workload", "offgen_commit", "offgen_binary", "llama_cpp", "llama_cpp_flags", "transformers",
              "torch", "cpu", "loadavg_before", "loadavg_after", "runtime"):
        L.append(f"| {k} | {meta.get(k, '—')} |")
    L.append("")
    L.append("Throughput in tokens/s (FlexGen definitions: prefill = B·P/prefill_s, decode = B·(G−1)/decode_s, "
             "total = B·G/(prefill_s+decode_s)). Ratio columns: offgen ÷ peer at the same batch "
             "(> 1 means offgen is faster). 'load avg' is the 1-minute load average when the measurement "
             "started; 'CPU cores used' is the measured process's CPU time ÷ wall time (offgen and llama.cpp: the "
             "whole process including model load and warm-up; transformers: the timed prefill + decode). "
             f"With --threads {args.threads}, a value well below {args.threads} means other processes took CPU from it "
             "and its row is not comparable.\n")
    L.append("| system | batch | prefill tok/s | decode tok/s | total tok/s | prefill s | decode s "
             "| offgen/llama.cpp total | offgen/llama.cpp decode | offgen/transformers total "
             "| offgen/transformers decode | load avg (1 min) | CPU cores used |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for B in batches:
        o = results.get(("offgen", B), {})
        for sys_ in args.systems:
            r = results.get((sys_, B), {})
            if "error" in r or "skipped" in r:
                L.append(f"| {names[sys_]} | {B} | {r.get('error') or r.get('skipped')} | | | | | | | | | | |")
                continue
            if sys_ == "offgen":
                l, h = results.get(("llamacpp", B), {}), results.get(("hf", B), {})
                rat = [ratio(o.get("total_tps"), l.get("total_tps")), ratio(o.get("decode_tps"), l.get("decode_tps")),
                       ratio(o.get("total_tps"), h.get("total_tps")), ratio(o.get("decode_tps"), h.get("decode_tps"))]
                rs = [fmt(x, 2, "×") for x in rat]
            else:
                rs = [""] * 4
            L.append(f"| {names[sys_]} | {B} | {fmt(r.get('prefill_tps'))} | {fmt(r.get('decode_tps'))} | "
                     f"{fmt(r.get('total_tps'))} | {fmt(r.get('prefill_s'), 2)} | {fmt(r.get('decode_s'), 2)} | "
                     + " | ".join(rs) + f" | {r.get('loadavg', '—').split()[0]} | {fmt(r.get('cores'), 2)} |")
    L.append("")
    L.append("Prefill ratios (offgen ÷ peer): " + ", ".join(
        f"B={B}: llama.cpp {fmt(ratio(results.get(('offgen', B), {}).get('prefill_tps'), results.get(('llamacpp', B), {}).get('prefill_tps')), 2, '×')}, "
        f"transformers {fmt(ratio(results.get(('offgen', B), {}).get('prefill_tps'), results.get(('hf', B), {}).get('prefill_tps')), 2, '×')}"
        for B in batches) + "\n")
    hf_notes = [f"B={B}: generate() {fmt(r['raw']['generate_s'], 2)} s → total {fmt(r['raw']['generate_total_tps'])} tok/s, "
                f"(generate − prefill) decode {fmt(r['raw']['generate_minus_prefill_decode_tps'])} tok/s, "
                f"greedy agreement with the manual loop {r['raw']['greedy_agreement']:.3f}"
                for B in batches for r in [results.get(("hf", B), {})] if r.get("raw", {}).get("generate_s")]
    if hf_notes:
        L.append("transformers cross-check (stock `generate(max_new_tokens=G, min_new_tokens=G, do_sample=False)` "
                 "timed whole):\n")
        L += [f"- {n}" for n in hf_notes]
        L.append("")
    lrows = [results.get(("llamacpp", B), {}).get("raw", {}) for B in batches]
    if any(lrows):
        L.append("llama-batched-bench raw rows (PP, TG, B, N_KV, T_PP s, S_PP t/s, T_TG s, S_TG t/s, T s, S t/s; "
                 "its S t/s counts prompt + generated tokens, so it is not the total above):\n")
        L.append("```")
        for r in lrows:
            if r.get("table_row"):
                L += [r["header"], r["table_row"]] if r.get("header") else [r["table_row"]]
        L.append("```")
    return "\n".join(L) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--batch-sizes", default="1,16,64")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--gen-len", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--weight-dtype", default="native",
                    help="offgen's weight storage (native: the file's block formats; f32, bf16, ...)")
    ap.add_argument("--systems", default="offgen,llamacpp,hf", help="subset of offgen,llamacpp,hf")
    ap.add_argument("--out", default=str(REPO / "bench/peers/last_run.md"))
    ap.add_argument("--json", default=None, help="raw results (default: --out with .json)")
    ap.add_argument("--llama-version", default=None, help="llama-cpp-python sdist version (default: newest cached, else latest on PyPI)")
    ap.add_argument("--llama-no-amx", action="store_true",
                    help="llama.cpp built with AVX-512 (VNNI, BF16) but without its AMX kernels")
    ap.add_argument("--llama-rebuild", action="store_true", help="download and build even if a build is cached")
    ap.add_argument("--hf-cap-seconds", type=float, default=300.0,
                    help="skip a transformers batch whose estimated time (linear in B from the previous batch) exceeds this")
    ap.add_argument("--hf-generate-check", default="auto", choices=["auto", "all", "none"],
                    help="also time stock generate() (auto: for batches whose manual run took < cap/2)")
    args = ap.parse_args()
    args.systems = [s for s in args.systems.split(",") if s]
    batches = [int(b) for b in args.batch_sizes.split(",")]
    args.model = str(Path(args.model).expanduser())
    if not Path(args.model).exists():
        print(f"run_peers: model not found: {args.model} (run tools/get-model)", file=sys.stderr)
        return 2
    t_start = time.time()
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], text=True,
                            capture_output=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"], text=True,
                           capture_output=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")), platform.processor())
    meta = {"date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": " ".join(["python3", "bench/peers/run_peers.py"] + sys.argv[1:]),
            "model": Path(args.model).name,
            "workload": f"prompt {args.prompt_len} (random token ids), gen {args.gen_len} (EOS ignored), "
                        f"batches {args.batch_sizes}, threads {args.threads}",
            "offgen_commit": commit + (" (+ uncommitted changes in tracked files)" if dirty else ""),
            "cpu": f"{cpu}, {os.cpu_count()} logical CPUs"}
    results: dict = {}
    exe = offgen_binary(args) if "offgen" in args.systems else None
    if exe:
        mtime = dt.datetime.fromtimestamp(exe.stat().st_mtime).astimezone().isoformat(timespec="seconds")
        meta["offgen_binary"] = f"build/bench/bench_generate, built {mtime} (not rebuilt by this script if present)"
    llama = None
    if "llamacpp" in args.systems:
        try:
            llama = llama_build(args)
            meta["llama_cpp"] = (f"commit {llama['commit']} (vendored in {llama['sdist']} sdist; build number n/a: "
                                 f"the sdist has no git history); build {'cached' if llama['cached'] else 'fresh'}, "
                                 f"took {llama['build_seconds']} s at {llama['build_date']}; "
                                 f"ISA flags: {llama.get('cmake_isa', '-DGGML_NATIVE=ON')}")
            meta["llama_cpp_flags"] = (f"llama-batched-bench -c B·(P+G) -b 2048 -ub 512 -npp {args.prompt_len} "
                                       f"-ntg {args.gen_len - 1} -npl B -t {args.threads} -tb {args.threads} "
                                       "(per-sequence prompts, no -pps; f16 KV; flash-attn auto)")
        except Exception as e:  # report precisely, keep the other systems running
            meta["llama_cpp"] = f"unavailable: {e}"
            for B in batches:
                results[("llamacpp", B)] = {"error": f"llama.cpp unavailable ({str(e).splitlines()[0][:120]})"}
    hf = None
    if "hf" in args.systems:
        try:
            vocab = gguf_vocab_size(Path(args.model))
            hf = HF(args)
            import torch
            meta["transformers"] = f"{hf.version} (fp32, attn={hf.attn}, GGUF dequantised at load in {hf.load_s:.1f} s)"
            meta["torch"] = f"{torch.__version__}, threads {torch.get_num_threads()}"
        except Exception as e:
            meta["transformers"] = f"unavailable: {e}"
            for B in batches:
                results[("hf", B)] = {"error": f"transformers unavailable ({str(e).splitlines()[0][:120]})"}
    meta["loadavg_before"] = loadavg()
    log(f"load average before: {meta['loadavg_before']}")
    P, G = args.prompt_len, args.gen_len
    prev_hf = None
    for i, B in enumerate(batches):
        order = args.systems[i % len(args.systems):] + args.systems[: i % len(args.systems)]  # rotate
        for sys_ in order:
            if (sys_, B) in results:
                continue
            la = loadavg()
            try:
                if sys_ == "offgen":
                    r = run_offgen(exe, args, B)
                elif sys_ == "llamacpp":
                    r = run_llama(llama["exe"], args, B)
                else:
                    if prev_hf is not None:
                        pb, pw = prev_hf
                        est = pw * B / pb
                        if est > args.hf_cap_seconds:
                            results[("hf", B)] = {"skipped": f"skipped: est. {est:.0f} s > cap {args.hf_cap_seconds:.0f} s"}
                            log(f"transformers B={B} skipped (estimated {est:.0f} s)")
                            continue
                    do_gen = args.hf_generate_check == "all" or (
                        args.hf_generate_check == "auto" and
                        (prev_hf is None or prev_hf[1] * B / prev_hf[0] < args.hf_cap_seconds / 2))
                    r = hf.run(args, offgen_prompt_ids(B, P, vocab), do_gen)
                    prev_hf = (B, r["wall_s"])
                r = metrics(r, B, P, G)
                r["loadavg"] = la
                results[(sys_, B)] = r
                log(f"{sys_:9s} B={B:<3d} prefill {r['prefill_tps']:9.1f}  decode {r['decode_tps']:9.1f}  "
                    f"total {r['total_tps']:9.1f} tok/s  (load {la})")
            except Exception as e:
                results[(sys_, B)] = {"error": f"failed: {str(e).splitlines()[0][:160]}"}
                log(f"{sys_} B={B} failed: {e}")
    meta["loadavg_after"] = loadavg()
    meta["runtime"] = f"{time.time() - t_start:.0f} s"
    md = render(meta, results, batches, args)
    print(md)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(md)
    jpath = Path(args.json) if args.json else out.with_suffix(".json")
    jpath.write_text(json.dumps({"meta": meta, "results": [dict(system=s, batch=b, **r) for (s, b), r in results.items()]},
                                indent=2, default=str))
    log(f"wrote {out} and {jpath}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
