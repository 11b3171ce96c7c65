#!/usr/bin/env bash
# `offgen generate` under what users and machines do (issue: jobs that survive faults): a disk that
# fills mid-job, SIGTERM/SIGINT, ids that collide with generated ones plus kill -9, a FIFO and
# standard input, the output naming the input, bad report paths and flags, a full disk at the
# start, settings that change tokens on resume, a moved model, NaN weights. Every interrupted job
# is resumed and must end with exactly the uninterrupted run's records.
# Usage: test_cli_faults.sh OFFGEN_BINARY MODEL_PATH (exit 77 = skipped when the model is absent).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
data="$(cd "$(dirname "${BASH_SOURCE[0]}")/../data" && pwd)"
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

gen() { "$bin" generate --model "$model" --quiet "$@"; }
# A small RAM-backed filesystem of SIZE at DIR (root); returns non-zero when mounting is refused.
small_fs() {
  mkdir -p "$2" && mount -t tmpfs -o "size=$1" tmpfs "$2" 2>/dev/null && mounts+=("$2")
}

# --- A disk that fills up mid-job: the job stops with a clear error, nothing unfinished is
# journaled as failed, and a resumed run with space completes exactly the clean run's records.
python3 - "$work/grow.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(24):  # the last four need far more KV space than the first twenty
        f.write(json.dumps({"id": f"g{i}", "prompt": f"Write a story about {i}:",
                            "max_tokens": 6 if i < 20 else 150, "ignore_eos": True}) + "\n")
PY
# An f32 cache: one of the last four alone needs about 7 MB of disk, more than the 6 MB below.
kv_disk=(--percent 100 0 0 0 100 0 --batch-size 4 --kv-dtype f32)
# The reference runs with the KV cache in RAM: records do not depend on placement.
gen --input "$work/grow.jsonl" --output "$work/grow_clean.jsonl" --batch-size 4 --kv-dtype f32
if small_fs 6m "$work/fs"; then
  how="a 6 MB tmpfs"
  gen --input "$work/grow.jsonl" --output "$work/grow.jsonl.out" "${kv_disk[@]}" \
    --offload-dir "$work/fs" --report "$work/enospc_report.json" 2> "$work/enospc.txt"
  rc=$?
else  # not root: a file-size limit makes the offload file's reservation fail the same way
  how="ulimit -f (no tmpfs mount here)"
  mkdir -p "$work/fs"
  (trap '' XFSZ; ulimit -f 6144
   gen --input "$work/grow.jsonl" --output "$work/grow.jsonl.out" "${kv_disk[@]}" \
     --offload-dir "$work/fs" --report "$work/enospc_report.json" 2> "$work/enospc.txt")
  rc=$?
fi
echo "disk full via $how: $(cat "$work/enospc.txt")"
check "disk full: exit 1 (got $rc)" test "$rc" -eq 1
check "disk full: one clear line naming the offload file" grep -qE -- "cannot reserve .* of .*/fs(/offgen-| \(unnamed offload file\)).*--offload-dir" "$work/enospc.txt"
n=$(wc -l < "$work/grow.jsonl.out")
check "disk full: some records were written first ($n)" test "$n" -gt 0 -a "$n" -lt 24
check "disk full: no record journaled as failed" test "$(grep -c '"error"' "$work/grow.jsonl.out")" -eq 0
python3 - "$work/enospc_report.json" "$n" <<'PY' || fail=1
import json, sys
r, n = json.load(open(sys.argv[1])), int(sys.argv[2])
e, req = r["error"], r["requests"]
ok = (e is not None and e["category"] == "resource" and "cannot reserve" in e["message"]
      and e["phase"] in ("prepare", "prefill", "decode") and r["exit_code"] == 1
      and r["interrupted"] is False and req["this_run"] == n and req["unfinished"] == 24 - n)
