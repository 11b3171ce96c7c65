#!/usr/bin/env python3
"""Golden renderings of real chat templates by Hugging Face's own chat-template code.

Renders every template of a directory (tools/get-chat-templates: the 70 templates of the
llama-cpp-python 0.3.36 sdist) over the conversations in tests/data/chat_templates/conversations.json
with transformers' render_jinja_template — jinja2's ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, loopcontrols, HF's tojson, raise_exception and strftime_now — after
the message normalisation apply_chat_template does (None fields dropped). strftime_now's clock is
fixed (NOW below), so the C++ engine's test fixes its clock to the same instant.

Also renders the engine's feature snippets (tests/data/chat_templates/snippets.json: small
templates with their variables) the same way, into snippets_golden.jsonl: one line per snippet
  {"template", "vars", "text"} | {"template", "vars", "error", "raised", "phase": "parse"|"render"}
(messages default to SNIPPET_MESSAGES, tools and documents are None, add_generation_prompt false).

Writes tests/data/chat_templates/golden.jsonl: one line per template
  {"template": file name, "sha256": of its bytes, "renderings": [
     {"conversation": name, "add_generation_prompt": bool, "text": str}
   | {"conversation": name, "add_generation_prompt": bool, "error": str, "raised": bool}, ...]}
("raised": the template called raise_exception; other errors are jinja2's or Python's).

Dev-time only (needs transformers and jinja2: /opt/offgen-dev/bin/python):
  python tools/gen_chat_template_golden.py [--templates DIR] [--out FILE]
"""

import argparse
import datetime as _dt
import hashlib
import json
import os
import subprocess
import sys

import jinja2
from transformers.utils import chat_template_utils as ctu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "chat_templates")
NOW = _dt.datetime(2025, 3, 14, 9, 26, 53)
BOS, EOS = "<s>", "</s>"
SNIPPET_MESSAGES = [{"role": "user", "content": "Hi <|im_end|>"}, {"role": "assistant", "content": "Hello!"}]


class _FixedClock(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


def render(source, conv, gen):
    messages = ctu._normalize_chat_messages(conv["messages"])
    rendered, _ = ctu.render_jinja_template(
        conversations=[messages], tools=conv.get("tools"), chat_template=source,
        add_generation_prompt=gen, bos_token=BOS, eos_token=EOS, **conv.get("kwargs", {}))
    return rendered[0]


def render_snippet(snippet):
    row = {"template": snippet["template"], "vars": snippet.get("vars", {})}
    try:
        compiled = ctu._compile_jinja_template(snippet["template"])
    except Exception as e:  # noqa: BLE001
        return {**row, "error": f"{type(e).__name__}: {e}", "raised": False, "phase": "parse"}
    try:
        variables = {"messages": SNIPPET_MESSAGES, "tools": None, "documents": None,
                     "add_generation_prompt": False, "bos_token": BOS, "eos_token": EOS,
                     **row["vars"]}
        return {**row, "text": compiled.render(**variables)}
    except Exception as e:  # noqa: BLE001
        return {**row, "error": f"{type(e).__name__}: {e}",
                "raised": type(e) is jinja2.exceptions.TemplateError, "phase": "render"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--templates", help="directory of *.jinja (default: tools/get-chat-templates)")
    ap.add_argument("--conversations", default=os.path.join(DATA, "conversations.json"))
    ap.add_argument("--out", default=os.path.join(DATA, "golden.jsonl"))
    ap.add_argument("--snippets", default=os.path.join(DATA, "snippets.json"))
    ap.add_argument("--snippets-out", default=os.path.join(DATA, "snippets_golden.jsonl"))
    args = ap.parse_args()
    templates = args.templates or subprocess.run(
        [os.path.join(ROOT, "tools", "get-chat-templates")], check=True, capture_output=True,
        text=True).stdout.strip()
    ctu.datetime = _FixedClock  # strftime_now reads datetime.now()
    with open(args.snippets, encoding="utf-8") as f:
        snippets = json.load(f)
    with open(args.snippets_out, "w", encoding="utf-8") as out:
        for snippet in snippets:
            out.write(json.dumps(render_snippet(snippet), ensure_ascii=False) + "\n")
    print(f"{len(snippets)} snippets; wrote {args.snippets_out}")
    with open(args.conversations, encoding="utf-8") as f:
        convs = json.load(f)

    names = sorted(n for n in os.listdir(templates) if n.endswith(".jinja"))
    rendered_all = 0
    with open(args.out, "w", encoding="utf-8") as out:
        for name in names:
            with open(os.path.join(templates, name), "rb") as f:
                raw = f.read()
            source = raw.decode("utf-8")
            rows = []
            for conv in convs:
                for gen in conv["add_generation_prompt"]:
                    row = {"conversation": conv["name"], "add_generation_prompt": gen}
                    try:
                        row["text"] = render(source, conv, gen)
                    except Exception as e:  # noqa: BLE001 - every failure is a golden result
                        row["error"] = f"{type(e).__name__}: {e}"
                        row["raised"] = type(e) is jinja2.exceptions.TemplateError
                    rows.append(row)
            ok = sum("text" in r for r in rows)
            rendered_all += ok == len(rows)
            print(f"{name}: {ok}/{len(rows)} rendered")
            out.write(json.dumps({"template": name, "sha256": hashlib.sha256(raw).hexdigest(),
                                  "renderings": rows}, ensure_ascii=False) + "\n")
    print(f"{len(names)} templates, {rendered_all} render every conversation; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
