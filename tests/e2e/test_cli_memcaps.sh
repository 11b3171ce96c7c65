#!/usr/bin/env bash
# End-to-end check that the memory caps hold (docs/offloading.md, "What the caps count"): a job
# under --cpu-mem and --disk-mem, planned by --policy auto on first use (no profile cached, so
# the calibration runs within the caps too) and then placed by --percent with activations half
# on disk, keeps what the stores allocate (the report's peak_bytes) within each cap, and the
# process's anonymous memory (sampled from /proc every 2 ms, and the report's own sample) within
# --cpu-mem plus the stated fixed overhead: what the process held as it started (the report's
# memory.startup_anon_bytes: the libraries) and 96 MiB. Both runs give the same records.
# Usage: test_cli_memcaps.sh OFFGEN_BINARY MODEL_PATH (SmolLM2 or Gemma 3 270M; exit 77 =
# skipped when the model is absent).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Caps below the model's weights in RAM, so that some of them go to disk.
case "$(basename "$model")" in
  gemma-3-270m*) cpu_mem=230M disk_mem=128M ;;  # 170 MiB resident embedding, 76 MiB of units
  *) cpu_mem=80M disk_mem=64M ;;                # SmolLM2: 29 MiB resident, 63 MiB of units
esac
mib() { echo $(( ${1%M} * 1048576 )); }

for i in 1 2 3 4 5 6; do
  printf '{"id": "r%d", "prompt": "Write a short story number %d about a cat who", "max_tokens": 6}\n' \
    "$i" "$i"
done > "$work/in.jsonl"

# run NAME ARGS...: generate under the caps with the profile cache in an empty dir, its
# anonymous memory sampled; writes $work/NAME.{out,err,json,anon}.
export OFFGEN_PROFILE="$work/profile/profile.json"
run() {
  local name=$1; shift
  python3 - "$work/$name.anon" "$bin" generate --model "$model" --input "$work/in.jsonl" \
    --output "$work/$name.out" --report "$work/$name.json" --offload-dir "$work" \
    --cpu-mem "$cpu_mem" --disk-mem "$disk_mem" --quiet "$@" 2> "$work/$name.err" <<'PY'
import subprocess, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
p = subprocess.Popen(cmd)
peak = 0
while p.poll() is None:
    try:
        with open(f"/proc/{p.pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
    except OSError:
        pass
    time.sleep(0.002)
open(out, "w").write(str(peak))
sys.exit(p.returncode)
PY
}

run auto --policy auto
rc=$?
check "policy auto under the caps exits 0 (got $rc)" test "$rc" -eq 0
check "the first-use calibration says so, and keeps to --cpu-mem" \
  grep -q "measuring them once (best of [0-9]* rounds, within" "$work/auto.err"
run placed --percent 0 60 0 60 0 50
rc=$?
check "--percent with activations on disk, batch sized by the caps, exits 0 (got $rc)" \
  test "$rc" -eq 0

python3 - "$work" "$(mib $cpu_mem)" "$(mib $disk_mem)" <<'PY' || fail=1
import json, os, sys
work, cpu, disk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
overhead = 96 << 20
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: sys.exit(1)
texts = {}
for name in ("auto", "placed"):
    r = json.load(open(f"{work}/{name}.json"))
    peak, mem = r["peak_bytes"], r["memory"]
    expect(r["requests"]["succeeded"] == 6, f"{name}: every request ran")
    expect(peak["device"] + peak["host"] <= cpu,
           f"{name}: the stores' RAM {peak['device'] + peak['host']} within --cpu-mem {cpu}")
    expect(peak["disk"] <= disk, f"{name}: the stores' disk {peak['disk']} within --disk-mem {disk}")
    expect(peak["disk"] > 0, f"{name}: the caps put something on disk")
    bound = cpu + mem["startup_anon_bytes"] + overhead
    sampled = int(open(f"{work}/{name}.anon").read())
    if os.environ.get("OFFGEN_SANITIZER"):  # the asan test preset: shadow memory and quarantine
        print(f"note: {name}: process memory not bounded under the {os.environ['OFFGEN_SANITIZER']} "
              f"sanitizer (its shadow memory and freed-block quarantine are anonymous memory); "
              f"sampled {sampled >> 20} MiB")
    else:
        expect(0 < sampled <= bound, f"{name}: sampled peak anonymous memory {sampled >> 20} MiB "
               f"within --cpu-mem + {mem['startup_anon_bytes'] >> 20} MiB at start + 96 MiB = "
               f"{bound >> 20} MiB")
        expect(0 < mem["peak_anon_bytes"] <= bound,
               f"{name}: the report's peak_anon_bytes {mem['peak_anon_bytes'] >> 20} MiB within it too")
    expect(r["peak_rss_bytes"] >= mem["peak_anon_bytes"], f"{name}: peak_rss_bytes beside it")
    texts[name] = {json.loads(l)["id"]: json.loads(l)["text"] for l in open(f"{work}/{name}.out")}
expect(texts["auto"] == texts["placed"], "the same records under either placement")
PY
exit $fail
