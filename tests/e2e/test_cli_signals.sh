#!/usr/bin/env bash
# `offgen generate` stopped by SIGTERM in every phase (issue: every signal in every phase): model
# load (a dummy model's generated weights and a GGUF's units), request preparation over a large
# input, --policy auto's calibration, a FIFO and standard input whose writer waits, one long
# prefill forward, decode, and output writing. Each exits 143 with a report marked interrupted in that phase, and a resume
# produces the uninterrupted run's records exactly. A failure of the disk tier (EIO) and of the
# output (a file-size limit) still writes the report, with the reason.
#
# No timing: the signal is sent while the phase is observably in progress: OFFGEN_DEBUG_PAUSE=
# PHASE:N makes the Nth stop checkpoint of PHASE announce itself on stderr and wait for the signal
# (the job then stops at its next checkpoint, which must lie in the same phase); the pipe cases
# wait until offgen blocks reading. `timeout` only keeps a broken build from hanging CI.
# Usage: test_cli_signals.sh OFFGEN_BINARY MODEL_PATH (exit 77 = skipped when the model is absent).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

gen() { timeout 300 "$bin" generate --quiet "$@"; }
# offgen_of PID: the offgen process `timeout` PID runs. Signals go to it directly: `timeout` would
# pass one on twice (to its child and to its process group), and a second signal ends offgen at
# once, as it should.
offgen_of() { pgrep -P "$1" | head -1; }

# interrupt PHASE:N OUT ARGS...: runs generate paused at PHASE's Nth checkpoint, sends SIGTERM
# once it announces the pause, and checks exit 143 and a report interrupted in PHASE.
interrupt() {
  local spec=$1 out=$2
  shift 2
  local phase=${spec%%:*} err="$work/err_${spec//:/_}.txt" report="$work/report_${spec//:/_}.json"
  OFFGEN_DEBUG_PAUSE=$spec timeout 300 "$bin" generate --quiet --output "$out" --report "$report" \
    "$@" 2> "$err" &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null && ! grep -qs "paused in $phase" "$err"; do sleep 0.05; done
  kill -TERM "$(offgen_of "$pid")" 2>/dev/null
  wait "$pid"
  local rc=$?
  check "$spec: exit 143 (got $rc; $(tail -1 "$err"))" test "$rc" -eq 143
  check "$spec: says where and how to resume" grep -q "interrupted by SIGTERM (in $phase).*resume" "$err"
  report_says "$report" "$phase" "$out" || fail=1
}

# report_says REPORT PHASE OUT: marked interrupted by SIGTERM in PHASE, counts matching OUT.
report_says() {
  python3 - "$@" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))
phase, out = sys.argv[2], sys.argv[3]
lines = sum(1 for _ in open(out)) if os.path.exists(out) else 0
req = r["requests"]
ok = (r["interrupted"] is True and r["interrupted_by"] == "SIGTERM" and r["interrupted_in"] == phase
      and r["exit_code"] == 143 and r["error"] is None
      and (req["this_run"] is None or req["this_run"] == lines))
print(("ok" if ok else "FAIL") + f": {phase}: report interrupted in {r['interrupted_in']} ({req}, {lines} records)")
sys.exit(0 if ok else 1)
PY
}

# --- Model load: a dummy model's generated tensors (checks inside them) and a GGUF's units.
python3 - "$work/small.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(6):
        f.write(json.dumps({"id": f"s{i}", "prompt": f"Name three colours, number {i}:",
                            "max_tokens": 4 + i % 3, "ignore_eos": True}) + "\n")
PY
dummy=dummy:smollm2-135m:q4_k
gen --model "$dummy" --input "$work/small.jsonl" --output "$work/dummy_clean.jsonl"
interrupt load:40 "$work/dummy.jsonl" --model "$dummy" --input "$work/small.jsonl"
gen --model "$dummy" --input "$work/small.jsonl" --output "$work/dummy.jsonl"
check "load (dummy): resumed output equals the clean run" same_records "$work/dummy_clean.jsonl" "$work/dummy.jsonl"
gen --model "$model" --input "$work/small.jsonl" --output "$work/small_clean.jsonl"
interrupt load:20 "$work/gguf.jsonl" --model "$model" --input "$work/small.jsonl"
gen --model "$model" --input "$work/small.jsonl" --output "$work/gguf.jsonl"
check "load (GGUF): resumed output equals the clean run" same_records "$work/small_clean.jsonl" "$work/gguf.jsonl"

