#!/usr/bin/env python3
"""FlexGen (PyPI `flexgen`, FMInference's FlexLLMGen) on the same GPU workload as `offgen bench`.

Runs flexgen.flex_opt.run_flexgen with dummy weights (`--path _DUMMY_`), FlexGen's own timers and
throughput definitions (prefill = prompts * prompt_len / prefill time; decode = prompts *
(gen_len - 1) / decode time; total = prompts * gen_len / (prefill + decode)), and writes them as
JSON with the keys `offgen bench --json` uses, so bench/gpu-check/summarize.py can take ratios.

FlexGen asks the Hugging Face hub for facebook/opt-30b's tokenizer even with dummy weights; the
device has no network, so this script gives it a stand-in that encodes FlexGen's fixed benchmark
prompt to fixed ids padded (left) to the prompt length: with dummy weights the ids do not matter
to the timing, and both sides then run prompts of exactly --prompt-len tokens. Nothing else is
changed. Dev/bench time only; flexgen is carried as a wheel (bench/gpu-check/prepare).

Usage: python3 bench/peers/flexgen_gpu.py --model facebook/opt-6.7b --percent 100 0 100 0 100 0 \
           --gpu-batch-size 32 --num-gpu-batches 1 --prompt-len 512 --gen-len 32 --json OUT.json
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time


class StandInTokenizer:
    """What run_flexgen uses of a tokenizer: __call__(prompts, padding="max_length",
    max_length=L).input_ids, left padding with pad id 1 (OPT's), and batch_decode."""

    pad_token_id = 1

    def __call__(self, prompts, padding=None, max_length=None, **_):
        class Out:
            pass

        out = Out()
        ids = []
        for p in prompts:
            body = [2] + [100 + (ord(c) % 5000) for c in p][: max_length - 1]
            ids.append([self.pad_token_id] * (max_length - len(body)) + body)
        out.input_ids = ids
        return out

    def batch_decode(self, ids, skip_special_tokens=True):
        return ["" for _ in ids]


def main() -> int:
    import transformers

    transformers.AutoTokenizer.from_pretrained = staticmethod(lambda *a, **k: StandInTokenizer())
    from flexgen import flex_opt

    ap = argparse.ArgumentParser()
    flex_opt.add_parser_arguments(ap)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    args.path = "_DUMMY_"
    if args.offload_dir.startswith("~"):
        args.offload_dir = tempfile.mkdtemp(prefix="flexgen_offload_")
    log = tempfile.NamedTemporaryFile(prefix="flexgen_", suffix=".log", delete=False).name
    args.log_file = log
    t0 = time.time()
    flex_opt.run_flexgen(args)
    text = open(log).read()

    def num(name):
        m = re.search(name + r": ([0-9.eE+-]+)", text)
        return float(m.group(1)) if m else None

    rec = {
        "system": "flexgen",
        "model": args.model,
        "percent": args.percent,
        "gpu_batch_size": args.gpu_batch_size,
        "num_gpu_batches": args.num_gpu_batches,
        "batch_size": args.gpu_batch_size * args.num_gpu_batches,
        "prompt_len": args.prompt_len,
        "gen_len": args.gen_len,
        "prefill_seconds": num("prefill latency"),
        "decode_seconds": num("decode latency"),
        "prefill_throughput": num("prefill throughput"),
        "decode_throughput": num("decode throughput"),
        "total_throughput": num("total throughput"),
        "peak_gpu_gb": num("peak gpu mem"),
        "wall_seconds": time.time() - t0,
        "log": text,
    }
    with open(args.json, "w") as f:
        json.dump(rec, f, indent=2)
    print(json.dumps({k: v for k, v in rec.items() if k != "log"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