print(("ok" if ok else "FAIL") + f": disk full: the report names the failure ({e}, {req})")
sys.exit(0 if ok else 1)
PY
gen --input "$work/grow.jsonl" --output "$work/grow.jsonl.out" "${kv_disk[@]}" --offload-dir "$work" \
  2> "$work/resume1.txt"
rc=$?
check "disk full: resume with space exits 0 (got $rc)" test "$rc" -eq 0
check "disk full: resume says what it resumes" grep -q "resuming: $n of 24" "$work/resume1.txt"
check "disk full: resumed output equals the clean run" same_records "$work/grow_clean.jsonl" "$work/grow.jsonl.out"

# --- SIGTERM and SIGINT: stop admitting, keep what is written, report "interrupted", exit
# 128 + signal; the resumed job completes exactly the clean run's records.
python3 - "$work/many.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(60):
        f.write(json.dumps({"id": f"m{i}", "prompt": f"List three facts about the number {i}:",
                            "max_tokens": 8 + i % 5}) + "\n")
PY
gen --input "$work/many.jsonl" --output "$work/many_clean.jsonl" --batch-size 8
for sig in TERM INT; do
  out="$work/many_$sig.jsonl"
  "$bin" generate --model "$model" --input "$work/many.jsonl" --output "$out" --batch-size 8 \
    --quiet --report "$work/report_$sig.json" 2> "$work/sig_$sig.txt" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && [[ $(cat "$out" 2>/dev/null | wc -l) -lt 10 ]]; do sleep 0.02; done
  kill -"$sig" "$pid"
  wait "$pid"
  rc=$?
  want=$([[ $sig == TERM ]] && echo 143 || echo 130)
  check "SIG$sig: exit $want (got $rc)" test "$rc" -eq "$want"
  check "SIG$sig: says it was interrupted and how to resume" grep -q "interrupted by SIG$sig.*resume" "$work/sig_$sig.txt"
  python3 - "$work/report_$sig.json" "$out" "SIG$sig" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
lines = sum(1 for _ in open(sys.argv[2]))
req = r["requests"]
ok = (r["interrupted"] is True and r["interrupted_by"] == sys.argv[3] and req["unfinished"] > 0
      and req["total"] - req["unfinished"] == lines)
print(("ok" if ok else "FAIL") + f": {sys.argv[3]}: report marked interrupted ({req}, {lines} records)")
sys.exit(0 if ok else 1)
PY
  gen --input "$work/many.jsonl" --output "$out" --batch-size 8 2>/dev/null
  check "SIG$sig: resumed output equals the clean run" same_records "$work/many_clean.jsonl" "$out"
done

# --- Ids that equal generated ones, with kill -9 and resume: one record per line, no aliasing.
python3 - "$work/ids.jsonl" <<'PY'
import json, sys
rows = [{"id": "x#line-3", "prompt": "One"}, {"id": "x", "prompt": "Two"}, {"id": "x", "prompt": "Three"},
        {"id": "line-0", "prompt": "Four"}, {"id": "line-1", "prompt": "Five"}, "{broken",
        {"id": "line-6", "prompt": "Six"}, {"prompt": "Seven, no id"}, {"id": "line-8", "prompt": "Eight"},
        {"id": "line-8#2", "prompt": "Nine"}]
rows += [{"id": f"fill-{i}", "prompt": f"Count to {i}:"} for i in range(20)]
with open(sys.argv[1], "w") as f:
    for r in rows: f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
PY
gen --input "$work/ids.jsonl" --output "$work/ids_clean.jsonl" --batch-size 4 --max-tokens 6 2>/dev/null
python3 - "$work/ids_clean.jsonl" <<'PY' || fail=1
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ids = [r["id"] for r in recs]
want = {"x#line-3", "x", "x#line-3#2", "line-0", "line-1", "line-6#2", "line-6", "line-8#3", "line-8",
        "line-8#2"}
