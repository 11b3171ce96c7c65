#!/usr/bin/env bash
# `offgen generate` on an input that mixes valid lines with many kinds of bad ones: every bad
# line gets exactly one error record with its id, line number, kind and field; every valid line is
# answered; blank lines are skipped (they keep their line numbers); a BOM on line 1 and CRLF line
# endings are accepted; exit code 3, the summary line and the --report JSON agree. A second run
# resumes everything and reports the same counts.
# Usage: test_cli_bad_lines.sh OFFGEN_BINARY MODEL_PATH (exit 77 = skipped when the model is absent).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Writes in.jsonl and expect.json: per non-blank line its id, and for bad lines kind and field.
python3 - "$work/in.jsonl" "$work/expect.json" <<'PY'
import json, sys
OK, SKIP = "ok", "skip"
def oa(cid, body, url="/v1/completions", method="POST"):
    d = {"custom_id": cid, "method": method, "url": url}
    if body is not None: d["body"] = body
    return json.dumps(d).encode()
def simple(**kw): return json.dumps(kw).encode()
chat = [{"role": "user", "content": "Say hi."}]
rows = [  # (line bytes, expected id, kind or OK/SKIP, field or None, what this tests)
  (b"\xef\xbb\xbf" + simple(id="bom-first", prompt="The sky is"), "bom-first", OK, None, "UTF-8 BOM on line 1"),
  (simple(id="crlf", prompt="Once upon a time") + b"\r", "crlf", OK, None, "CRLF line ending"),
  (b"", None, SKIP, None, "blank line"),
  (b" \t \r", None, SKIP, None, "whitespace-only line (CRLF)"),
  (b'{"id": "syntax", "prompt": }', "line-5", "invalid_json", None, "invalid JSON"),
  (b'{"id": "trunc", "prompt": "The quick brown', "line-6", "invalid_json", None, "truncated line"),
  (simple(id="trailing", prompt="x") + b' {"id": "second"}', "line-7", "invalid_json", None, "two objects on one line"),
  (b"[1, 2, 3]", "line-8", "not_an_object", None, "array instead of object"),
  (b"42", "line-9", "not_an_object", None, "number instead of object"),
  (b'"just a string"', "line-10", "not_an_object", None, "string instead of object"),
  (b"null", "line-11", "not_an_object", None, "null instead of object"),
  (simple(id="no-prompt", max_tokens=3), "no-prompt", "missing_field", "prompt", "missing prompt"),
  (simple(id="both", prompt="x", messages=chat), "both", "conflicting_fields", "messages", "prompt and messages"),
  (simple(id="unknown", prompt="x", colour="red"), "unknown", "unknown_field", "colour", "unknown field"),
  (simple(id="prompt-num", prompt=5), "prompt-num", "wrong_type", "prompt", "prompt as number"),
  (simple(id="maxtok-str", prompt="x", max_tokens="10"), "maxtok-str", "wrong_type", "max_tokens", "max_tokens as string"),
  (simple(id="stop-num", prompt="x", stop=3), "stop-num", "wrong_type", "stop", "stop as number"),
  (simple(id="maxtok-neg", prompt="x", max_tokens=-1), "maxtok-neg", "invalid_value", "max_tokens", "negative max_tokens"),
  (b'{"id": "maxtok-huge", "prompt": "x", "max_tokens": 18446744073709551615}', "maxtok-huge", "invalid_value", "max_tokens", "max_tokens beyond int64"),
  (simple(id="temp-high", prompt="x", temperature=250), "temp-high", "invalid_value", "temperature", "temperature out of range"),
  (simple(id="top-p-zero", prompt="x", top_p=0), "top-p-zero", "invalid_value", "top_p", "top_p = 0"),
  (simple(id="top-p-high", prompt="x", top_p=1.5), "top-p-high", "invalid_value", "top_p", "top_p > 1"),
  (simple(id="top-k-neg", prompt="x", top_k=-3), "top-k-neg", "invalid_value", "top_k", "negative top_k"),
  (simple(id="seed-float", prompt="x", seed=1.5), "seed-float", "wrong_type", "seed", "non-integer seed"),
  (simple(id="seed-neg", prompt="x", seed=-7), "seed-neg", "invalid_value", "seed", "negative seed"),
  (simple(id="crlf", prompt="again"), "crlf#line-26", "duplicate_id", "id", "duplicate id"),
  (simple(id="", prompt="x"), "line-27", "invalid_value", "id", "empty id"),
  (simple(id=True, prompt="x"), "line-28", "wrong_type", "id", "id of the wrong type"),
  (simple(id="bad-role", messages=[{"role": "wizard", "content": "x"}]), "bad-role", "invalid_value", "messages[0].role", "message with a bad role"),
  (simple(id="no-content", messages=[{"role": "user"}]), "no-content", "missing_field", "messages[0].content", "message without content"),
  (simple(id="no-messages", messages=[]), "no-messages", "invalid_value", "messages", "empty messages array"),
  (oa("oa-url", {"prompt": "x"}, url="/v1/embeddings"), "oa-url", "invalid_value", "url", "OpenAI: wrong url"),
  (oa("oa-method", {"prompt": "x"}, method="GET"), "oa-method", "invalid_value", "method", "OpenAI: wrong method"),
  (oa("oa-n", {"prompt": "x", "n": 2}), "oa-n", "invalid_value", "body.n", "OpenAI: n != 1"),
  (oa("oa-no-body", None), "oa-no-body", "missing_field", "body", "OpenAI: body missing"),
  (oa("oa-top-p", {"prompt": "x", "top_p": 0}), "oa-top-p", "invalid_value", "body.top_p", "OpenAI: body value out of range"),
  (oa("oa-chat-prompt", {"prompt": "x"}, url="/v1/chat/completions"), "oa-chat-prompt", "unknown_field", "body.prompt", "OpenAI: prompt on the chat url"),
  (b'{"method": "POST", "url": "/v1/completions", "body": {"prompt": "x"}}', "line-38", "missing_field", "custom_id", "OpenAI: custom_id missing"),
  (simple(id="too-long", prompt=" ".join(["word"] * 200)), "too-long", "prompt_too_long", "prompt", "prompt over the context window"),
  (b'{"id": "bad-utf8", "prompt": "caf\xc3 \xff\xfe"}', "bad-utf8", "invalid_utf8", "prompt", "invalid UTF-8 bytes in a string"),
  (b'{"id": "dup-key", "prompt": "x", "prompt": "y"}', "dup-key", "duplicate_key", "prompt", "duplicate key"),
  (simple(id="empty-prompt", prompt=""), "empty-prompt", "invalid_value", "prompt", "empty prompt"),
  (simple(id="empty-stop", prompt="x", stop=["a", ""]), "empty-stop", "invalid_value", "stop[1]", "empty stop string"),
  (simple(id="huge-prompt", prompt="lorem ipsum " * 100000), "huge-prompt", "prompt_too_long", "prompt", "very long line (1.2 MB prompt)"),
  (b'{"id": "huge-garbage", "prompt": "' + b"x" * 2000000, "line-45", "invalid_json", None, "very long truncated line (2 MB)"),
  (simple(id="good-1", prompt="The capital of France is"), "good-1", OK, None, "valid simple line"),
  (simple(id="good-chat", messages=chat, max_tokens=2), "good-chat", OK, None, "valid messages line"),
  (oa("good-oa", {"model": "m", "prompt": "Hello", "max_tokens": 2}), "good-oa", OK, None, "valid OpenAI completion line"),
  (oa("good-oa-chat", {"messages": chat}, url="/v1/chat/completions"), "good-oa-chat", OK, None, "valid OpenAI chat line"),
  (simple(id="good-unicode", prompt="Café — 世界"), "good-unicode", OK, None, "valid non-ASCII prompt"),
  (simple(id="good-zero", prompt="x", max_tokens=0), "good-zero", OK, None, "valid max_tokens 0"),
  (simple(id="", prompt="y"), "line-52", "invalid_value", "id", "a second empty id: invalid too, not a duplicate"),
  (b'{"id": "num-huge", "prompt": "x", "max_tokens": 1e999}', "line-53", "invalid_value", "max_tokens", "a number beyond a double (the line is not read further: generated id)"),
  (simple(id="good-parts", messages=[{"role": "user", "content": [{"type": "text", "text": "Say"}, {"type": "text", "text": "hi."}]}], max_tokens=2),
   "good-parts", OK, None, "valid content given as text parts"),
  (simple(id="image-part", messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
   "image-part", "unknown_field", "messages[0].content[0].image_url", "a non-text content part"),
  (simple(prompt="no id here", max_tokens=2), "line-56#2", OK, None, "no id, and a later line's own id is line-56"),
  (b"{broken", "line-57#2", "invalid_json", None, "broken line, and a later line's own id is line-57"),
  (simple(id="line-56", prompt="y", max_tokens=2), "line-56", OK, None, "own id equal to an earlier line's generated one"),
  (simple(id="line-57", prompt="z", max_tokens=2), "line-57", OK, None, "own id equal to a broken line's generated one"),
  (oa("oa-nulls", {"prompt": "Hi", "max_tokens": None, "stop": None, "temperature": None, "seed": None}),
   "oa-nulls", OK, None, "null in optional OpenAI fields: absent, as the API reads it"),
  (b'{"custom_id": "oa-maxtok-2p64", "body": {"prompt": "x", "max_tokens": 18446744073709551617}}',
   "oa-maxtok-2p64", "invalid_value", "body.max_tokens", "an integer beyond 64 bits: out of range"),
  (b"", None, SKIP, None, "blank line before the last one"),
  (simple(id="good-last", prompt="The end") + b"\r", "good-last", OK, None, "valid last line, CRLF"),
]
expect = []
with open(sys.argv[1], "wb") as f:
    for no, (raw, rid, kind, field, what) in enumerate(rows, 1):
        f.write(raw + b"\n")
        if kind != SKIP:
            expect.append({"line": no, "id": rid, "kind": kind, "field": field, "what": what,
                           "openai": b"\"custom_id\"" in raw or b"\"body\"" in raw})
json.dump(expect, open(sys.argv[2], "w"))
print(f"{len(rows)} lines: {sum(e['kind'] == OK for e in expect)} valid, "
      f"{len({e['kind'] for e in expect if e['kind'] != OK})} error kinds, "
      f"{sum(e['kind'] != OK for e in expect)} bad lines")
PY

"$bin" generate --model "$model" --input "$work/in.jsonl" --output "$work/out.jsonl" \
  --max-context 64 --max-tokens 3 --quiet --report "$work/report.json" 2> "$work/err.txt"
rc=$?
cat "$work/err.txt"
check "exit code 3 when some records failed (got $rc)" test "$rc" -eq 3
check "no report temp file left" test -z "$(ls "$work" | grep 'report.json.tmp')"

python3 - "$work/expect.json" "$work/out.jsonl" "$work/report.json" "$work/err.txt" <<'PY' || fail=1
import json, re, sys
expect = json.load(open(sys.argv[1]))
recs = [json.loads(l) for l in open(sys.argv[2], "rb")]
report = json.load(open(sys.argv[3]))
summary = open(sys.argv[4]).read()
bad = 0
def check(cond, what):
    global bad
    if not cond:
        bad += 1
        print("FAIL: " + what)
def rid(r): return r["custom_id"] if "custom_id" in r else r["id"]
by_id = {}
for r in recs:
    check(rid(r) not in by_id, f"id {rid(r)!r} written once")
    by_id[rid(r)] = r
check(len(recs) == len(expect), f"one record per non-blank line ({len(recs)} records, {len(expect)} lines)")
for e in expect:
    r = by_id.get(e["id"])
    tag = f"line {e['line']} ({e['what']})"
    if r is None:
        check(False, f"{tag}: no record with id {e['id']!r}")
        continue
    if e["kind"] == "ok":
        if e["openai"]:
            ok = r.get("error") is None and r["response"]["status_code"] == 200
            usage = r["response"]["body"]["usage"] if ok else {}
        else:
            ok = "error" not in r and isinstance(r.get("text"), str)
            usage = r.get("usage", {})
        check(ok and usage.get("prompt_tokens", 0) > 0, f"{tag}: answered ({json.dumps(r)[:200]})")
        continue
    err = r.get("error") or {}
    msg = err.get("message", "")
    check(err.get("line") == e["line"], f"{tag}: error.line {err.get('line')} == {e['line']}")
    check(msg.startswith(f"line {e['line']}: "), f"{tag}: message names the line: {msg[:120]!r}")
    check(err.get("kind") == e["kind"], f"{tag}: kind {err.get('kind')!r} == {e['kind']!r}")
    check(err.get("field") == e["field"], f"{tag}: field {err.get('field')!r} == {e['field']!r}")
    if e["field"]:
        check(f"field '{e['field']}'" in msg, f"{tag}: message names field {e['field']!r}: {msg[:160]!r}")
    check(len(msg) < 400, f"{tag}: message is short ({len(msg)} bytes)")
    if e["openai"]:
        check(r.get("response", 0) is None and err.get("code") == "invalid_request",
              f"{tag}: OpenAI error shape")
n_bad = sum(e["kind"] != "ok" for e in expect)
n_ok = len(expect) - n_bad
m = re.search(r"done: (\d+) requests \((\d+) resumed from an earlier run\), (\d+) failed", summary)
check(m is not None and m.groups() == (str(len(expect)), "0", str(n_bad)),
      f"summary line counts {m.groups() if m else summary!r}")
req = report.get("requests", {})
check(req == {"total": len(expect), "succeeded": n_ok, "failed": n_bad, "resumed": 0,
              "this_run": len(expect), "unfinished": 0, "max_tokens_clamped": 0},
      f"report requests {req}")
kinds, fields = {}, {}
for e in expect:
    if e["kind"] == "ok": continue
    kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    if e["field"]: fields[e["field"]] = fields.get(e["field"], 0) + 1
check(report.get("errors") == {"by_kind": kinds, "by_field": fields}, f"report errors {report.get('errors')}")
for k in ["load_seconds", "prefill_seconds", "decode_seconds", "wall_seconds", "prefill_throughput",
          "decode_throughput", "total_throughput"]:
    check(isinstance(report.get(k), (int, float)) and report[k] > 0, f"report {k} > 0 ({report.get(k)})")
check(report["wall_seconds"] >= report["load_seconds"] + report["generate_seconds"] * 0.99,
      "wall covers load and generation")
check(set(report.get("peak_bytes", {})) == {"device", "host", "disk"} and report["peak_bytes"]["host"] > 0,
      f"report peak_bytes {report.get('peak_bytes')}")
check(set(report.get("io_bytes", {})) == {"disk_read", "disk_write", "h2d", "d2h"}, "report io_bytes keys")
tok = report.get("tokens", {})
check(tok.get("prefill", 0) > 0 and tok.get("completion", 0) > 0, f"report tokens {tok}")
print(f"{'FAIL' if bad else 'ok'}: {len(expect)} lines checked ({n_ok} valid, {n_bad} bad, "
      f"{len(kinds)} error kinds), report counts")
sys.exit(1 if bad else 0)
PY

# Re-running resumes every record: nothing is generated again, the counts stay the same.
"$bin" generate --model "$model" --input "$work/in.jsonl" --output "$work/out.jsonl" \
  --max-context 64 --max-tokens 3 --quiet --report "$work/report2.json" 2> "$work/err2.txt"
rc=$?
check "resumed run: exit code 3 (got $rc)" test "$rc" -eq 3
python3 - "$work/report.json" "$work/report2.json" "$work/out.jsonl" <<'PY' || fail=1
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
lines = sum(1 for _ in open(sys.argv[3], "rb"))
ra, rb = a["requests"], b["requests"]
ok = (rb["resumed"] == rb["total"] == ra["total"] == lines and rb["this_run"] == 0
      and rb["failed"] == ra["failed"] and rb["succeeded"] == ra["succeeded"]
      and b["errors"] == a["errors"] and b["tokens"]["completion"] == 0)
print(("ok" if ok else "FAIL") + f": resumed run reports the same counts ({rb}, {lines} records)")
sys.exit(0 if ok else 1)
PY
exit $fail
