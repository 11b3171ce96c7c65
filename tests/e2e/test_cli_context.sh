#!/usr/bin/env bash
# End-to-end checks of shared-context jobs: `offgen generate --context FILE` and "context" lines
# (one context built once, compressed by kvzip, held once; the report says so), a context kept
# whole answering as the same prompt sent whole, resume after an interrupted run, and errors.
# Usage: test_cli_context.sh OFFGEN_BINARY MODEL_PATH (exit 77 = skipped when the model is absent).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

cat > "$work/ctx.txt" <<'EOF'
Notes from the warehouse. The PIN of the brown safe is 4172. The boxes by the door hold paper.
The locker number of Jonas is 58. It rained all week, so the loading bay stayed closed.
The secret code of Ursula is 9930. Nobody remembers who painted the back wall green.
EOF
printf '%s\n' '{"id": "a", "prompt": "What is the PIN of the brown safe?"}' \
  '{"id": "b", "prompt": "What is the locker number of Jonas?"}' \
  '{"id": "c", "prompt": "What is the secret code of Ursula?"}' > "$work/q.jsonl"

gen() {  # gen OUT FLAGS...: a greedy chat job over the questions
  local out=$1; shift
  "$bin" generate --model "$model" --input "$work/q.jsonl" --output "$out" --chat \
    --max-tokens 12 --quiet "$@"
}
gen "$work/kvzip.jsonl" --context "$work/ctx.txt" --kv-policy kvzip --kv-budget 0.4 \
  --report "$work/kvzip.json" 2> "$work/kvzip.err"
rc=$?
check "kvzip context job exits 0 (got $rc)" test "$rc" -eq 0
check "one record per question" test "$(wc -l < "$work/kvzip.jsonl")" -eq 3
python3 - "$work/kvzip.json" "$work/kvzip.jsonl" <<'PY' || fail=1
import json, sys
rep = json.load(open(sys.argv[1]))
recs = [json.loads(l) for l in open(sys.argv[2])]
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: sys.exit(1)
sc = rep["shared_contexts"]
expect(sc["built"] == 1, "the context is built once for three questions")
# 0.4 of the context's pairs past the protected system prompt, which is always kept
expect(sc["kv_policy"] == "kvzip@0.4" and 0.4 < sc["retained"] < 0.65, f"compressed to 0.4 (retained {sc['retained']:.3f})")
expect(sc["peak_bytes"] > 0 and sc["tokens"] > 50, "held once, its tokens counted")
expect(all(r["usage"]["prompt_tokens"] > sc["tokens"] for r in recs), "prompt tokens include the context")
expect(all("error" not in r and r["text"] for r in recs), "every question answered")
PY

# A context kept whole is the same prompt sent whole: a "context" line with --kv-policy full
# answers as the template over context + blank line + question does.
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
ctx = open(f"{w}/ctx.txt").read()
with open(f"{w}/lines.jsonl", "w") as f, open(f"{w}/whole.jsonl", "w") as g:
    for line in open(f"{w}/q.jsonl"):
        r = json.loads(line)
        f.write(json.dumps({"id": r["id"], "context": ctx, "prompt": r["prompt"]}) + "\n")
        g.write(json.dumps({"id": r["id"], "prompt": ctx + "\n\n" + r["prompt"]}) + "\n")
PY
"$bin" generate --model "$model" --input "$work/lines.jsonl" --output "$work/lines.out" --chat \
  --max-tokens 12 --quiet --report "$work/lines.json" 2> "$work/lines.err"
check "context lines exit 0" test $? -eq 0
"$bin" generate --model "$model" --input "$work/whole.jsonl" --output "$work/whole.out" --chat \
  --max-tokens 12 --quiet 2> "$work/whole.err"
check "whole prompts exit 0" test $? -eq 0
check "whole context answers as the whole prompt" \
  test "$(jq -S -c '{id, text}' "$work/lines.out" | sort)" = \
       "$(jq -S -c '{id, text}' "$work/whole.out" | sort)"
check "context lines build one context" test "$(jq '.shared_contexts.built' "$work/lines.json")" -eq 1

# Resume: keep the first record only, as an interrupted run leaves it; the rerun adds the rest.
head -n 1 "$work/kvzip.jsonl" > "$work/resume.jsonl"
cp "$work/kvzip.jsonl.offgen.json" "$work/resume.jsonl.offgen.json"
gen "$work/resume.jsonl" --context "$work/ctx.txt" --kv-policy kvzip --kv-budget 0.4 \
  --report "$work/resume.json" 2> "$work/resume.err"
check "resumed job exits 0" test $? -eq 0
check "resume completes the output" \
  test "$(jq -S -c . "$work/resume.jsonl" | sort)" = "$(jq -S -c . "$work/kvzip.jsonl" | sort)"
check "resume reports one resumed record" test "$(jq '.requests.resumed' "$work/resume.json")" -eq 1
gen "$work/resume.jsonl" --context "$work/ctx.txt" --kv-policy kvzip --kv-budget 0.5 2> "$work/e0.err"
check "another budget does not resume the same output" grep -q "overwrite" "$work/e0.err"

# Errors.
gen "$work/e1.jsonl" --context "$work/missing.txt" 2> "$work/e1.err"
check "missing context file: names it" grep -q "missing.txt: cannot open the context file" "$work/e1.err"
gen "$work/e2.jsonl" --context "$work/ctx.txt" --kv-policy tova --kv-budget 0.5 2> "$work/e2.err"
rc=$?
check "tova cannot compress a context: exit 2 (got $rc)" test "$rc" -eq 2
check "tova: lists the context policies" grep -q "cannot compress a shared context.*kvzip" "$work/e2.err"
echo '{"id": "x", "context": "", "prompt": "hi"}' > "$work/bad.jsonl"
"$bin" generate --model "$model" --input "$work/bad.jsonl" --output "$work/bad.out" --quiet 2> /dev/null
check "empty context: an error record naming the field" \
  test "$(jq -r '.error.field + " " + .error.kind' "$work/bad.out")" = "context invalid_value"
# A line with a context under a policy that cannot compress one: that line's error record
# (field "context"), the other lines run.
printf '%s\n' '{"id": "c", "context": "Some facts.", "prompt": "Q?"}' '{"id": "p", "prompt": "Hi"}' \
  > "$work/mixed.jsonl"
"$bin" generate --model "$model" --input "$work/mixed.jsonl" --output "$work/mixed.out" \
  --kv-policy window --kv-budget 0.5 --max-tokens 2 --quiet 2> /dev/null
rc=$?
check "context line under window: exit 3, the job ran (got $rc)" test "$rc" -eq 3
check "context line under window: its record names the field" \
  test "$(jq -r 'select(.id == "c") | .error.field' "$work/mixed.out")" = "context"
check "context line under window: the other line answered" \
  test "$(jq -r 'select(.id == "p") | .usage.completion_tokens' "$work/mixed.out")" = "2"
exit $fail