ok = len(ids) == len(set(ids)) == 30 and want <= set(ids)
print(("ok" if ok else "FAIL") + f": 30 lines, 30 distinct ids, generated ids avoid input ids ({sorted(want - set(ids))} missing)")
sys.exit(0 if ok else 1)
PY
out="$work/ids.jsonl.out"
for target in 4 14; do
  "$bin" generate --model "$model" --input "$work/ids.jsonl" --output "$out" --batch-size 4 \
    --max-tokens 6 --quiet 2>/dev/null &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && [[ $(cat "$out" 2>/dev/null | wc -l) -lt $target ]]; do sleep 0.01; done
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
done
gen --input "$work/ids.jsonl" --output "$out" --batch-size 4 --max-tokens 6 2>/dev/null
check "colliding ids + kill -9: resumed output equals the clean run" same_records "$work/ids_clean.jsonl" "$out"

# --- A named pipe and standard input are read once.
head -6 "$work/many.jsonl" > "$work/six.jsonl"
gen --input "$work/six.jsonl" --output "$work/six_clean.jsonl" --max-tokens 4
mkfifo "$work/fifo"
cat "$work/six.jsonl" > "$work/fifo" &
timeout 120 "$bin" generate --model "$model" --input "$work/fifo" --output "$work/six_fifo.jsonl" \
  --max-tokens 4 --quiet
rc=$?
check "FIFO input: exit 0 (got $rc)" test "$rc" -eq 0
check "FIFO input: same records" same_records "$work/six_clean.jsonl" "$work/six_fifo.jsonl"
gen --input - --output "$work/six_stdin.jsonl" --max-tokens 4 < "$work/six.jsonl"
check "--input -: same records" same_records "$work/six_clean.jsonl" "$work/six_stdin.jsonl"

# --- The output naming the input (directly or through a link) is refused; the input survives.
cp "$work/six.jsonl" "$work/same.jsonl"
ln -s "$work/same.jsonl" "$work/link.jsonl"
for o in same.jsonl link.jsonl; do
  gen --input "$work/same.jsonl" --output "$work/$o" --overwrite 2> "$work/same.txt"
  rc=$?
  check "output = input ($o): exit 2 (got $rc)" test "$rc" -eq 2
  check "output = input ($o): says so" grep -q "is the input file" "$work/same.txt"
  check "output = input ($o): input intact" cmp -s "$work/six.jsonl" "$work/same.jsonl"
done

# --- Bad --report paths and flags are refused before any work, with one clear line, exit 2, and
# leave no files behind.
expect_refused() {  # expect_refused WHAT PATTERN ARGS...
  local what=$1 pattern=$2
  shift 2
  rm -f "$work/refused.jsonl"
  local t0=$SECONDS
  gen --input "$work/six.jsonl" --output "$work/refused.jsonl" "$@" 2> "$work/refused.txt"
  local rc=$?
  check "$what: exit 2 (got $rc)" test "$rc" -eq 2
  check "$what: one line matching '$pattern'" \
    test "$(wc -l < "$work/refused.txt")" -eq 1 -a -n "$(grep -E -- "$pattern" "$work/refused.txt")"
  check "$what: no output file left" test ! -e "$work/refused.jsonl"
  check "$what: no exception text" test -z "$(grep -E 'json.exception|basic_filebuf|what\(\)' "$work/refused.txt")"
}
expect_refused "--report in a missing directory" "--report .*cannot write there" --report "$work/nodir/r.json"
expect_refused "--report on a directory" "--report .*is a directory" --report "$work"
expect_refused "--stop with invalid UTF-8" "--stop.*invalid UTF-8" --stop $'ab\xff'
expect_refused "--stop empty" "--stop.*must not be empty" --stop ""
expect_refused "--seed -1" "--seed.*whole number >= 0 \(got -1\)" --seed -1
expect_refused "--max-tokens -1" "--max-tokens.*whole number >= 0 \(got -1\)" --max-tokens -1
expect_refused "--temperature nan" "--temperature: must be a number in \[0, 100\] \(got nan\)" --temperature nan
expect_refused "--top-p nan" "--top-p: must be a number in \(0, 1\] \(got nan\)" --top-p nan
expect_refused "--seed past 2^64 - 1" "--seed: must be at most 18446744073709551615" --seed 18446744073709551616
expect_refused "--max-tokens past 2^63 - 1" "--max-tokens: must be at most 9223372036854775807" --max-tokens 9223372036854775808
expect_refused "--top-p 0 as a float" "--top-p: must be a number in \(0, 1\] \(got 1e-50\)" --top-p 1e-50
expect_refused "--policy on a directory" "$work: is a directory, not a policy file" --policy "$work"
# The report naming the output (a new one, spelled otherwise) or its sidecar; outputs naming a
# file the job reads (the --context file, the model, the file behind --input -).
expect_refused "--report = the new output, spelled otherwise" "--report .* is the output file" \
  --report "$work/./refused.jsonl"
