#!/usr/bin/env bash
# Crash-safety of `offgen generate`: a job of 220 requests is killed with SIGKILL at several
# points (plus a torn last line), restarted each time, and must end with every id exactly once and
# the same records as a clean run; a changed input is refused, --overwrite starts afresh.
# Usage: test_cli_resume.sh OFFGEN_BINARY MODEL_PATH (exit 77 = skipped when the model is absent).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

python3 - "$work/in.jsonl" <<'PY'
import json, sys
topics = ["the sea", "a city at night", "bread", "the moon", "a library", "rain", "mountains",
          "a train", "coffee", "winter", "a garden"]
with open(sys.argv[1], "w") as f:
    for i in range(220):
        f.write(json.dumps({"id": f"r{i}", "prompt": f"Write one sentence about {topics[i % len(topics)]} (#{i}):",
                            "max_tokens": 8 + i % 9}) + "\n")
        if i == 50: f.write("{broken json\n")
PY
run() { "$bin" generate --model "$model" --input "$work/in.jsonl" --output "$1" --batch-size 8 --quiet "${@:2}"; }

run "$work/clean.jsonl" 2>/dev/null
check "clean run wrote 221 records" test "$(wc -l < "$work/clean.jsonl")" -eq 221

out="$work/out.jsonl"
for target in 30 100 170; do
  "$bin" generate --model "$model" --input "$work/in.jsonl" --output "$out" --batch-size 8 \
    --quiet 2>>"$work/err.txt" &
  pid=$!   # the offgen process itself (not a subshell), so SIGKILL hits the writer
  while kill -0 "$pid" 2>/dev/null && [[ $(cat "$out" 2>/dev/null | wc -l) -lt $target ]]; do sleep 0.02; done
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  echo "killed at $(wc -l < "$out") records"
done
printf '{"id": "r219", "text": "torn wri' >> "$out"   # a crash in the middle of a write
run "$out" 2>>"$work/err.txt"
rc=$?
[[ $rc -eq 3 ]] || tail -3 "$work/err.txt"
check "final run exit 3 (one bad line) (got $rc)" test "$rc" -eq 3
check "torn line reported" grep -q "incomplete last line" "$work/err.txt"
python3 - "$work/clean.jsonl" "$out" <<'PY' || fail=1
import json, sys
clean = [json.loads(l) for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
ids = [r["id"] for r in got]
ok = len(ids) == len(set(ids)) == len(clean)
print(("ok" if ok else "FAIL") + f": every id exactly once ({len(ids)} records, {len(set(ids))} distinct)")
by_id = {r["id"]: r for r in clean}
same = all(by_id[r["id"]] == r for r in got)
print(("ok" if same else "FAIL") + ": records identical to the clean run")
sys.exit(0 if ok and same else 1)
PY

echo '{"id": "extra", "prompt": "new"}' >> "$work/in.jsonl"
run "$out" 2> "$work/err2.txt"
rc=$?
check "changed input refused with exit 2 (got $rc)" test "$rc" -eq 2
check "changed input named" grep -q "input_fnv1a64 changed" "$work/err2.txt"
cp "$work/in.jsonl" "$work/in_keep.jsonl"
head -n -1 "$work/in_keep.jsonl" > "$work/in.jsonl"  # the input as it was
run "$out" --temperature 0.5 2> "$work/err_t.txt"
check "changed sampling: the field and both values named" \
  grep -q "sampling.temperature changed (0.0 -> 0.5)" "$work/err_t.txt"
check "changed sampling: no OpenAI default named without OpenAI-shaped lines" \
  test -z "$(grep openai_temperature "$work/err_t.txt")"
cp "$work/in_keep.jsonl" "$work/in.jsonl"
run "$out" --overwrite 2>/dev/null
check "--overwrite starts afresh" test "$(wc -l < "$out")" -eq 222

# A second job on the same output while the first still writes is refused, not interleaved.
"$bin" generate --model "$model" --input "$work/in.jsonl" --output "$work/busy.jsonl" \
  --batch-size 8 --quiet 2>/dev/null &
pid=$!
while kill -0 "$pid" 2>/dev/null && [[ ! -s "$work/busy.jsonl" ]]; do sleep 0.02; done
run "$work/busy.jsonl" 2> "$work/err3.txt"
rc=$?
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
check "concurrent writer refused with exit 2 (got $rc)" test "$rc" -eq 2
check "concurrent writer named" grep -q "another offgen process" "$work/err3.txt"

# does_not_fit records are final: a resume under a larger limit keeps them and says so.
printf '%s\n' '{"id": "a", "prompt": "Hi", "max_tokens": 2}' \
  '{"id": "b", "prompt": "Hello there", "max_tokens": 600}' > "$work/fit.jsonl"
fit() { "$bin" generate --model "$model" --input "$work/fit.jsonl" --output "$work/fit.out" \
  --gpu-batch-size 2 --percent 100 0 0 100 100 0 --kv-dtype f32 --quiet "$@"; }
fit --cpu-mem 110M 2> /dev/null  # 92 MiB of weights; b's f32 KV cache alone needs 27 MiB more
check "a request over --cpu-mem gets does_not_fit" grep -q '"does_not_fit"' "$work/fit.out"
fit --cpu-mem 200M 2> "$work/fit.err"
check "resume under a larger limit warns that it is not retried" \
  grep -q "1 of the records kept are does_not_fit errors" "$work/fit.err"
# Ids keep their JSON type: 7 and "7" are two requests, and a number comes back as a number.
printf '%s\n' '{"id": 7, "prompt": "Seven", "max_tokens": 3}' \
  '{"id": "7", "prompt": "Seven", "max_tokens": 3}' '{"id": 8, "prompt": "Eight", "max_tokens": 3}' \
  > "$work/ids.jsonl"
ids() { "$bin" generate --model "$model" --input "$work/$1.jsonl" --output "$work/$1.out" --quiet; }
ids ids 2> "$work/ids.err"
check "ids 7 and \"7\" both run" python3 - "$work/ids.out" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert [r["id"] for r in recs] == [7, "7", 8], [r["id"] for r in recs]
assert all("error" not in r for r in recs), recs
PY
ids ids 2> /dev/null
check "a resume of typed ids writes nothing again" test "$(wc -l < "$work/ids.out")" -eq 3
python3 - "$work/ids.out.offgen.json" <<'PY'
import json, sys
fp = json.load(open(sys.argv[1])); del fp["typed_ids"]; json.dump(fp, open(sys.argv[1], "w"))
PY
ids ids 2> "$work/ids2.err"
check "an output from before typed ids, with 7 and \"7\", is refused" \
  grep -q "typed_ids changed (none -> true)" "$work/ids2.err"
# An output written before ids were typed holds the number 7 as "7": that record is kept.
printf '%s\n' '{"id": 7, "prompt": "Seven", "max_tokens": 3}' \
  '{"id": "x", "prompt": "Ex", "max_tokens": 3}' > "$work/legacy.jsonl"
ids legacy 2> /dev/null
python3 - "$work/legacy.out" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
r["id"], r["text"] = "7", "KEPT"  # as an earlier offgen wrote it; the "x" record is still to come
open(sys.argv[1], "w").write(json.dumps(r) + "\n")
PY
ids legacy 2> /dev/null
check "a resume keeps the untyped record of id 7 and completes the job" python3 - "$work/legacy.out" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert [(r["id"], r["text"] if r["id"] == "7" else "") for r in recs] == [("7", "KEPT"), ("x", "")], recs
PY
exit $fail
