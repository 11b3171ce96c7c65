#!/usr/bin/env python3
"""Golden data for the tokenizer parity test (tests/runtime/test_tokenizer_parity.cpp).

Regenerate (dev-time only; needs the dev venv with transformers, tokenizers and gguf):

    /opt/offgen-dev/bin/python tools/gen_tokenizer_golden.py \
        [--model ~/.cache/offgen/models/SmolLM2-135M-Instruct.Q4_1.gguf] [--out-dir tests/data]

Writes
  tests/data/tokenizer_corpus.jsonl  first line {"meta": {...}}, then one {"text", "ids", "lossless",
                                     "piece_bytes"} per string: ids as Hugging Face encodes it (no
                                     BOS), and the byte lengths of HF's pre-tokenizer pieces for
                                     smollm, gpt2, llama-bpe and qwen2 (absent when the text holds
                                     a special token)
  tests/data/tokenizer_chat.jsonl    {"name", "chat_template" (null = the model's), "messages",
                                     "add_generation_prompt", "bos_token", "text", "ids" (or null)}

The reference tokenizer is Hugging Face's, built from the same GGUF through transformers'
GGUF path (AutoTokenizer.from_pretrained(dir, gguf_file=...)). That path knows no
tokenizer.ggml.pre = "smollm" and falls back to GPT-2's ByteLevel regex, whereas SmolLM2's own
tokenizer.json runs Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)] (and
llama.cpp's "smollm" pre-tokenizer does the same). We install that pre-tokenizer so the golden
ids are the real model's. Strings where the plain GGUF path would differ are counted on stdout.

"lossless" is false for strings containing a byte the vocabulary has no token for (SmolLM2 lacks
21 of the 256 byte symbols); HF drops such bytes, so only the ids are compared for them.
Invalid UTF-8 cannot pass through HF; it is covered by the round-trip unit test instead.
"""

import argparse
import json
import os
import random
import sys
import tempfile

from tokenizers import Regex, pre_tokenizers
from transformers import AutoTokenizer
from transformers.convert_slow_tokenizer import bytes_to_unicode
from transformers.integrations.gguf.gguf_tokenizer_mapping import (
    GGUF_PRE_TOKENIZER_SPLITS,
    get_gguf_tokenizer,
)

# Pre-tokenizers of the real tokenizer.json for `tokenizer.ggml.pre` values the transformers
# GGUF path does not reproduce.
REAL_PRE_TOKENIZERS = {
    "smollm": lambda: pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    ),
}


def split_then_bytelevel(pre):
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(GGUF_PRE_TOKENIZER_SPLITS[pre]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


# HF pre-tokenizers whose piece boundaries the unit test checks PreTokenizer against, per
# tokenizer.ggml.pre name (regexes for llama-bpe / qwen2 as transformers' GGUF path uses them).
PIECE_PRE_TOKENIZERS = {
    "smollm": REAL_PRE_TOKENIZERS["smollm"],
    "gpt2": lambda: pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    "llama-bpe": lambda: split_then_bytelevel("llama-bpe"),
    "qwen2": lambda: split_then_bytelevel("qwen2"),
}

# Meta-Llama-3-8B-Instruct's template (the plain Llama-3 header format).
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)

PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world!",
    "Hello world",
    "hello",
    "Hello",
    " Hello",
    "  Hello",
    "In 1905, Albert Einstein published four papers that changed physics forever.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
    "age of foolishness, it was the epoch of belief, it was the epoch of incredulity.",
    "Call me Ishmael. Some years ago\u2014never mind how long precisely\u2014having little or no "
    "money in my purse, and nothing particular to interest me on shore, I thought I would sail "
    "about a little and see the watery part of the world.",
    "\u201cWhat\u2019s that?\u201d she asked. \u2018Nothing,\u2019 he replied\u2026",
    "Mr. and Mrs. Dursley, of number four, Privet Drive, were proud to say that they were "
    "perfectly normal, thank you very much.",
    "e.g. i.e. etc. vs. Dr. St. U.S.A. a.m. p.m.",
    "state-of-the-art, well-known, mother-in-law; co-operate -- and --- dashes",
    "Wait... what?! Really??? No way!!!",
    "(parentheses) [brackets] {braces} <angles> \"quotes\" 'single'",
    "Email me at someone@example.com or visit https://example.org/path?q=1&r=two#frag",
    "#hashtag @mention $100 50% 3*4=12 a/b c\\d ~tilde ^caret `backtick` |pipe|",
    "ALL CAPS SENTENCE WITH SHOUTING.",
    "MiXeD cAsE wOrDs AnD CamelCase snake_case kebab-case SCREAMING_SNAKE",
    "The year 2024 had 366 days; 2023 had 365.",
    "Q: What is 2+2?\nA: 4.",
    "Dear Sir/Madam,\n\nI am writing to inquire about the position.\n\nSincerely,\nJane",
    "Once upon a time, there lived a princess.\nShe had a dragon.\n\nThe end.",
    "newline at end\n",
    "\nnewline at start",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt "
    "ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation.",
]

