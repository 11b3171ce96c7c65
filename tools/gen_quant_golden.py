#!/usr/bin/env python3
"""Generate golden dequantisation data for offgen's GGML block formats.

Reference: llama.cpp's own dequantisers. The SmolLM2 GGUF is requantised with
`llama-quantize --allow-requantize --pure` to each format; a few blocks of tensors stored in that
format (first, middle and last block of two tensors) are read with gguf-py's GGUFReader (raw
bytes only) and dequantised by llama.cpp's
libggml-base through ctypes: ggml_get_type_traits(type)->to_float (the generic dequantisers in
ggml-quants.c, compiled without -march flags, i.e. no fused multiply-adds).

llama.cpp is the build bench/peers/run_peers.py makes from the llama-cpp-python sdist (its
llama_build(): the newest cached build under ~/.cache/offgen/peers, else it downloads and
builds one); this script adds the llama-quantize target to that build directory.

Writes tests/data/golden/quant_golden.json (or --out): per format the GGML type, the source
tensor and block index, the raw block bytes and llama.cpp's float32 values (base64 of little-
endian bytes).

Usage:
  /opt/offgen-dev/bin/python tools/gen_quant_golden.py [GGUF] [--out FILE]

GGUF defaults to $OFFGEN_MODEL, else ~/.cache/offgen/models/SmolLM2-135M-Instruct.Q4_1.gguf.
Needs: gguf, numpy (and cmake + a C++ compiler for the llama.cpp build). Dev-time only.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
from gguf import GGUFReader

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench/peers"))
import run_peers  # noqa: E402  (bench/peers: the llama.cpp build logic)

# offgen name -> (llama-quantize file type, GGML type id). --pure keeps one format per file (K-quant
# types still fall back for rows that are not a multiple of 256: SmolLM2's 576-wide ones); blocks
# are taken from tensors that hold the wanted type.
FORMATS = {
    "q4_0": ("Q4_0", 2), "q4_1": ("Q4_1", 3), "q5_0": ("Q5_0", 6), "q5_1": ("Q5_1", 7),
    "q8_0": ("Q8_0", 8), "q2_k": ("Q2_K", 10), "q3_k": ("Q3_K_M", 11), "q4_k": ("Q4_K_M", 12),
    "q5_k": ("Q5_K_M", 13), "q6_k": ("Q6_K", 14), "iq4_nl": ("IQ4_NL", 20), "iq4_xs": ("IQ4_XS", 23),
}


class TypeTraits(ctypes.Structure):  # struct ggml_type_traits (ggml.h)
    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p),
                ("from_float_ref", ctypes.c_void_p)]


ToFloat = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64)


def default_model() -> Path:
    if os.environ.get("OFFGEN_MODEL"):
        return Path(os.environ["OFFGEN_MODEL"])
    return Path.home() / ".cache/offgen/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def llama_dir() -> Path:
    info = run_peers.llama_build(types.SimpleNamespace(llama_version=None, llama_rebuild=False))
    build = Path(info["exe"]).parent.parent
    if not (build / "bin/llama-quantize").exists():
        subprocess.run(["cmake", "--build", str(build), "-j2", "--target", "llama-quantize"], check=True)
    return build


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf", nargs="?", default=str(default_model()))
    ap.add_argument("--out", default=str(REPO / "tests/data/golden/quant_golden.json"))
    args = ap.parse_args()
    src = Path(args.gguf).expanduser()
    if not src.exists():
        print(f"gen_quant_golden: model not found: {src} (run tools/get-model)", file=sys.stderr)
        return 2
    build = llama_dir()
    lib = ctypes.CDLL(str(build / "bin/libggml-base.so"))
    lib.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    out: dict = {"source_model": src.name, "llama_cpp": build.name,
                 "reference": "libggml-base ggml_get_type_traits(type)->to_float", "formats": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (ftype, gtype) in FORMATS.items():
            dst = Path(tmp) / f"{name}.gguf"
            subprocess.run([str(build / "bin/llama-quantize"), "--allow-requantize", "--pure", str(src), str(dst), ftype],
                           check=True, capture_output=True)
            traits = lib.ggml_get_type_traits(gtype).contents
            to_float = ToFloat(traits.to_float)
            blk_elems, blk_bytes = traits.blck_size, traits.type_size
            tensors = [t for t in GGUFReader(str(dst)).tensors if int(t.tensor_type) == gtype]
            if not tensors:
                raise RuntimeError(f"{ftype}: no tensor of GGML type {gtype} in the requantised file")
            picked = [tensors[0], tensors[len(tensors) // 2]] if len(tensors) > 1 else tensors[:1]
            blocks = []
            for t in picked:
                raw = np.asarray(t.data).reshape(-1).view(np.uint8)
                nb = raw.size // blk_bytes
                for i in sorted({0, nb // 2, nb - 1}):  # first, middle and last block
                    b = np.ascontiguousarray(raw[i * blk_bytes:(i + 1) * blk_bytes])
                    y = np.zeros(blk_elems, dtype=np.float32)
                    to_float(b.ctypes.data, y.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), blk_elems)
                    blocks.append({"tensor": t.name, "block": int(i),
                                   "bytes": base64.b64encode(b.tobytes()).decode(),
                                   "values": base64.b64encode(y.astype("<f4").tobytes()).decode()})
            out["formats"][name] = {"ggml_type": gtype, "llama_quantize_type": ftype,
                                    "block_elems": int(blk_elems), "block_bytes": int(blk_bytes),
                                    "blocks": blocks}
            print(f"{name}: {len(blocks)} blocks from {[t.name for t in picked]}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