expect_refused "--report = the output's sidecar" "is the output's sidecar" \
  --report "$work/refused.jsonl.offgen.json"
printf 'A shared context.\n' > "$work/ctx_keep.txt"
cp "$work/ctx_keep.txt" "$work/ctx.txt"
expect_refused "--report = the --context file" "--report .* is the --context file" \
  --context "$work/ctx.txt" --report "$work/ctx.txt"
check "--report = the --context file: the context intact" cmp -s "$work/ctx_keep.txt" "$work/ctx.txt"
refused_output() {  # refused_output WHAT PATTERN ARGS... (ARGS name the output)
  local what=$1 pattern=$2
  shift 2
  "$bin" generate --quiet "$@" 2> "$work/refused.txt"
  local rc=$?
  check "$what: exit 2 (got $rc)" test "$rc" -eq 2
  check "$what: one line matching '$pattern'" \
    test "$(wc -l < "$work/refused.txt")" -eq 1 -a -n "$(grep -E -- "$pattern" "$work/refused.txt")"
}
refused_output "--output = the --context file" "--output .* is the --context file" --model "$model" \
  --input "$work/six.jsonl" --context "$work/ctx.txt" --output "$work/ctx.txt" --overwrite
check "--output = the --context file: the context intact" cmp -s "$work/ctx_keep.txt" "$work/ctx.txt"
printf 'not a model\n' > "$work/fake.gguf"
refused_output "--output = the model" "--output .* is the model file" --model "$work/fake.gguf" \
  --input "$work/six.jsonl" --output "$work/fake.gguf" --overwrite
check "--output = the model: the model intact" grep -q "not a model" "$work/fake.gguf"
cp "$work/six.jsonl" "$work/stdin.jsonl"
refused_output "--output = the file behind --input -" "standard input reads the requests" \
  --model "$model" --input - --output "$work/stdin.jsonl" --overwrite < "$work/stdin.jsonl"
check "--output = the file behind --input -: the requests intact" cmp -s "$work/six.jsonl" "$work/stdin.jsonl"
refused_output "--output in a missing directory" "--output .*cannot write there" --model "$model" \
  --input "$work/six.jsonl" --output "$work/nodir/o.jsonl"
refused_output "--output not a regular file" "--output /dev/null: not a regular file" \
  --model "$model" --input "$work/six.jsonl" --output /dev/null

