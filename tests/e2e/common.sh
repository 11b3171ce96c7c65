# Shared set-up of the end-to-end scripts (sourced): arguments OFFGEN_BINARY MODEL_PATH (or a
# dummy:PRESET model, always present), exit 77 (CTest "skipped") with the reason when the model is
# absent, a scratch dir removed at exit, check DESCRIPTION COMMAND... which records a failure in
# $fail, and same_records CLEAN OUT.
set -uo pipefail
bin=$1
model=${2:-}
if [[ "$model" != dummy:* && ( -z "$model" || ! -f "$model" ) ]]; then
  echo "SKIP: default model not found (run tools/get-model, or set OFFGEN_MODEL)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}
# same_records CLEAN OUT: every id of CLEAN exactly once in OUT with an identical record.
same_records() {
  python3 - "$1" "$2" <<'PY'
import json, sys
def rid(r): return r["custom_id"] if "custom_id" in r else r["id"]
clean = {rid(r): r for r in map(json.loads, open(sys.argv[1]))}
got = [json.loads(l) for l in open(sys.argv[2])]
ids = [rid(r) for r in got]
ok = len(ids) == len(set(ids)) == len(clean) and all(clean.get(rid(r)) == r for r in got)
if not ok:
    print(f"  {len(got)} records, {len(set(ids))} distinct, clean has {len(clean)}; "
          f"differing: {[rid(r) for r in got if clean.get(rid(r)) != r][:5]}")
sys.exit(0 if ok else 1)
PY
}
