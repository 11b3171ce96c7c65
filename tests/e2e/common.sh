# Shared set-up of the end-to-end scripts (sourced): arguments OFFGEN_BINARY MODEL_PATH, exit 77
# (CTest "skipped") with the reason when the model is absent, a scratch dir removed at exit, and
# check DESCRIPTION COMMAND... which records a failure in $fail.
set -uo pipefail
bin=$1
model=${2:-}
if [[ -z "$model" || ! -f "$model" ]]; then
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