# --- A full output disk at the start leaves neither an empty output nor a sidecar: when the
# sidecar cannot be written, and when the first record cannot.
for free in none one-page; do
  if small_fs 64k "$work/tiny_$free"; then
    outdir="$work/tiny_$free"
    head -c $([[ $free == none ]] && echo 65536 || echo 61440) /dev/zero > "$outdir/filler" 2>/dev/null
    gen --input "$work/six.jsonl" --output "$outdir/o.jsonl" 2> "$work/full_start.txt"
    rc=$?
  elif [[ $free == none ]]; then  # not root: a file-size limit of 0 fails the first write
    outdir="$work/limited_$free"
    mkdir -p "$outdir"
    (trap '' XFSZ; ulimit -f 0
     gen --input "$work/six.jsonl" --output "$outdir/o.jsonl" 2> "$work/full_start.txt")
    rc=$?
  else
    echo "full disk at start ($free free): needs a tmpfs mount (root); covered by the case above"
    continue
  fi
  cat "$work/full_start.txt"
  check "full disk at start ($free free): exit 1 (got $rc)" test "$rc" -eq 1
  check "full disk at start ($free free): names the file" grep -q "o.jsonl" "$work/full_start.txt"
  check "full disk at start ($free free): nothing left behind" test -z "$(ls "$outdir" | grep -v filler)"
done

# --- Resume refuses settings that change tokens; accepts a moved copy of the same model.
gen --input "$work/six.jsonl" --output "$work/fp.jsonl" --max-tokens 4
for flag in --compress-cache --compress-weight; do
  gen --input "$work/six.jsonl" --output "$work/fp.jsonl" --max-tokens 4 "$flag" 2> "$work/fp.txt"
  rc=$?
  want=$([[ $flag == --compress-cache ]] && echo kv_dtype || echo weight_storage)
  check "resume with $flag: refused, exit 2 (got $rc)" test "$rc" -eq 2
  check "resume with $flag: names $want" grep -q "$want changed" "$work/fp.txt"
done
cp "$model" "$work/moved.gguf"
"$bin" generate --model "$work/moved.gguf" --input "$work/six.jsonl" --output "$work/fp.jsonl" \
  --max-tokens 4 --quiet 2> "$work/moved.txt"
rc=$?
check "a copy of the model at another path resumes (got $rc)" test "$rc" -eq 0
check "  ... every record resumed" grep -q "resuming: 6 of 6" "$work/moved.txt"

# --- NaN weights: in a norm, refused at load naming the tensor; in a matrix, each request gets a
# non_finite_logits record (never a silent empty completion).
nan_model() {  # nan_model DIR TENSOR: a copy of the tiny Qwen2 checkpoint with TENSOR[0] = NaN
  cp -r "$data/hf_models/qwen2" "$1"
  python3 - "$1/model.safetensors" "$2" <<'PY'
import json, struct, sys
path, name = sys.argv[1], sys.argv[2]
b = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
t = json.loads(b[8:8 + n])[name]
at = 8 + n + t["data_offsets"][0]
nan = {"F32": b"\x00\x00\xc0\x7f", "F16": b"\x00\x7e", "BF16": b"\xc0\x7f"}[t["dtype"]]
b[at:at + len(nan)] = nan
open(path, "wb").write(bytes(b))
PY
}
printf '{"id": "a", "prompt": "hello"}\n{"id": "b", "prompt": "world", "temperature": 0.8}\n' > "$work/nan.jsonl"
nan_model "$work/nan_norm" model.layers.0.input_layernorm.weight
"$bin" generate --model "$work/nan_norm" --input "$work/nan.jsonl" --output "$work/nan1.jsonl" \
  --quiet 2> "$work/nan1.txt"
rc=$?
check "NaN in a norm weight: exit 1 at load (got $rc)" test "$rc" -eq 1
check "NaN in a norm weight: names the tensor" grep -q "blk.0.attn_norm.weight' holds a non-finite value" "$work/nan1.txt"
nan_model "$work/nan_mat" model.layers.1.mlp.down_proj.weight
"$bin" generate --model "$work/nan_mat" --input "$work/nan.jsonl" --output "$work/nan2.jsonl" \
  --quiet 2> "$work/nan2.txt"
rc=$?
check "NaN in a matrix: exit 3 (got $rc)" test "$rc" -eq 3
check "NaN in a matrix: both requests are non_finite_logits records" \
  test "$(grep -c '"kind":"non_finite_logits"' "$work/nan2.jsonl")" -eq 2
exit $fail
