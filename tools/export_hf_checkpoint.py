#!/usr/bin/env python3
"""Export a GGUF model as a Hugging Face checkpoint directory (dev-time helper).

transformers loads the GGUF (dequantising every tensor to fp32 and, for llama-family models,
un-permuting the attn_q / attn_k rows back to HF's rotate-half layout -- see
LlamaTensorProcessor in transformers/modeling_gguf_pytorch_utils.py), exactly as
tools/gen_golden_model.py does for SmolLM2; this script then writes the model and tokenizer with
Hugging Face's own writers:
  model.save_pretrained(OUTDIR, safe_serialization=True)  -> config.json, generation_config.json,
                                                             model.safetensors (+ index if sharded)
  tokenizer.save_pretrained(OUTDIR)                       -> tokenizer.json, tokenizer_config.json,
                                                             chat_template.jinja (if any)
The result is what offgen's HF-checkpoint loader reads (e.g. to check that the HF path and the
GGUF path give the same logits). Quantised GGUFs become dense checkpoints: the weights are the
dequantised values, so fp32 output is lossless w.r.t. the GGUF, bfloat16 output is not.

Usage:
  /opt/offgen-dev/bin/python tools/export_hf_checkpoint.py GGUF OUTDIR [--dtype float32|bfloat16]
                                                           [--max-shard-size SIZE]
e.g.
  /opt/offgen-dev/bin/python tools/export_hf_checkpoint.py \\
      ~/.cache/offgen/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
      ~/.cache/offgen/models/SmolLM2-135M-Instruct-hf

Prints the files written with their sizes and a summary of the tokenizer files. OUTDIR is
created; existing files in it with the same names are overwritten.

Needs: torch, transformers (>=4.45 for GGUF; tested with 5.24), accelerate (transformers refuses
GGUF loading without it), gguf, numpy, safetensors.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def summarize_tokenizer(out_dir: Path) -> None:
    tj = out_dir / "tokenizer.json"
    if tj.is_file():
        j = json.loads(tj.read_text(encoding="utf-8"))
        model = j.get("model", {})
        merges = model.get("merges") or []
        print("tokenizer.json:")
        for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
            print(f"  {key}: {json.dumps(j.get(key))}")
        print(f"  model: {json.dumps({k: v for k, v in model.items() if k not in ('vocab', 'merges')})}")
        form = "pairs" if merges and isinstance(merges[0], list) else "strings" if merges else "none"
        print(f"  vocab: {len(model.get('vocab') or {})} entries, merges: {len(merges)} ({form})")
        print(f"  added_tokens: {len(j.get('added_tokens') or [])}, first: {json.dumps((j.get('added_tokens') or [])[:3])}")
    tc = out_dir / "tokenizer_config.json"
    if tc.is_file():
        c = json.loads(tc.read_text(encoding="utf-8"))
        c.pop("added_tokens_decoder", None)
        print(f"tokenizer_config.json (less added_tokens_decoder): {json.dumps(c)}")
    ct = out_dir / "chat_template.jinja"
    if ct.is_file():
        print(f"chat_template.jinja: {ct.read_text(encoding='utf-8')!r}")


# transformers rebuilds a GGUF's tokenizer with a plain ByteLevel pre-tokenizer whatever
# tokenizer.ggml.pre says; for the pre-tokenizers whose real tokenizer.json differs, put back the
# original (SmolLM2's HF tokenizer.json: Sequence[Digits(individual_digits), ByteLevel]).
def fix_pre_tokenizer(tok, gguf_path: str) -> None:
    import gguf
    from tokenizers import pre_tokenizers

    field = gguf.GGUFReader(gguf_path).fields.get("tokenizer.ggml.pre")
    pre = bytes(field.parts[field.data[0]]).decode() if field is not None else ""
    if pre in ("smollm", "starcoder", "refact", "codeshell"):
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
            ]
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf", help="input GGUF file")
    ap.add_argument("outdir", help="output checkpoint directory")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="stored weight dtype")
    ap.add_argument("--max-shard-size", default="50GB", help="passed to save_pretrained (default: one file)")
    args = ap.parse_args()

    gguf_path = os.path.abspath(os.path.expanduser(args.gguf))
    if not os.path.isfile(gguf_path):
        print(f"error: GGUF not found: {gguf_path}", file=sys.stderr)
        return 2
    out_dir = Path(os.path.expanduser(args.outdir))
    out_dir.mkdir(parents=True, exist_ok=True)

    gdir, gname = os.path.split(gguf_path)
    tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    loaded = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32)
    # transformers 5 attaches a GgufHfQuantizer to a GGUF-loaded model and save_pretrained refuses
    # it ("quantized with gguf and is not serializable") even though every weight is already a
    # dense fp32 tensor. So copy the weights into a fresh model of the same class built from the
    # same config minus its quantization_config, and save that one.
    cfg = copy.deepcopy(loaded.config)
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    assert type(model) is type(loaded), (type(model), type(loaded))
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = copy.deepcopy(loaded.generation_config)
    del loaded
    model = model.to(DTYPES[args.dtype]).eval()
    model.save_pretrained(out_dir, safe_serialization=True, max_shard_size=args.max_shard_size)
    fix_pre_tokenizer(tok, gguf_path)
    tok.save_pretrained(out_dir)

    print(f"exported {gguf_path} -> {out_dir} ({args.dtype}, transformers {transformers.__version__})")
    for p in sorted(out_dir.iterdir()):
        if p.is_file():
            print(f"  {p.stat().st_size:>12}  {p.name}")
    summarize_tokenizer(out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
