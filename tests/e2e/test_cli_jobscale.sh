#!/usr/bin/env bash
# `generate --policy auto` at job scale (issue 32) on a random-weight model whose weights do not
# fit the RAM limit: the plan streams them from disk in blocks of requests, with the plan's
# roofline bound in the report and a progress line per block; SIGTERM inside a block, then a
# resume, gives exactly the uninterrupted run's records. And profiles a plan must not trust: one
# measured on a busy machine, and one whose times the machine cannot reproduce now, are flagged.
# Usage: test_cli_jobscale.sh OFFGEN_BINARY dummy:PRESET
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

export OFFGEN_PROFILE="$work/profile.json"
# The machine's load does not matter here: its provenance is injected below.
"$bin" calibrate --quick --allow-busy --offload-dir "$work" --model "$model" --threads 1 \
  > "$work/cal.txt" 2> "$work/cal.err"
check "calibrate exits 0" test $? -eq 0
python3 - "$work/profile.json" <<'PY' || fail=1
import json, sys
p = json.load(open(sys.argv[1]))
ok = all(k in p["provenance"] for k in ("measured_at", "cpu_model", "kernel", "loadavg", "others_cpu", "rounds", "spread"))
ok = ok and p["provenance"]["rounds"] == 2 and p["compute"][0]["provenance"]["rounds"] == 2
print(("ok" if ok else "FAIL") + ": the profile records provenance (time, CPU, kernel, load, rounds, spread)")
sys.exit(0 if ok else 1)
PY

python3 - "$work/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(48):  # lengths that differ: requests finish inside their block
        f.write(json.dumps({"id": f"q{i}", "prompt": f"Request {i} of the job reads", "max_tokens": 2 + (7 * i) % 23}) + "\n")
PY
# 64 MiB of RAM: the weights (~90 MiB) cannot all be in it.
gen() { "$bin" generate --model "$model" --threads 1 --policy auto --cpu-mem 64M --offload-dir "$work" --input "$work/in.jsonl" "$@"; }
gen --output "$work/clean.jsonl" --report "$work/clean_report.json" 2> "$work/clean.err"
rc=$?
check "clean run exits 0 (got $rc)" test "$rc" -eq 0
check "the job prints the profile's provenance" grep -q "profile .*: disk and RAM figures measured " "$work/clean.err"
check "the job prints the plan's bound" grep -q "policy auto: bound .* tok/s total (.* binds the job" "$work/clean.err"
check "a line per finished block" grep -q "offgen: block 1/[0-9]* done: " "$work/clean.err"
check "progress names the block and its ETA" grep -q "progress: block [0-9]*/[0-9]*: .* ETA .* | job " "$work/clean.err"
python3 - "$work/clean_report.json" "$OFFGEN_PROFILE" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
prof = json.load(open(sys.argv[2]))
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: sys.exit(1)
plan = r["plan"]
expect(r["weight_bytes"]["disk"] > 0, "the weights stream from disk")
expect(r["io_bytes"]["disk_read"] > 0, "read from disk during the job")
expect(1 < r["batch_size"] < 48, f"blocks of requests (batch {r['batch_size']} of 48)")
rl = plan["roofline"]
expect(rl["binding"] in ("disk", "compute", "memory") and rl["bound_total_throughput"] > 0, "the roofline bound")
for step in ("prefill_forward", "decode_step"):
    s = rl[step]
    expect(all(s[k] > 0 for k in ("disk_seconds", "compute_seconds", "memory_seconds")), step + ": each resource's time")
expect(rl["blocks"] >= 2 and rl["block"] * rl["blocks"] >= 48, "the workload in blocks")
expect(plan["bound_fraction"] > 0, "achieved fraction of the bound")
expect(plan["predicted_total_throughput"] > 0, "predicted beside the bound")
# The provenance of the figures the plan used: the calibration's (2 rounds), or, where that ran on
# a busy machine and the job found it quiet, the job's own measurement (saved to the profile).
expect(plan["profile"]["transfers"] == prof["provenance"] and
       plan["profile"]["transfers"]["rounds"] in (2, 3), "the profile's provenance in the report")
PY

# SIGTERM inside a block: the first records of the first block are written, others still run.
"$bin" generate --model "$model" --threads 1 --policy auto --cpu-mem 64M --offload-dir "$work" \
  --input "$work/in.jsonl" --output "$work/stop.jsonl" --report "$work/stop_report.json" \
  -q 2> "$work/stop.err" &
