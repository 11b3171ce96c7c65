#!/usr/bin/env bash
# End-to-end checks of `offgen generate` / `offgen inspect` on the real model: mixed valid and
# invalid request lines, prompts over the context window, missing and corrupt model files,
# --prefill-chunk.
# Usage: test_cli_generate.sh OFFGEN_BINARY MODEL_PATH (exit 77 = skipped when the model is absent).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

cat > "$work/in.jsonl" <<'JSONL'
{"id": "good-1", "prompt": "The capital of France is", "max_tokens": 5}
{"id": "bad-json", "prompt": "unterminated
{"id": "long", "prompt": "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four twenty-five twenty-six twenty-seven twenty-eight twenty-nine thirty thirty-one thirty-two thirty-three thirty-four thirty-five thirty-six thirty-seven thirty-eight thirty-nine forty"}

{"id": "good-2", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
{"id": "bad-temp", "prompt": "x", "temperature": -2}
{"id": "good-1", "prompt": "duplicate id"}
JSONL
"$bin" generate --model "$model" --input "$work/in.jsonl" --output "$work/out.jsonl" \
  --max-context 64 --quiet 2> "$work/err.txt"
rc=$?
check "exit code 3 when some records failed (got $rc)" test "$rc" -eq 3
check "one output line per input line" test "$(wc -l < "$work/out.jsonl")" -eq 6
python3 - "$work/out.jsonl" <<'PY' || fail=1
import json, sys
recs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    recs.setdefault(r["id"], r)
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: sys.exit(1)
expect(recs["good-1"].get("text") is not None and recs["good-1"]["usage"]["completion_tokens"] == 5, "good-1 answered with 5 tokens")
expect("text" in recs["good-2"], "good-2 (chat messages) answered")
expect("line 2" in recs["line-2"]["error"]["message"] and "invalid JSON" in recs["line-2"]["error"]["message"], "bad JSON names line 2")
expect("context window" in recs["long"]["error"]["message"] and recs["long"]["error"]["line"] == 3, "over-long prompt gets an error naming line 3")
expect("temperature" in recs["bad-temp"]["error"]["message"] and "line 6" in recs["bad-temp"]["error"]["message"], "invalid temperature names line 6 and the field")
expect(any("duplicate id 'good-1'" in r.get("error", {}).get("message", "") for r in recs.values()), "duplicate id reported")
PY
check "summary line reports failures" grep -q "4 failed" "$work/err.txt"

# --prefill-chunk: prompts prefilled in forwards of at most 8 tokens give the same records.
"$bin" generate --model "$model" --input "$work/in.jsonl" --output "$work/chunked.jsonl" \
  --max-context 64 --prefill-chunk 8 --report "$work/chunked.json" --quiet 2> /dev/null
check "report: batch_size is the two valid requests that ran together" \
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(not (r["batch_size"] == 2 and r["peak_rss_bytes"] > 0))' "$work/chunked.json"
check "--prefill-chunk 8: the same records as the default chunk" cmp -s "$work/out.jsonl" "$work/chunked.jsonl"
"$bin" bench --model "$model" --threads 1 --prompt-len 20 --gen-len 2 --gpu-batch-size 1 \
  --prefill-chunk 8 --no-warmup --json "$work/chunk_bench.json" > /dev/null
check "bench reports the prefill chunk it ran with" \
  python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["prefill_chunk"] != 8)' "$work/chunk_bench.json"
# The wall time outside the throughput figures: the load, and the generate call holding prefill
# and decode.
check "bench reports its load and generate wall times" python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
sys.exit(not (j["load_seconds"] > 0 and
              j["generate_seconds"] >= j["prefill_seconds"] + j["decode_seconds"] > 0))' \
  "$work/chunk_bench.json"

# A bench job of more prompts than a block that fits runs block by block (blocks of 2 here; six
# sequences at once would exceed --cpu-mem).
"$bin" bench --model "$model" --threads 1 --prompt-len 512 --gen-len 2 --gpu-batch-size 2 \
  --num-prompts 2 --no-warmup --json "$work/block2.json" > /dev/null
cap=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak_bytes"]["host"] + 8 * 2**20)' "$work/block2.json")
"$bin" bench --model "$model" --threads 1 --prompt-len 512 --gen-len 2 --gpu-batch-size 2 \
  --num-prompts 6 --cpu-mem "$cap" --no-warmup --json "$work/block6.json" > /dev/null 2> "$work/block6.err"
check "bench: 6 prompts in blocks of 2 under --cpu-mem $cap" \
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(not (r["num_prompts"] == 6 and r["batch_size"] == 2 and r["total_throughput"] > 0))' "$work/block6.json"

"$bin" generate --model "$work/missing.gguf" --input "$work/in.jsonl" --output "$work/o2.jsonl" 2> "$work/err2.txt"
rc=$?
check "missing model: exit 1 (got $rc)" test "$rc" -eq 1
check "missing model: one clear line" test "$(wc -l < "$work/err2.txt")" -eq 1
check "missing model: names the file" grep -q "missing.gguf: model file not found" "$work/err2.txt"

head -c 3000000 "$model" > "$work/truncated.gguf"
"$bin" generate --model "$work/truncated.gguf" --input "$work/in.jsonl" --output "$work/o3.jsonl" 2> "$work/err3.txt"
rc=$?
check "truncated model: exit 1 (got $rc)" test "$rc" -eq 1
check "truncated model: one line naming the file and offset" grep -qE "truncated.gguf: .*(offset|outside the file)" "$work/err3.txt"
cat "$work/err3.txt"

"$bin" inspect --model "$model" > "$work/inspect.txt"
check "inspect prints config and tensors" grep -q "blk.29.ffn_down.weight" "$work/inspect.txt"
check "inspect prints memory footprint" grep -q "KV cache" "$work/inspect.txt"

"$bin" generate --model "$model" --input "$work/in.jsonl" --output "$work/o4.jsonl" --top-p 2 2> "$work/err4.txt"
rc=$?
check "bad flag value: exit 2 (got $rc)" test "$rc" -eq 2
check "bad flag value: names the flag" grep -q -- "--top-p" "$work/err4.txt"
exit $fail
