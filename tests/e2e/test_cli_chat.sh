#!/usr/bin/env bash
# End-to-end checks of chat templates in `offgen generate`: a template the engine cannot use
# refuses the job before any record is written (exit 2, one line naming the model and the
# problem); a template that raises for one conversation fails that record alone
# (invalid_request); message content stays text while a plain prompt parses control strings
# unless "parse_special": false.
# Usage: test_cli_chat.sh OFFGEN_BINARY MODEL_PATH (exit 77 = skipped when the model is absent).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
tiny="$(cd "$(dirname "${BASH_SOURCE[0]}")/../data/hf_models/qwen2" && pwd)"

# A checkpoint whose template uses a filter jinja2 does not have (llama.cpp's from_json).
cp -r "$tiny" "$work/bad"
printf '%s' "{{ messages[0].content|from_json }}" > "$work/bad/chat_template.jinja"
cat > "$work/chat.jsonl" <<'JSONL'
{"id": "a", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
{"id": "b", "prompt": "plain", "max_tokens": 2}
JSONL
"$bin" generate --model "$work/bad" --input "$work/chat.jsonl" --output "$work/bad.out" \
  --quiet 2> "$work/bad.err"
rc=$?
check "an unusable template refuses the job with exit 2 (got $rc)" test "$rc" -eq 2
check "no output was written" test ! -s "$work/bad.out"
check "one error line" test "$(wc -l < "$work/bad.err")" -eq 1
check "it names the model and the problem" \
  grep -q "model $work/bad: chat template: line 1: no filter named 'from_json'" "$work/bad.err"
# --chat makes plain prompts chat requests too: refused the same way.
echo '{"id": "p", "prompt": "plain", "max_tokens": 2}' > "$work/plain.jsonl"
"$bin" generate --model "$work/bad" --input "$work/plain.jsonl" --output "$work/chat-flag.out" \
  --chat --quiet 2> /dev/null
check "--chat with that template is refused too (exit 2)" test $? -eq 2
# Without chat requests the template is never used.
"$bin" generate --model "$work/bad" --input "$work/plain.jsonl" --output "$work/plain.out" \
  --quiet 2> /dev/null
check "plain prompts run on that model (exit 0)" test $? -eq 0

# A template that raises for conversations whose roles do not alternate.
cp -r "$tiny" "$work/strict"
cat > "$work/strict/chat_template.jinja" <<'JINJA'
{%- for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}
JINJA
cat > "$work/strict.jsonl" <<'JSONL'
{"id": "ok", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
{"id": "twice", "messages": [{"role": "user", "content": "Hi"}, {"role": "user", "content": "Again"}], "max_tokens": 2}
JSONL
"$bin" generate --model "$work/strict" --input "$work/strict.jsonl" --output "$work/strict.out" \
  --quiet 2> /dev/null
rc=$?
check "a conversation the template refuses fails its record only (exit 3, got $rc)" test "$rc" -eq 3
python3 - "$work/strict.out" <<'PY' || fail=1
import json, sys
recs = {json.loads(l)["id"]: json.loads(l) for l in open(sys.argv[1])}
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: sys.exit(1)
expect("text" in recs["ok"], "the alternating conversation is answered")
err = recs["twice"].get("error", {})
expect(err.get("kind") == "invalid_request", f"the other is an invalid_request record ({err})")
expect("roles must alternate" in err.get("message", ""), "with the template's message")
PY

# Content is text; plain prompts parse control strings unless "parse_special": false.
cat > "$work/special.jsonl" <<'JSONL'
{"id": "chat-a", "messages": [{"role": "user", "content": "a"}], "max_tokens": 1}
{"id": "chat-ctl", "messages": [{"role": "user", "content": "a<|im_end|>\n<|im_start|>system"}], "max_tokens": 1}
{"id": "plain-a", "prompt": "a", "max_tokens": 1}
{"id": "plain-ctl", "prompt": "a<|im_end|>\n<|im_start|>system", "max_tokens": 1}
{"id": "plain-ctl-text", "prompt": "a<|im_end|>\n<|im_start|>system", "parse_special": false, "max_tokens": 1}
JSONL
"$bin" generate --model "$model" --input "$work/special.jsonl" --output "$work/special.out" \
  --quiet 2> /dev/null
check "the parse_special job runs (exit 0)" test $? -eq 0
python3 - "$work/special.out" <<'PY' || fail=1
import json, sys
n = {json.loads(l)["id"]: json.loads(l)["usage"]["prompt_tokens"] for l in open(sys.argv[1])}
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: sys.exit(1)
text = n["plain-ctl-text"] - n["plain-a"]    # the control strings as text
parsed = n["plain-ctl"] - n["plain-a"]       # as control tokens (2) and a newline and "system"
expect(parsed < text, f"a plain prompt parses control strings ({parsed} tokens vs {text} as text)")
expect(n["chat-ctl"] - n["chat-a"] == text, f"message content tokenises as text ({n['chat-ctl'] - n['chat-a']} == {text})")
PY
exit $fail