pid=$!
while kill -0 "$pid" 2>/dev/null && [[ $(cat "$work/stop.jsonl" 2>/dev/null | wc -l) -lt 1 ]]; do sleep 0.01; done
kill -TERM "$pid"
wait "$pid"
rc=$?
check "SIGTERM: exit 143 (got $rc)" test "$rc" -eq 143
python3 - "$work/stop_report.json" "$work/stop.jsonl" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
lines = sum(1 for _ in open(sys.argv[2]))
req = r["requests"]
ok = r["interrupted"] and 0 < lines < req["total"] and req["unfinished"] > 0 and req["total"] - req["unfinished"] == lines
print(("ok" if ok else "FAIL") + f": stopped inside the job with its finished records kept ({lines} records, {req})")
sys.exit(0 if ok else 1)
PY
gen --output "$work/stop.jsonl" -q 2> "$work/resume.err"
check "resume exits 0" test $? -eq 0
check "resume says what it resumes" grep -q "resuming: [0-9]* of 48 records" "$work/resume.err"
python3 - "$work/clean.jsonl" "$work/stop.jsonl" <<'PY' || fail=1
import json, sys
clean = {r["id"]: r for r in map(json.loads, open(sys.argv[1]))}
got = [json.loads(l) for l in open(sys.argv[2])]
ok = len(got) == len({r["id"] for r in got}) == len(clean) == 48 and all(clean[r["id"]] == r for r in got)
print(("ok" if ok else "FAIL") + ": stopped and resumed output equals the uninterrupted one")
sys.exit(0 if ok else 1)
PY

# Profiles a plan must not trust. Busy: provenance says other processes held 90% of the CPU.
plan() { "$bin" plan --model "$model" --threads 1 --prompt-len 16 --gen-len 8 --num-requests 64 \
  --cpu-mem 64M --offload-dir "$work" --profile "$1" --json "$work/plan.json" > "$work/plan.txt" 2> "$work/plan.err"; }
python3 - "$work/profile.json" "$work/busy.json" "$work/fast.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
busy = json.loads(json.dumps(p))
for prov in [busy["provenance"]] + [c["provenance"] for c in busy["compute"]]:
    prov.update(others_cpu=0.9, loadavg=3.9)
json.dump(busy, open(sys.argv[2], "w"))
# Quiet provenance, times a hundredth of what they measured (a load then or now cannot close
# that gap).
fast = json.loads(json.dumps(p))
for prov in [fast["provenance"]] + [c["provenance"] for c in fast["compute"]]:
    prov.update(others_cpu=0.0, loadavg=0.0, spread=0.0)
for k in ("disk_read", "disk_write", "ram_copy"):
    fast[k]["seconds"] = [s / 100 for s in fast[k]["seconds"]]
for c in fast["compute"]:
    for k in ("mlp", "attn_base", "output", "prefill_pair", "prefill_pair_evict"):
        c[k]["seconds"] = [s / 100 for s in c[k]["seconds"]]
    c["decode_pair"] /= 100
    c["decode_pair_evict"] /= 100
json.dump(fast, open(sys.argv[3], "w"))
PY
plan "$work/busy.json"
check "plan from a busy profile exits 0" test $? -eq 0
check "plan from a busy profile warns (stderr)" grep -q "warning: the disk and RAM figures were measured on a busy machine" "$work/plan.err"
check "plan from a busy profile warns (the plan)" grep -q "^# warning: the compute figures .* were measured on a busy machine" "$work/plan.txt"
check "plan prints the roofline per step" grep -q "^#   decode step ([0-9]* per block): disk .* binds$" "$work/plan.txt"
check "plan prints the bound beside the prediction" grep -q "^# bound: .* tok/s total .*; predicted .* of the bound" "$work/plan.txt"
plan "$work/fast.json"
check "plan from a profile 100x too fast exits 0" test $? -eq 0
check "plan from a profile 100x too fast: the re-check flags the GEMM" grep -q "warning: the profile's MLP unit at [0-9]* rows takes .* now" "$work/plan.err"
check "plan from a profile 100x too fast: the re-check flags the disk" grep -q "warning: the profile's disk read .* now" "$work/plan.err"
python3 - "$work/plan.json" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
pts = j["profile"]["recheck"]["points"]
ok = len(pts) == 2 and all(p["differs"] and p["ratio"] > 1.25 for p in pts) and j["profile"]["warnings"]
print(("ok" if ok else "FAIL") + f": the plan's JSON records the re-check ({pts})")
sys.exit(0 if ok else 1)
PY
exit $fail
