#!/usr/bin/env python3
"""Tiny Hugging Face tokenizer.json files + golden ids for tests/runtime/test_hf_tokenizer.cpp.

Regenerate (dev-time only; needs the dev venv with tokenizers and transformers):

    /opt/offgen-dev/bin/python tools/gen_hf_tokenizer_golden.py [--out-dir tests/data/hf_tokenizers]

Trains three byte-level BPE tokenizers (vocabulary ~400) with `tokenizers` on the texts of
tests/data/tokenizer_corpus.jsonl, one per pre-tokenizer shape offgen maps from tokenizer.json:

  gpt2    ByteLevel(use_regex=True); TemplateProcessing "<|startoftext|> $A" (a BOS template);
          tokenizer_config.json written by transformers' save_pretrained (bos/eos only)
  smollm  Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)]; save_pretrained
          with a chat template, which transformers 5.x writes as chat_template.jinja
  qwen2   NFC normalizer, Sequence[Split(Regex(<Qwen2 pattern>), "isolated"), ByteLevel(use_regex=False)];
          merges rewritten as legacy "a b" strings; a hand-written tokenizer_config.json in the
          older shape ({"content": ...} token objects, chat_template as a [{name, template}] list)

Every tokenizer has three special tokens trained into the model vocabulary ("<|endoftext|>",
"<|im_start|>", "<|im_end|>": ids coincide with model.vocab) and, added after training, one
non-special token "<tool>" (gpt2 also the special "<|startoftext|>"), both beyond the model
vocabulary. A few hand-picked merges are appended (DECOY_MERGES) so that every style's golden
ids change under any other style's pre-tokenizer; the script asserts that.

Writes
  <out-dir>/<style>/tokenizer.json (+ tokenizer_config.json, chat_template.jinja)
  <out-dir>/golden.json   {"meta": {...}, "texts": [...], "ids": {style: [[...] per text]},
                           "ids_with_special": {"gpt2": [[...]]}, "expect": {style: {...}}}
ids are Tokenizer.from_file(<style>/tokenizer.json).encode(text, add_special_tokens=False).ids,
ids_with_special the same with add_special_tokens=True (only gpt2 has a BOS template).

Reproducible: training runs single-threaded on a fixed, sorted corpus; running the script twice
gives byte-identical files (checked by hand with `git diff --stat`). Versions go into meta.
"""

import argparse
import json
import os
import shutil
import sys
import unicodedata

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# The pattern in Qwen2's tokenizer.json (runtime/text/pre_tokenizer.cpp: kQwen2HfRegex).
QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)
VOCAB_SIZE = 400
TRAINED_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER_TOKEN = "<tool>"
BOS_GPT2 = "<|startoftext|>"
BOS_TOKEN = {"gpt2": BOS_GPT2, "smollm": "<|im_start|>", "qwen2": None}  # tokenizer_config.json
EOS_TOKEN = {"gpt2": "<|endoftext|>", "smollm": "<|im_end|>", "qwen2": "<|im_end|>"}
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)

# Tiny trained vocabularies rarely hold a merge across another style's piece boundary, so a
# wrong pre-tokenizer would still give HF's ids. These merges make the golden texts tell the
# styles apart (checked by style_confusion()): "1 2" only applies where digits are not split
# one by one (gpt2, llama3); "' S" only where "'S" is one piece (qwen2's case-insensitive
# contractions); "Ġ Ċ" + "ĠĊ Ġ" only where " \n " stays one piece (GPT-2's \s+(?!\S)).
G, C = "\u0120", "\u010a"  # byte-level " " and "\n"
DECOY_MERGES = {
    "gpt2": [],
    "smollm": [("1", "2"), (G, C), (G + C, G)],
    "qwen2": [("1", "2"), ("'", "S")],
}

TEXTS = [
    "",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing space ",
    "it's don't they're we've I'm you'll he'd",
    "IT'S DON'T THEY'RE",
    "In 1905, Albert Einstein published 4 papers.",
    "0123456789",
    "x1y22z333 3.14159 -0.001 1,000,000",
    "12:30:45 2024-01-31T23:59:59Z",
    "a  b   c    d",
    "\t\ttabs\tand  spaces\n",
    "\n\n\nnewlines\r\n\r\nCRLF",
    " " * 17,
    "word\n   \n  indented",
    "def add(a, b):\n    return a + b\n",
    "{\"key\": [1, 2.5, null]}",
    "na\u00efve caf\u00e9 r\u00e9sum\u00e9 \u00fcber stra\u00dfe",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u6771\u4eac\uff12\uff10\uff12\uff14",
    "\u0627\u0644\u0639\u062f\u062f \u0661\u0662\u0663",
    "\u00bd \u00b2 \u2460 \u216b superscripts",
    "\u00a0non-breaking\u00a0space a\u3000b",
    "\U0001F600 \U0001F44D\U0001F3FD family \U0001F468\u200D\U0001F469\u200D\U0001F467",
    "\U0001F680\U0001F680\U0001F680 123",
    "nai\u0308ve (combining)",
    "\x1b[31mred\x1b[0m \x00\x7f",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    " <|im_start|> spaced ",
    "<|im_start",
    "<<|im_end|>>",
    "call <tool> now",
    "<tool><tool>x<tool",
    "<|startoftext|>bos inside",
    "<|IM_START|> not special",
    "ha" * 40,
    "supercalifragilisticexpialidocious",
    "SELECT id FROM users WHERE age >= 18;",
]