CONTRACTIONS = [
    "it's don't they're we've I'm you'll he'd",
    "IT'S DON'T THEY'RE WE'VE I'M YOU'LL HE'D",
    "It's a dog's life; the dogs' bowls aren't full.",
    "'s 't 're 've 'm 'll 'd",
    "'S 'T 'RE 'VE 'M 'LL 'D",
    "rock'n'roll o'clock y'all ma'am",
    "he said 'hello' and 'goodbye'",
    "' leading apostrophe",
    "l'amour, c'est l'homme qu'il aime",
    "don\u2019t can\u2019t won\u2019t (curly apostrophes)",
]

CODE = [
    "def add(a, b):\n    return a + b\n",
    "import numpy as np\n\nx = np.arange(10)\nprint(x[::2].sum())\n",
    "class Foo:\n    def __init__(self):\n        self.x = 0  # comment\n",
    "#include <iostream>\n\nint main() {\n  std::cout << \"hi\\n\";\n  return 0;\n}\n",
    "template <typename T>\nstd::vector<T> v{1, 2, 3};\nauto it = v.begin();",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}",
    "function greet(name) {\n  return `Hello, ${name}!`;\n}\nconsole.log(greet('world'));",
    "const arr = [1, 2, 3].map((x) => x ** 2);\n",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello\")\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "<!DOCTYPE html>\n<html>\n  <body class=\"main\">\n    <p>Hi &amp; bye</p>\n  </body>\n</html>",
    "{\"key\": \"value\", \"list\": [1, 2.5, -3e4, true, null], \"nested\": {\"a\": {}}}",
    "name: offgen\nversion: 0.1\ndeps:\n  - fmt\n  - pcre2\n",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\" | wc -c; done\n",
    "\\begin{equation}\n  E = mc^2 \\quad \\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2}\n\\end{equation}",
    "| col1 | col2 |\n|------|------|\n| a    | 1    |\n",
    "^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@[a-z]+\\.[a-z]{2,}$",
    "if (x != nullptr && *x >= 0x7f) { y <<= 2; z = a ? b : c; }",
    "\tindented with a tab\n\t\ttwo tabs\n",
    "    four spaces\n        eight spaces\n            twelve",
    "x=1;y=2;z=x+y",
    "print('a'*10)  # => aaaaaaaaaa",
    "// TODO(someone): fix this!!!\n/* block\n * comment */",
    "0x1F 0b1010 0o777 1_000_000 3.14f 1e-9 .5 5. 1E+10",
    "public static void Main(string[] args) { Console.WriteLine(\"C#\"); }",
    "SELECT COUNT(*) FROM t GROUP BY 1 HAVING COUNT(*) > 100",
    "@decorator\nasync def f(*args, **kwargs) -> dict[str, int]:\n    await g()",
]

EMOJI = [
    "\U0001F600",
    "I love it \U0001F60D\U0001F60D\U0001F60D",
    "\U0001F44D\U0001F3FD thumbs up, medium skin tone",
    "\U0001F44B\U0001F3FB\U0001F44B\U0001F3FC\U0001F44B\U0001F3FD\U0001F44B\U0001F3FE\U0001F44B\U0001F3FF",
    "family: \U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466",
    "\U0001F3F3\uFE0F\u200D\U0001F308 rainbow flag",
    "\U0001F9D1\U0001F3FF\u200D\U0001F4BB coder",
    "\U0001F1FA\U0001F1F8\U0001F1EF\U0001F1F5\U0001F1E9\U0001F1EA flags",
    "\u2764\uFE0F heart with VS16 \u2764 without",
    "keycaps 1\uFE0F\u20E3 2\uFE0F\u20E3 #\uFE0F\u20E3",
    "\U0001F680 to the moon \U0001F315\U0001F31F\u2728",
    "\U0001F914\U0001F914 thinking...",
    "emoji then digits \U0001F382 30 years",
    "\U0001F469\u200D\u2764\uFE0F\u200D\U0001F48B\u200D\U0001F468",
    "\u263A\uFE0E text style vs \u263A\uFE0F emoji style",
]

