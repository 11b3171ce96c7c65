# Writes the seed corpus for fuzz_safetensors (tests/fuzz/corpus/safetensors): small valid files made
# by the reference `safetensors` package plus a few hand-made near-misses. Dev-time only:
#   /opt/offgen-dev/bin/python tests/fuzz/make_safetensors_corpus.py tests/fuzz/corpus/safetensors
import json
import struct
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
g = torch.Generator().manual_seed(0)


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=g).to(dtype)


save_file({"w": rand(2, 3)}, out / "one_tensor.safetensors")
save_file({"a.f32": rand(3, 2), "b.f16": rand(4, dtype=torch.float16),
           "c.bf16": rand(2, 2, dtype=torch.bfloat16)}, out / "multi_dtype.safetensors")
save_file({"scale": torch.tensor(3.5)}, out / "scalar.safetensors")
save_file({"empty": torch.zeros(0, 4), "bias": rand(4, dtype=torch.bfloat16)},
          out / "zero_size.safetensors")
save_file({"ids": torch.arange(5, dtype=torch.int64), "mask": torch.tensor([True, False]),
           "bytes": torch.arange(3, dtype=torch.uint8), "x": rand(2, dtype=torch.float16)},
          out / "metadata.safetensors", metadata={"format": "pt", "author": "offgen"})


def raw(header: str, data: bytes) -> bytes:
    h = header.encode()
    return struct.pack("<Q", len(h)) + h + data


t = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
(out / "gap.safetensors").write_bytes(raw(json.dumps({"t": t}), bytes(12)))
(out / "duplicate_key.safetensors").write_bytes(
    raw('{"t":%s,"t":%s}' % (json.dumps(t), json.dumps(t)), bytes(8)))
(out / "overlap.safetensors").write_bytes(raw(json.dumps(
    {"a": t, "b": {"dtype": "F16", "shape": [2], "data_offsets": [4, 8]}}), bytes(8)))