def corpus_texts():
    texts = []
    with open(os.path.join(ROOT, "tests", "data", "tokenizer_corpus.jsonl"), encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i == 0 or not line.strip():
                continue  # meta line
            t = json.loads(line)["text"]
            if "<|" not in t:
                texts.append(t)
    return sorted(set(texts))


def pre_tokenizer(style):
    if style == "gpt2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if style == "smollm":
        return pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ])
    if style == "qwen2":
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ])
    raise ValueError(style)


def add_decoy_merges(tok, merges):
    """Appends merges (lowest priority) with new model tokens, before any added token."""
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for a, b in merges:
        assert a in vocab and b in vocab, (a, b)
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
        data["model"]["merges"].append([a, b])
    return Tokenizer.from_str(json.dumps(data))


def train(style, texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer(style)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=TRAINED_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    tok = add_decoy_merges(tok, DECOY_MERGES[style])
    if style == "gpt2":
        tok.add_special_tokens([BOS_GPT2])
        bos = tok.token_to_id(BOS_GPT2)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS_GPT2} $A", pair=f"{BOS_GPT2} $A $B:1", special_tokens=[(BOS_GPT2, bos)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_tokens([USER_TOKEN])
    return tok


def write_style(style, tok, out_dir):
    d = os.path.join(out_dir, style)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    if style == "gpt2":
        PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS_TOKEN[style],
                                eos_token=EOS_TOKEN[style]).save_pretrained(d)
    elif style == "smollm":
        PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS_TOKEN[style],
                                eos_token=EOS_TOKEN[style], pad_token="<|endoftext|>",
                                chat_template=CHATML).save_pretrained(d)
    else:
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({
                "add_bos_token": False,
                "bos_token": None,
                "eos_token": {"content": "<|im_end|>", "lstrip": False, "normalized": False,
                              "rstrip": False, "single_word": False, "special": True},
                "pad_token": "<|endoftext|>",
                "unk_token": None,
                "chat_template": [{"name": "tool_use", "template": "{{ tools }}"},
                                  {"name": "default", "template": CHATML}],
                "tokenizer_class": "Qwen2Tokenizer",
            }, f, indent=2)
    # Compact tokenizer.json keeps the committed data small; qwen2 gets legacy "a b" merges.
    path = os.path.join(d, "tokenizer.json")
    data = json.loads(tok.to_str())
    if style == "qwen2":
        data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]
        data["normalizer"] = {"type": "NFC"}  # as Qwen2's real tokenizer.json
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    return path


def style_confusion(paths, texts):
    """{style: {other: number of texts whose ids change under other's pre-tokenizer}}."""
    out = {}
    for style, path in paths.items():
        ref = Tokenizer.from_file(path)
        want = [ref.encode(t, add_special_tokens=False).ids for t in texts]
        out[style] = {}
        for other in paths:
            tok = Tokenizer.from_file(path)
            tok.pre_tokenizer = pre_tokenizer(other)
            got = [tok.encode(t, add_special_tokens=False).ids for t in texts]
            out[style][other] = sum(a != b for a, b in zip(want, got))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "tests", "data", "hf_tokenizers"))
    args = ap.parse_args()

    texts = corpus_texts()
    golden = {"texts": TEXTS, "ids": {}, "ids_with_special": {}, "decoded": {}, "expect": {}}
    paths = {}
    for style in ("gpt2", "smollm", "qwen2"):
        path = paths[style] = write_style(style, train(style, texts), args.out_dir)
        ref = Tokenizer.from_file(path)  # what is on disk, as a user of the file sees it
        ids = [ref.encode(t, add_special_tokens=False).ids for t in TEXTS]
        decoded = [ref.decode(x, skip_special_tokens=False) for x in ids]
        for t, back in zip(TEXTS, decoded):
            want = unicodedata.normalize("NFC", t) if style == "qwen2" else t
            assert back == want, f"{style}: HF does not round-trip {t!r}: {back!r}"
        golden["ids"][style] = ids
        golden["decoded"][style] = decoded
        if style == "gpt2":
            golden["ids_with_special"][style] = [ref.encode(t).ids for t in TEXTS]
        golden["expect"][style] = {
            "vocab_size": ref.get_vocab_size(with_added_tokens=True),
            "bos_id": ref.token_to_id(BOS_TOKEN[style]) if BOS_TOKEN[style] else -1,
            "eos_id": ref.token_to_id(EOS_TOKEN[style]),
            "user_token_id": ref.token_to_id(USER_TOKEN),
        }
    confusion = style_confusion(paths, TEXTS)
    for style, row in confusion.items():
        for other, n in row.items():
            assert (n == 0) == (other == style), f"{style} vs {other}: {n} texts differ"
    golden["meta"] = {
        "generator": "tools/gen_hf_tokenizer_golden.py",
        "tokenizers": tokenizers.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
        "corpus": "tests/data/tokenizer_corpus.jsonl",
        "vocab_size": VOCAB_SIZE,
        "texts_changed_by_another_pre": confusion,
    }
    with open(os.path.join(args.out_dir, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(dp, n)) for dp, _, ns in os.walk(args.out_dir) for n in ns)
    print(f"wrote 3 tokenizers and {len(TEXTS)} golden texts to {args.out_dir} ({total} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
