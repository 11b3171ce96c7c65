#!/usr/bin/env bash
# End-to-end checks of `offgen convert`: a tiny Hugging Face checkpoint, a dummy preset and the
# default GGUF (re-quantised) written as GGUF files whose greedy text equals the at-load path's
# (--weight-dtype T on the source), the files' structure read by an independent reader (the gguf
# package, when the Python venv has it), and refusals (existing --out, the model itself, OPT).
# Usage: test_cli_convert.sh OFFGEN_BINARY MODEL_PATH (exit 77 = skipped when the model is absent).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
data="$(cd "$(dirname "${BASH_SOURCE[0]}")/../data/hf_models" && pwd)"
py="${OFFGEN_VENV:-$HOME/.cache/offgen/venv}/bin/python3"

cat > "$work/in.jsonl" <<'JSONL'
{"id": "a", "prompt": "Hello, the other day", "max_tokens": 12}
{"id": "b", "prompt": "Pay $2963 (07-41)?", "max_tokens": 12}
JSONL

# convert MODEL DTYPE NAME: convert, then generate from the file and from MODEL at DTYPE.
same_text() {
  local model=$1 dtype=$2 name=$3
  "$bin" convert --model "$model" --out "$work/$name.gguf" --weight-dtype "$dtype" --threads 2 \
    > "$work/$name.convert.txt" 2>&1
  check "$name: convert exits 0 ($(tail -c 300 "$work/$name.convert.txt"))" test $? -eq 0
  check "$name: convert reports the tensors' types" grep -q "tensors: " "$work/$name.convert.txt"
  "$bin" generate --model "$work/$name.gguf" --input "$work/in.jsonl" --output "$work/$name.file.jsonl" \
    --temperature 0 --threads 2 --quiet
  check "$name: generate from the converted file exits 0" test $? -eq 0
  "$bin" generate --model "$model" --weight-dtype "$dtype" --input "$work/in.jsonl" \
    --output "$work/$name.load.jsonl" --temperature 0 --threads 2 --quiet
  check "$name: generate quantising at load exits 0" test $? -eq 0
  python3 - "$work/$name.file.jsonl" "$work/$name.load.jsonl" <<'PY' || fail=1
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
ta = {r["id"]: r["text"] for r in a}
tb = {r["id"]: r["text"] for r in b}
ok = ta == tb and len(ta) == 2 and all(r["usage"]["completion_tokens"] > 0 for r in a)
print(("ok: " if ok else "FAIL: ") + f"greedy text of the converted file equals the at-load path's: {ta} / {tb}")
sys.exit(0 if ok else 1)
PY
}

same_text "$data/llama" q8_0 hf-llama-q8_0
same_text "$data/phi3" q4_k hf-phi3-q4_k
same_text "$model" q4_k_m smollm2-q4_k_m
same_text dummy:smollm2-135m q4_k_m dummy-q4_k_m

# The structure, read by the gguf package (independent of offgen's reader).
if "$py" -c "import gguf" 2>/dev/null; then
  "$py" - "$work/smollm2-q4_k_m.gguf" "$work/hf-phi3-q4_k.gguf" <<'PY' || fail=1
import sys
import gguf
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: sys.exit(1)
for path in sys.argv[1:]:
    r = gguf.GGUFReader(path)
    f = lambda k: r.fields[k]
    arch = bytes(f("general.architecture").parts[-1]).decode()
    n_layers = int(f(f"{arch}.block_count").parts[-1][0])
    names = {t.name: t for t in r.tensors}
    expect(len(f("tokenizer.ggml.tokens").data) == names["token_embd.weight"].shape[1],
           f"{path}: one token per embedding row")
    # The reader maps every tensor's extent in the file; each holds its type's bytes.
    bad = [t.name for t in r.tensors if t.n_bytes != len(t.data.tobytes())]
    expect(not bad, f"{path}: {len(r.tensors)} tensors, each its type's bytes {bad}")
    types = {gguf.GGMLQuantizationType(t.tensor_type).name for t in r.tensors}
    if arch == "llama":  # q4_k_m of SmolLM2 (d_model 576): Q5_0 and Q8_0 fallbacks, Q4_K, Q6_K
        expect({"Q4_K", "Q6_K", "Q5_0", "Q8_0", "F32"} <= types, f"{path}: types {sorted(types)}")
        expect(len(bytes(f("tokenizer.chat_template").parts[-1])) > 0, f"{path}: chat template kept")
    else:  # Phi-3: fused tensors as llama.cpp lays them out
        expect("blk.0.attn_qkv.weight" in names and "blk.0.attn_q.weight" not in names,
               f"{path}: fused attn_qkv")
        expect(names["blk.0.ffn_up.weight"].shape[1] == 2 * int(f("phi3.feed_forward_length").parts[-1][0]),
               f"{path}: fused gate/up")
    expect(sum(n.endswith("ffn_down.weight") for n in names) == n_layers, f"{path}: {n_layers} layers")
PY
else
  echo "skip: the gguf package is not in $py (tools/setup installs it)"
fi

# Refusals: an existing --out, the model as --out, an architecture GGUF has no form for.
"$bin" convert --model "$data/llama" --out "$work/hf-llama-q8_0.gguf" 2> "$work/e1.txt"
rc=$?
check "existing --out: exit 2 (got $rc)" test "$rc" -eq 2
check "existing --out: says --overwrite" grep -q -- "--overwrite replaces it" "$work/e1.txt"
"$bin" convert --model "$work/hf-llama-q8_0.gguf" --out "$work/hf-llama-q8_0.gguf" --overwrite 2> "$work/e2.txt"
check "the model as --out: refused" grep -q "is the model being converted" "$work/e2.txt"
"$bin" convert --model "$data/opt" --out "$work/opt.gguf" 2> "$work/e3.txt"
rc=$?
check "OPT: exit 2 (got $rc)" test "$rc" -eq 2
check "OPT: names the architectures convert takes" grep -q "has no GGUF form.*llama" "$work/e3.txt"
check "OPT: no file left" test ! -e "$work/opt.gguf" -a ! -e "$work/opt.gguf.partial"
exit $fail