SCRIPTS = [
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01",
    "\u6211\u559c\u6b22\u5b66\u4e60\u673a\u5668\u5b66\u4e60\u548c\u81ea\u7136\u8bed\u8a00\u5904\u7406\u3002",
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3067\u3059\u3002\u30ab\u30bf\u30ab\u30ca\u3082\u3042\u308a\u307e\u3059\u3002",
    "\u6771\u4eac\u306f\uff12\uff10\uff12\uff14\u5e74\uff11\uff12\u6708\u3067\u3059",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc785\ub2c8\ub2e4. \uc548\ub155\ud558\uc138\uc694!",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0627\u0644\u0639\u062f\u062f \u0661\u0662\u0663 \u0648 \u0664\u0665\u0666",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092e\u0947\u0902 \u0967\u0968\u0969 \u0905\u0902\u0915",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041a\u0430\u043a \u0434\u0435\u043b\u0430?",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",
    "na\u00efve caf\u00e9 r\u00e9sum\u00e9 \u00fcber stra\u00dfe \u00e5ngstr\u00f6m",
    "nai\u0308ve cafe\u0301 re\u0301sume\u0301 (combining marks, NFD)",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034da\u036b\u0357lgo",
    "\u00bfQu\u00e9 tal? \u00a1Muy bien! Espa\u00f1a, ni\u00f1o",
    "\u1f08\u03c1\u03c7\u03b9\u03bc\u03ae\u03b4\u03b7\u03c2 polytonic",
    "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8 \u0570\u0561\u0575\u0565\u0580\u0565\u0576",
    "\u1200\u1208\u121d \u12a0\u121b\u122d\u129b",
    "\u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd \u0c24\u0c46\u0c32\u0c41\u0c17\u0c41",
    "mixed English \u4e2d\u6587 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0939\u093f\u0928\u094d\u0926\u0940 \ud55c\uad6d\uc5b4",
    "\U00020000\U0002A6D6 CJK extension B",
    "math \u2200x\u2208\u211d: x\u00b2 \u2265 0, \u2211\u1d62 a\u1d62 \u2248 \u221e, \u03c0 \u2248 3.14159",
    "\u00bd \u00bc \u00be \u2153 \u00b2 \u00b3 \u2460 \u2461 \u216b \u2167 superscripts and fractions",
    "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669 \u0966\u0967\u0968 \uff10\uff11\uff12",
    "full\u3000width\u3000space \uff21\uff22\uff23",
    # Assigned after Unicode 14: letters/digits to HF (Unicode 16+), unknown to older PCRE2.
    "CJK Ext. H \u4e2d\U00031350\U00031351\u6587, Kawi a\U00011F04\U00011F05b",
    "new digits x\U000116D0\U000116D1 y\U00011DE0z \U00016D70 7",
    "\u00a9 2024 \u00ae \u2122 \u00a7 \u00b6 \u2020 \u2021 \u2022 \u00b0C \u20ac5 \u00a33 \u00a5100",
]

WHITESPACE = [
    "",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n",
    "\n\n\n\n",
    "\r\n",
    "\r",
    "a\r\nb\r\nc",
    "line1\r\n\r\nline3",
    " \t \n ",
    "a  b",
    "a   b",
    "a\tb",
    "a\t\tb",
    "a \tb",
    "a\t b",
    "a\n b",
    "a \nb",
    "   leading spaces",
    "trailing spaces   ",
    "  both  ",
    " \n leading mixed",
    "trailing newline\n\n",
    "a" + " " * 40 + "b",
    "x" + "\t" * 12 + "y",
    "\u00a0non-breaking\u00a0space\u00a0",
    "a\u00a0\u00a0b",
    "a\u2003em space\u2009thin",
    "a\u3000\u3000b",
    "para\u2029sep line\u2028sep",
    "nel\u0085char",
    "zero\u200bwidth\u200bspace",
    "\ufeffBOM at start",
    "a\u180eb mongolian vowel separator",
    "a\x0bvertical\x0ctab",
    "x  1",
    "x\n\n1",
    "total:  42",
    "x =  3.5",
    "    12345",
    "\t\t7",
    "a \u00a01",
    "a \u180e\u180e!b \u180e 1",  # U+180E: white space to PCRE2's \s, not to HF's
    "\u180e\u180e",
    "a\x1c\x1c b\x1f",  # Python isspace(), but not regex white space
]

