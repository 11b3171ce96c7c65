#!/usr/bin/env python3
"""Checks a Hugging Face export of a GGUF (tools/export_hf_checkpoint.py) against offgen on the GGUF.

Tokenises a few prompts with the export's tokenizer (BOS + encode(text, add_special_tokens=False)),
runs `bench_offgen_logits --weight-dtype f32` (next-token logits and a greedy continuation per
prompt, see bench/peers/gemma_parity/offgen_logits.cpp) on the GGUF, and transformers on the export
(fp32, --attn sdpa or eager): prints max / mean |dlogit| of the next-token logits and how many
greedy tokens agree. The default prompts include two contexts of bench/multiquery/multikey.jsonl
(about 1,040 and 320 tokens), so a sliding-window model (Gemma 3: 512) is checked past its window.

  /opt/offgen-kvpress/bin/python bench/peers/hf_export_parity.py \\
      --gguf ~/.cache/offgen/models/gemma-3-270m-q4_k_m.gguf --hf ~/.cache/offgen/models/gemma-3-270m-hf \\
      --offgen-bin /work/main/build

Dev-time only (transformers is a peer); exits 1 if a prompt's max |dlogit| exceeds --tol.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def default_prompts() -> list[str]:
    rows = [json.loads(line) for line in (REPO / "bench/multiquery/multikey.jsonl").read_text().splitlines()[:2]]
    return ["The capital of France is", "Once upon a time, there was a little", "def fibonacci(n):\n    ",
            "The GNU General Public License is a free, copyleft license for",
            rows[0]["context"] + "\n\nThe ticket number of", rows[1]["context"][:1500]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", type=Path, required=True)
    ap.add_argument("--hf", type=Path, required=True, help="the exported checkpoint directory")
    ap.add_argument("--offgen-bin", type=Path, default=REPO / "build", help="build dir with bench/bench_offgen_logits")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa")
    ap.add_argument("--tol", type=float, default=1e-3, help="max |dlogit| allowed per prompt")
    args = ap.parse_args()

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(args.hf)
    model = AutoModelForCausalLM.from_pretrained(args.hf, dtype=torch.float32, attn_implementation=args.attn).eval()
    prompts = default_prompts()
    bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
    ids = [bos + tok.encode(p, add_special_tokens=False) for p in prompts]

    work = Path(tempfile.mkdtemp(prefix="offgen-hf-export-"))
    (work / "ids.txt").write_text("".join(" ".join(map(str, x)) + "\n" for x in ids))
    exe = args.offgen_bin / "bench/bench_offgen_logits"
    r = subprocess.run([str(exe), "--model", str(args.gguf), "--ids", str(work / "ids.txt"), "--logits",
                        str(work / "offgen.f32"), "--steps", str(args.steps), "--threads", str(args.threads),
                        "--weight-dtype", "f32"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{exe} failed ({r.returncode}): {r.stderr[-2000:]}")
    off = np.fromfile(work / "offgen.f32", dtype=np.float32).reshape(len(ids), -1)
    off_greedy = [list(map(int, line.split())) for line in r.stdout.splitlines()]

    worst = 0.0
    with torch.inference_mode():
        for i, x in enumerate(ids):
            logits = model(torch.tensor([x])).logits[0, -1].numpy()
            greedy = model.generate(torch.tensor([x]), max_new_tokens=args.steps, min_new_tokens=args.steps,
                                    do_sample=False)[0, len(x):].tolist()
            d = np.abs(logits - off[i])
            same = 0
            while same < args.steps and greedy[same] == off_greedy[i][same]:
                same += 1
            worst = max(worst, float(d.max()))
            print(f"prompt {i}: {len(x)} tokens, max |dlogit| {d.max():.2e}, mean {d.mean():.2e}, top-1 "
                  f"{'same' if logits.argmax() == off[i].argmax() else 'DIFFERENT'}, greedy same for "
                  f"{same}/{args.steps}: {tok.decode(greedy)!r}")
    print(f"worst max |dlogit| {worst:.2e} (tol {args.tol:g})")
    return 0 if worst <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())
