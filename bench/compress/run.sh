#!/usr/bin/env bash
# FlexGen's group-wise 4-bit compression on SmolLM2 (issue 8's figures): (1) the perplexity cost of
# --compress-weight / --compress-cache / both (teacher-forced ppl of tokens 512..2047 of four
# Debian licence texts, full cache, the protocol of bench/kv/run_quality.sh), and (2) disk bytes
# read per decode step and decode throughput with the weights 100% on disk, f32 vs bf16 vs
# 4-bit. Writes ppl.txt, disk.json and summary.md next to this script.
# Usage: bench/compress/run.sh [OFFGEN_BINARY] (default build/offgen); ~10 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build/offgen}
out=bench/compress
model=$(tools/get-model)
texts=/usr/share/common-licenses/GPL-3,/usr/share/common-licenses/GFDL-1.3
texts+=,/usr/share/common-licenses/MPL-2.0,/usr/share/common-licenses/Apache-2.0
offload=$(mktemp -d "${TMPDIR:-/tmp}/offgen-compress.XXXXXX")
trap 'rm -rf "$offload"' EXIT

: > $out/ppl.txt
for flags in "" "--compress-weight" "--compress-cache" "--compress-weight --compress-cache"; do
  # shellcheck disable=SC2086
  "$bin" eval ppl --model "$model" --text "$texts" --tokens 2048 --prefix 512 --threads 2 \
    --kv-policy full --kv-budget 1 $flags --json "$offload/ppl.json" >/dev/null
  ppl=$(python3 -c "import json,sys; r=[x for x in json.load(open(sys.argv[1])) if x['metric']=='ppl' and x['text']=='all']; print(r[0]['value'])" "$offload/ppl.json")
  echo "${flags:-none}	$ppl" | tee -a $out/ppl.txt
done

runs=()
for storage in "--weight-dtype f32" "--weight-dtype bf16" "--compress-weight"; do
  # shellcheck disable=SC2086
  "$bin" bench --model "$model" --prompt-len 64 --gen-len 8 --gpu-batch-size 4 \
    --percent 0 0 100 0 100 0 --threads 2 --offload-dir "$offload" $storage \
    --json "$offload/bench.json" >/dev/null
  runs+=("$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); r['storage']=sys.argv[2]; print(json.dumps(r))" "$offload/bench.json" "$storage")")
done
printf '%s\n' "${runs[@]}" | python3 -c "
import json, sys
runs = [json.loads(l) for l in sys.stdin]
json.dump(runs, open('$out/disk.json', 'w'), indent=1)
ppl = [l.rstrip('\n').split('\t') for l in open('$out/ppl.txt')]
with open('$out/summary.md', 'w') as f:
    f.write('| compression | perplexity | vs none |\n|---|---:|---:|\n')
    for name, v in ppl:
        f.write(f'| {name} | {float(v):.3f} | {float(v) / float(ppl[0][1]):.3f}x |\n')
    f.write('\n| weight storage | disk read per forward | vs f32 | decode tok/s |\n|---|---:|---:|---:|\n')
    base = None
    for r in runs:
        per = r['io_bytes']['disk_read'] / 8  # 1 prefill + 7 decode forwards, each reads every unit once
        base = base or per
        f.write(f\"| {r['storage']} | {per / 2**20:.1f} MiB | {base / per:.2f}x | {r['decode_throughput']:.1f} |\n\")
print(open('$out/summary.md').read())
"