SPECIAL = [
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|>",
    " <|im_start|> spaced ",
    "<|im_start",
    "<|im_start|x",
    "<<|im_end|>>",
    "|><|im_end|><|",
    "<repo_name>offgen<file_sep>main.cpp<filename>x",
    "<jupyter_code>print(1)<jupyter_output>1<empty_output>",
    "<issue_start>bug<issue_comment>fixed<issue_closed>",
    "<gh_stars>100",
    "<|IM_START|> not special",
    "<|im_end|>\n\n<|im_start|>system\nBe brief.<|im_end|>",
]

LONG = [
    "a" * 1000,
    "supercalifragilisticexpialidocious" * 20,
    "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "https://example.com/" + "very/long/path/" * 30 + "index.html?" + "&".join(f"k{i}=v{i}" for i in range(30)),
    "SGVsbG8gV29ybGQhIFRoaXMgaXMgYSBiYXNlNjQgZW5jb2RlZCBzdHJpbmcu" * 8,
    "deadbeef0123456789abcdef" * 16,
    "!" * 300,
    "=" * 120,
    "-" * 80 + "\n" + "#" * 80,
    "9" * 200,
    "ha" * 400,
    "\u4e2d" * 300,
    "\U0001F600" * 100,
    " " * 500,
    "\n" * 300,
    ("The history of the tokenizer begins with byte pair encoding, a data compression technique. "
     "It was later adapted for neural machine translation, and then for language models. ") * 12,
]

CONTROL = [
    "\x00",
    "bell\x07",
    "\x1b[31mred\x1b[0m",
    "del\x7fchar",
    "a\x04b",  # 0x04 has no token in SmolLM2's vocabulary
    "x\x06\x13\x14\x16\x1dy",
    "plane 4 \U00046131 char",  # lead byte 0xF1 has no token
    "\U0001D800\U00046131\U0004A023",  # the SignWriting example from huggingface/smollm#81
    "\x01\x02\x03\x05\x08\x0e\x0f\x10\x11\x12\x15\x17\x18\x19\x1a\x1c\x1e\x1f",
]


def numbers():
    out = []
    for n in range(1, 41):
        digits = "".join(str((i * 7 + n) % 10) for i in range(n))
        out.append(digits)
        if n % 3 == 0:
            out.append(" " + digits)
    out += ["0", "00", "007", "-1", "+1", "1.5", "-0.001", "3.14159265358979", "6.022e23",
            "1,000,000", "1.000.000,50", "$1,234.56", "12:30:45", "2024-01-31T23:59:59Z",
            "192.168.0.1", "+1 (555) 123-4567", "v1.2.3-rc.4", "100%", "1st 2nd 3rd 4th",
            "x1y2z3", "abc123def456", "1a2b3c", "10km 5kg 3ms 16GB", "\u00b9\u00b2\u00b3\u2074"]
    return out


def random_mixes(seed=1234, count=40):
    rng = random.Random(seed)
    pool = (
        list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        + list("0123456789") * 2
        + list(" " * 12 + "\t\n\r")
        + list(".,;:!?'\"()[]{}<>/\\|@#$%^&*-_=+~`")
        + list("\u00e9\u00fc\u00f1\u00df\u00e5\u00f8\u0301\u0308")
        + list("\u4e2d\u6587\u5b57\u3042\u30a2\ud55c\uae00")
        + list("\u0627\u0644\u0639\u0928\u092e\u094d\u0915\u0410\u0411\u03b1\u03b2")
        + ["\U0001F600", "\U0001F44D\U0001F3FD", "\u200d", "\uFE0F", "\u00a0", "\u3000", "\u00bd"]
        + ["'s", "'t", "'re", "'ll", "<|im_end|>", "<|im_start|>"]
    )
    out = []
    for _ in range(count):
        n = rng.randint(1, 60)
        out.append("".join(rng.choice(pool) for _ in range(n)))
    return out