# --- Request preparation over a large input (parsing, resuming, admission): 20,000 requests
# that need no forward (max_tokens 0), stopped while the lines are parsed.
python3 - "$work/large.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(20000):
        f.write(json.dumps({"id": f"l{i}", "prompt": f"Item {i}", "max_tokens": 0}) + "\n")
PY
gen --model "$model" --input "$work/large.jsonl" --output "$work/large_clean.jsonl"
interrupt prepare:20 "$work/large.jsonl.out" --model "$model" --input "$work/large.jsonl"
gen --model "$model" --input "$work/large.jsonl" --output "$work/large.jsonl.out"
check "prepare: resumed output equals the clean run" same_records "$work/large_clean.jsonl" "$work/large.jsonl.out"

# --- --policy auto's planning: with no hardware profile cached it calibrates first; stopped
# between two calibration steps. Records do not depend on the placement: the resume runs without.
OFFGEN_PROFILE="$work/none/profile.json" interrupt plan:3 "$work/plan.jsonl" --model "$model" \
  --input "$work/small.jsonl" --policy auto --offload-dir "$work"
check "plan: no profile half written" test ! -e "$work/none/profile.json"
gen --model "$model" --input "$work/small.jsonl" --output "$work/plan.jsonl"
check "plan: resumed output equals the clean run" same_records "$work/small_clean.jsonl" "$work/plan.jsonl"

