#!/usr/bin/env bash
# Time from SIGTERM to exit of `offgen generate`, per phase (issue 29: every phase must notice a
# stop within 2 s, write the journal and --report and exit 143). Run it on a quiet machine.
#
# Each case starts a job, waits until the phase is under way, sends SIGTERM to offgen and times
# until offgen has exited (report written, memory freed). "Under way" comes from the test hook
# OFFGEN_DEBUG_PAUSE=PHASE:N (the Nth stop check of PHASE waits for the signal; the job then runs
# on to its next check, so the figure is the longest stretch between two checks plus the exit),
# or, for the pipe reads, from offgen sleeping in read() with part of the input sent.
#
# Usage: bench/signals/latency.sh [OFFGEN_BINARY] [CASE...]
#   cases: load-dummy (dummy:llama-7b:q4_k), load-gguf, prepare (300,000 chat lines), plan
#   (--policy auto: the planner's search; calibration too when no profile is cached), fifo, stdin,
#   prefill (one forward of ~4000 tokens), prefill-1b (one forward of 1024 tokens on
#   dummy:llama-1b:q4_k), decode, output; default: all of them.
#   OFFGEN_MODEL: the GGUF (default: tools/get-model). Prints one TSV row per case:
#   case, exit status, interrupted_in, seconds from the signal to exit, load seconds of the report.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=${1:-$here/../../build/offgen}
shift || true
model=${OFFGEN_MODEL:-$("$here/../../tools/get-model")}
cases=("$@")
[[ ${#cases[@]} -gt 0 ]] || cases=(load-dummy load-gguf prepare plan fifo stdin prefill prefill-1b decode output)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

now() { date +%s.%N; }
offgen_of() { pgrep -P "$1" | head -1; }  # the offgen that `timeout` PID runs

# row CASE RC REPORT T0 T1
row() {
  python3 - "$@" <<'PY'
import json, sys
case, rc, report, t0, t1 = sys.argv[1:]
try:
    r = json.load(open(report))
    phase, load = r.get("interrupted_in"), r.get("load_seconds")
except Exception as e:
    phase, load = f"no report ({e.__class__.__name__})", None
print(f"{case}\t{rc}\t{phase}\t{float(t1) - float(t0):.3f}\t{load}")
PY
}

# paused CASE PHASE:N ARGS...: signal at the Nth check of PHASE.
paused() {
  local case=$1 spec=$2
  shift 2
  local err="$work/$case.err"
  rm -f "$work/$case.out" "$work/$case.out.offgen.json" "$work/$case.json"
  OFFGEN_DEBUG_PAUSE=$spec timeout 900 "$bin" generate --quiet --output "$work/$case.out" \
    --report "$work/$case.json" "$@" 2> "$err" &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null && ! grep -qs "paused in ${spec%%:*}" "$err"; do sleep 0.01; done
  local child
  child=$(offgen_of "$pid")
  local t0
  t0=$(now)
  kill -TERM "$child" 2>/dev/null
  while kill -0 "$child" 2>/dev/null; do sleep 0.005; done
  local t1
  t1=$(now)
  wait "$pid"
  row "$case" $? "$work/$case.json" "$t0" "$t1"
}

# piped CASE fifo|stdin: signal while offgen waits for the rest of the input.
piped() {
  local case=$1 how=$2
  rm -f "$work/fifo" "$work/$case.out" "$work/$case.out.offgen.json"
  mkfifo "$work/fifo"
  if [[ $how == fifo ]]; then
    timeout 900 "$bin" generate --quiet --model "$model" --input "$work/fifo" \
      --output "$work/$case.out" --report "$work/$case.json" 2> "$work/$case.err" &
  else
    timeout 900 "$bin" generate --quiet --model "$model" --input - \
      --output "$work/$case.out" --report "$work/$case.json" < "$work/fifo" 2> "$work/$case.err" &
  fi
  local pid=$!
  exec 3> "$work/fifo"
  head -3 "$work/chat.jsonl" >&3
  local child=""
  until [[ -n $child ]] && grep -q pipe "/proc/$child/wchan" 2>/dev/null; do
    child=$(offgen_of "$pid")
    sleep 0.01
  done
  local t0
  t0=$(now)
  kill -TERM "$child"
  while kill -0 "$child" 2>/dev/null; do sleep 0.005; done
  local t1
  t1=$(now)
  wait "$pid"
  local rc=$?
  exec 3>&-
  row "$case" "$rc" "$work/$case.json" "$t0" "$t1"
}

python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
with open(f"{w}/chat.jsonl", "w") as f:  # 300,000 chat requests (the issue's case)
    for i in range(300000):
        f.write(json.dumps({"id": f"c{i}", "messages": [
            {"role": "user", "content": f"Question {i}: what is {i} plus {i}?"}],
            "max_tokens": 8}) + "\n")
text = " ".join(f"word{i}" for i in range(2000))
with open(f"{w}/long.jsonl", "w") as f:
    f.write(json.dumps({"id": "long", "prompt": text, "max_tokens": 4}) + "\n")
with open(f"{w}/short.jsonl", "w") as f:
    f.write(json.dumps({"id": "short", "prompt": " ".join(["token"] * 1000), "max_tokens": 4}) + "\n")
with open(f"{w}/batch.jsonl", "w") as f:
    for i in range(64):
        f.write(json.dumps({"id": f"b{i}", "prompt": f"Write a story about {i}:",
                            "max_tokens": 64, "ignore_eos": True}) + "\n")
PY

printf 'case\texit\tinterrupted_in\tsignal_to_exit_s\tload_seconds\n'
for c in "${cases[@]}"; do
  case $c in
    load-dummy) paused "$c" load:150 --model dummy:llama-7b:q4_k --input "$work/batch.jsonl" ;;
    load-gguf) paused "$c" load:30 --model "$model" --input "$work/batch.jsonl" ;;
    prepare) paused "$c" prepare:600 --model "$model" --input "$work/chat.jsonl" --chat ;;
    plan) paused "$c" plan:100 --model "$model" --input "$work/long.jsonl" --policy auto ;;
    fifo) piped "$c" fifo ;;
    stdin) piped "$c" stdin ;;
    prefill) paused "$c" prefill:20 --model "$model" --input "$work/long.jsonl" --prefill-chunk 8192 ;;
    prefill-1b) paused "$c" prefill:10 --model dummy:llama-1b:q4_k --input "$work/short.jsonl" \
                  --prefill-chunk 8192 ;;
    decode) paused "$c" decode:500 --model "$model" --input "$work/batch.jsonl" --batch-size 64 ;;
    output) paused "$c" output:10 --model "$model" --input "$work/batch.jsonl" --batch-size 64 ;;
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
done