def load_tokenizers(model_path):
    """(reference tokenizer, plain transformers-GGUF tokenizer, pre name)."""
    _, tok_dict, _ = get_gguf_tokenizer(model_path)
    pre = tok_dict.get("pre_tokenizer_type")
    # from_pretrained wants a directory and a file name inside it.
    tmp = tempfile.mkdtemp(prefix="offgen_tok_")
    link = os.path.join(tmp, os.path.basename(model_path))
    os.symlink(os.path.abspath(model_path), link)
    ref = AutoTokenizer.from_pretrained(tmp, gguf_file=os.path.basename(model_path))
    plain = AutoTokenizer.from_pretrained(tmp, gguf_file=os.path.basename(model_path))
    if pre in REAL_PRE_TOKENIZERS:
        ref.backend_tokenizer.pre_tokenizer = REAL_PRE_TOKENIZERS[pre]()
    return ref, plain, pre


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_model = os.path.expanduser("~/.cache/offgen/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--model", default=os.environ.get("OFFGEN_MODEL", default_model))
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data"))
    args = ap.parse_args()

    ref, plain, pre = load_tokenizers(args.model)
    alphabet = bytes_to_unicode()
    vocab = ref.get_vocab()
    missing = {b for b in range(256) if alphabet[b] not in vocab}

    strings = PROSE + CONTRACTIONS + CODE + EMOJI + SCRIPTS + WHITESPACE + SPECIAL + LONG + CONTROL
    strings += numbers() + random_mixes()
    seen, corpus = set(), []
    for s in strings:
        if s not in seen:
            seen.add(s)
            corpus.append(s)

    piece_splitters = {name: make() for name, make in PIECE_PRE_TOKENIZERS.items()}
    specials = [t for t in ref.all_special_tokens]

    def piece_bytes(splitter, s):
        # Byte lengths of the pieces (ByteLevel output spells each byte as one character).
        return [len(piece) for piece, _ in splitter.pre_tokenize_str(s)]

    differ_plain = 0
    lines = []
    for s in corpus:
        ids = ref.encode(s, add_special_tokens=False)
        lossless = not any(b in missing for b in s.encode("utf-8"))
        if lossless:
            back = ref.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            assert back == s, f"HF does not round-trip {s!r}: {back!r}"
        differ_plain += ids != plain.encode(s, add_special_tokens=False)
        line = {"text": s, "ids": ids, "lossless": lossless}
        # Piece boundaries per pre-tokenizer, for text without special tokens (those are split
        # off before pre-tokenisation).
        if not any(t in s for t in specials):
            line["piece_bytes"] = {n: piece_bytes(sp, s) for n, sp in piece_splitters.items()}
            for n, lens in line["piece_bytes"].items():
                assert sum(lens) == len(s.encode("utf-8")), (n, s)
        lines.append(line)

    import tokenizers
    import transformers

    meta = {
        "generator": "tools/gen_tokenizer_golden.py",
        "model": os.path.basename(args.model),
        "pre": pre,
        "pre_tokenizer": json.loads(ref.backend_tokenizer.pre_tokenizer.__getstate__()),
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "missing_bytes": sorted(missing),
        "strings": len(lines),
    }
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "tokenizer_corpus.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"meta": meta}, ensure_ascii=False) + "\n")
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")

    chats = [
        ("smollm2_single_user", None, [{"role": "user", "content": "What is the capital of France?"}], True, None),
        ("smollm2_multi_turn", None, [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Count to 3, then say \u201cdone\u201d \U0001F44D."},
        ], True, None),
        ("smollm2_no_generation_prompt", None, [
            {"role": "user", "content": "  Write a haiku about the sea.\n"},
            {"role": "assistant", "content": "Waves fold into foam\nsalt wind hums an old refrain\nthe tide keeps its time"},
        ], False, None),
        ("llama3_trim", LLAMA3_TEMPLATE, [
            {"role": "system", "content": "  You are helpful.\n"},
            {"role": "user", "content": "\tHello there!  "},
        ], True, "<|begin_of_text|>"),
    ]
    with open(os.path.join(args.out_dir, "tokenizer_chat.jsonl"), "w", encoding="utf-8") as f:
        for name, template, messages, gen, bos in chats:
            kwargs = {"chat_template": template} if template else {}
            if bos is not None:
                kwargs["bos_token"] = bos
            text = ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen, **kwargs)
            ids = ref.encode(text, add_special_tokens=False) if template is None else None
            f.write(json.dumps({"name": name, "chat_template": template, "messages": messages,
                                "add_generation_prompt": gen, "bos_token": bos or "", "text": text,
                                "ids": ids}, ensure_ascii=False) + "\n")

    print(f"wrote {len(lines)} strings ({sum(not l['lossless'] for l in lines)} lossy), "
          f"{len(chats)} chat renderings to {os.path.abspath(args.out_dir)}")
    print(f"pre={pre!r}: {differ_plain} strings tokenize differently with the plain transformers "
          f"GGUF tokenizer (no Digits split)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