# --- A FIFO and standard input whose writer has sent part of the input and waits: the read is
# interrupted (EINTR), which must stop the job, not fail it.
# blocked_reading PID: waits (bounded) until offgen, the child of `timeout` PID, catches SIGTERM
# (its handlers are installed: with `--input - < FIFO` the shell opens the FIFO before offgen
# starts) and then sleeps in a pipe read, where the kernel shows that (/proc/PID/wchan; without
# it, a signal sent before the read must stop the job all the same).
blocked_reading() {
  local child="" mask wchan
  for _ in $(seq 2400); do
    [[ -n $child ]] || child=$(offgen_of "$1")
    if [[ -n $child ]]; then
      mask=$(awk '/^SigCgt:/ {print $2}' "/proc/$child/status" 2>/dev/null)
      (( 16#${mask:-0} & 16#4000 )) && break  # bit 15: SIGTERM
    fi
    sleep 0.05
  done
  for _ in $(seq 200); do
    wchan=$(cat "/proc/$child/wchan" 2>/dev/null) || return 0
    [[ -n $wchan && $wchan != 0 ]] || return 0  # not shown here
    [[ $wchan == *pipe* ]] && return 0
    sleep 0.05
  done
}
for how in fifo stdin; do
  rm -f "$work/fifo"
  mkfifo "$work/fifo"
  out="$work/pipe_$how.jsonl"
  if [[ $how == fifo ]]; then
    timeout 300 "$bin" generate --quiet --model "$model" --input "$work/fifo" --output "$out" \
      --report "$work/report_$how.json" 2> "$work/err_$how.txt" &
  else
    timeout 300 "$bin" generate --quiet --model "$model" --input - --output "$out" \
      --report "$work/report_$how.json" < "$work/fifo" 2> "$work/err_$how.txt" &
  fi
  pid=$!
  exec 3> "$work/fifo"  # returns once offgen opened its end
  head -3 "$work/small.jsonl" >&3
  blocked_reading "$pid"
  kill -TERM "$(offgen_of "$pid")"
  wait "$pid"
  rc=$?
  exec 3>&-
  check "$how read: exit 143 (got $rc; $(tail -1 "$work/err_$how.txt"))" test "$rc" -eq 143
  check "$how read: no 'Interrupted system call'" test -z "$(grep -i 'interrupted system call' "$work/err_$how.txt")"
  report_says "$work/report_$how.json" input "$out" || fail=1
  if [[ $how == fifo ]]; then
    cat "$work/small.jsonl" > "$work/fifo" &
    gen --model "$model" --input "$work/fifo" --output "$out"
  else
    gen --model "$model" --input - --output "$out" < "$work/small.jsonl"
  fi
  check "$how read: resumed output equals the clean run" same_records "$work/small_clean.jsonl" "$out"
done

# --- One long prefill forward (every prompt in one forward): stopped between its units.
python3 - "$work/long.jsonl" <<'PY'
import json, sys
text = " ".join(f"word{i}" for i in range(120))
with open(sys.argv[1], "w") as f:
    for i in range(2):
        f.write(json.dumps({"id": f"p{i}", "prompt": f"{i}: {text}", "max_tokens": 3}) + "\n")
PY
one_forward=(--model "$model" --input "$work/long.jsonl" --prefill-chunk 8192 --batch-size 2)
gen "${one_forward[@]}" --output "$work/long_clean.jsonl"
interrupt prefill:3 "$work/long.jsonl.out" "${one_forward[@]}"
gen "${one_forward[@]}" --output "$work/long.jsonl.out"
check "prefill: resumed output equals the clean run" same_records "$work/long_clean.jsonl" "$work/long.jsonl.out"

# --- Decode, and output writing (a batch whose requests all finish in one step: records are
# written one after another, and the job stops between two of them).
batch=(--model "$model" --input "$work/small.jsonl" --batch-size 8)
interrupt decode:50 "$work/decode.jsonl" "${batch[@]}"
gen "${batch[@]}" --output "$work/decode.jsonl"
check "decode: resumed output equals the clean run" same_records "$work/small_clean.jsonl" "$work/decode.jsonl"
python3 - "$work/same_len.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(6):
        f.write(json.dumps({"id": f"o{i}", "prompt": f"Count to {i}:", "max_tokens": 4,
                            "ignore_eos": True}) + "\n")
PY
same=(--model "$model" --input "$work/same_len.jsonl" --batch-size 8)
gen "${same[@]}" --output "$work/same_clean.jsonl"
interrupt output:2 "$work/same.jsonl" "${same[@]}"
n=$(wc -l < "$work/same.jsonl")
check "output: stopped between records ($n of 6 written)" test "$n" -gt 0 -a "$n" -lt 6
gen "${same[@]}" --output "$work/same.jsonl"
check "output: resumed output equals the clean run" same_records "$work/same_clean.jsonl" "$work/same.jsonl"

# --- A fatal I/O error still writes the report, with the reason: EIO on the disk tier (the KV
# cache on disk, its 3rd I/O op failing) and a write of the output refused (a file-size limit).
# fatal_report REPORT CATEGORY PATTERN: the report names the failure, exit 1, not interrupted.
fatal_report() {
  python3 - "$@" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
e = r["error"]
ok = (e is not None and e["category"] == sys.argv[2] and re.search(sys.argv[3], e["message"])
      and e["phase"] in ("prepare", "prefill", "decode", "output") and r["exit_code"] == 1
      and r["interrupted"] is False)
print(("ok" if ok else "FAIL") + f": report of a failed job: {e}")
sys.exit(0 if ok else 1)
PY
}
OFFGEN_DEBUG_IO_FAULT=eio@3 gen --model "$model" --input "$work/small.jsonl" \
  --output "$work/eio.jsonl" --percent 100 0 0 0 100 0 --batch-size 2 --offload-dir "$work" \
  --report "$work/report_eio.json" 2> "$work/err_eio.txt"
rc=$?
check "EIO on the disk tier: exit 1 (got $rc; $(tail -1 "$work/err_eio.txt"))" test "$rc" -eq 1
fatal_report "$work/report_eio.json" io "Input/output error" || fail=1
gen --model "$model" --input "$work/small.jsonl" --output "$work/eio.jsonl" \
  --percent 100 0 0 0 100 0 --batch-size 2 --offload-dir "$work"
check "EIO: resumed output equals the clean run" same_records "$work/small_clean.jsonl" "$work/eio.jsonl"
python3 - "$work/tiny.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(60):  # ~7 KB of records
        f.write(json.dumps({"id": f"t{i}", "prompt": f"Say {i}:", "max_tokens": 1}) + "\n")
PY
(trap '' XFSZ; ulimit -f 4  # 4 KiB per file: the report fits, the output (~7 KB) does not
 gen --model "$model" --input "$work/tiny.jsonl" --output "$work/fsize.jsonl" --batch-size 16 \
   --report "$work/report_fsize.json" 2> "$work/err_fsize.txt")
rc=$?
check "output write refused: exit 1 (got $rc; $(tail -1 "$work/err_fsize.txt"))" test "$rc" -eq 1
fatal_report "$work/report_fsize.json" io "write failed" || fail=1
exit $fail
