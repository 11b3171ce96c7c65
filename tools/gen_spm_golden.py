#!/usr/bin/env python3
"""Golden ids for the SentencePiece-style BPE tokenizer tests (tests/runtime/test_spm_*.cpp).

Regenerate (dev-time only; the dev venv with sentencepiece, tokenizers, transformers and gguf):

    /opt/offgen-dev/bin/python tools/gen_spm_golden.py \\
        [--gemma ~/.cache/offgen/models/gemma-3-270m-q4_k_m.gguf] \\
        [--llama-tokenize PATH/bin/llama-tokenize] [--out-dir tests/data/spm]

1. A Llama-2-style vocabulary, small enough to commit. SentencePiece trains a BPE model
   (3000 pieces, byte_fallback, split_digits, whitespace-only pieces allowed, identity
   normalisation: Llama 2's trainer settings) on the Debian licence texts in
   /usr/share/common-licenses, single-threaded (byte-identical on every run). It is then written
     llama2/tokenizer.json       transformers' Llama converter (LlamaTokenizerFast from the .model),
                                 with the normalizer, pre_tokenizer and post_processor Llama 2's own
                                 tokenizer.json has: Sequence[Prepend("▁"), Replace(" ", "▁")], none,
                                 TemplateProcessing "<s> $A" and model.unk_token "<unk>" (transformers 5
                                 writes Metaspace, no template and no unk instead)
     llama2/tokenizer_config.json  add_bos_token true, add_eos_token false, <s> </s> <unk>
     llama2.gguf                 the same vocabulary as a vocabulary-only GGUF (gguf-py's GGUFWriter,
                                 as llama.cpp's converter writes it: tokenizer.ggml.model "llama",
                                 tokens, scores, token_type, add_space_prefix, BOS/EOS/UNK)
     llama2_golden.jsonl         first line {"meta": {...}}; then per string {"text", "corpus",
                                 "ids": {variant: ids}, "decoded": {variant: text}}
   Variants are tokenizer.json edits listed in meta.variants (normalizer / pre_tokenizer / decoder
   replaced by the given JSON); the test applies the same edits. "legacy" is the file as written.
   ids are Tokenizer.encode(text, add_special_tokens=False) of Hugging Face `tokenizers`; a variant
   other than "legacy" is listed only where its ids differ from legacy's, "decoded" only where
   decode(ids) differs from the text. "ids_bos" (extras only) holds legacy's ids with
   add_special_tokens=True.
   The GGUF is checked against the "legacy" ids, which are llama.cpp's semantics (a "▁" before
   every text segment, also after special tokens). Agreement of the legacy ids with the
   `sentencepiece` library itself and with llama.cpp's llama-tokenize (when given) is counted
   into meta (SentencePiece knows no special tokens, so strings containing one are not compared).

2. Gemma 3 (270M, from tools/get-model gemma3-270m): the reference is Hugging Face's tokenizer
   built by transformers from the same GGUF (AutoTokenizer.from_pretrained(dir, gguf_file=...):
   GemmaTokenizer with merges rebuilt from the vocabulary order), with Gemma's user-defined
   whitespace pieces matched whole as SentencePiece does (see gemma_reference()). Writes
     gemma3_golden.jsonl         {"meta"}, then {"text", "corpus", "ids", "ids_transformers"?,
                                 "decoded"?, "ids_bos"?}; ids_transformers: the plain
                                 transformers tokenizer's ids where they differ
   and saves the plain tokenizer (tokenizer.json, tokenizer_config.json) to
   gemma-3-270m-hf-tokenizer/ beside the GGUF, which test_spm_gemma.cpp loads when present.
   Agreement with llama-tokenize on the same GGUF is counted into meta when it is given.

The strings are those of tests/data/tokenizer_corpus.jsonl ("corpus": true) plus per-vocabulary
extras exercising special tokens, byte fallback and the space prefix ("corpus": false).
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gguf  # noqa: E402
import sentencepiece as spm  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, normalizers, processors  # noqa: E402
from transformers import AutoTokenizer, LlamaTokenizerFast  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SP = "\u2581"

LLAMA2_VARIANTS = {
    "legacy": {},
    "metaspace_first": {
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": SP, "prepend_scheme": "first", "split": False},
    },
    "metaspace_always": {
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": SP, "prepend_scheme": "always", "split": False},
    },
    "metaspace_split": {
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": SP, "prepend_scheme": "always", "split": True},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "ByteFallback"},
            {"type": "Metaspace", "replacement": SP, "prepend_scheme": "always", "split": True}]},
    },
    # Gemma's tokenizer.json shape: no prefix, spaces replaced by the normaliser.
    "gemma_style": {
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": SP},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                          "invert": False},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SP}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
    },
    "nfkc_legacy": {
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"}, {"type": "Prepend", "prepend": SP},
            {"type": "Replace", "pattern": {"String": " "}, "content": SP}]},
    },
}

LLAMA2_EXTRAS = [
    "<s>Hello</s> x",
    "<s> Hello",
    "x<s>",
    "a<unk>b",
    "</s></s>",
    " <s> ",
    "<s>",
    "text</s>",
    f"{SP}literal {SP}marker{SP}",
    SP,
    "  two leading spaces",
    "trailing spaces  ",
    "\u00fc \u4e2d \u2603 \U0001F600 byte fallback",
    "\ufb01 ligature \u2460 circled \uff21 fullwidth (NFKC changes these)",
    "cafe\u0301 vs caf\u00e9",
    "The GNU General Public License is a free, copyleft license for software.",
    "Copyright (C) 2007 Free Software Foundation, Inc. <https://fsf.org/>",
    "1234567890 3.14 -42",
]

GEMMA_EXTRAS = [
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text after bos",
    "text<eos>",
    "a  b   c    d",
    "   three leading",
    "<b>bold</b> <i>it</i> <div>x</div>",
    "\t\ttabs\tand\n\nnewlines\n\n\n",
    "<unused0><unused6241>",
    "<start_of_image>",
    "\u00fc \u4e2d \u2603 \U0001F600 \U0001D800\U00046131",
    f"{SP}literal{SP}",
    "<start_of_turn",
    "<<start_of_turn>>",
]


def read_corpus():
    path = os.path.join(ROOT, "tests", "data", "tokenizer_corpus.jsonl")
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r["text"] for r in rows[1:]]


def strings(extras):
    seen, out = set(), []
    for corpus, texts in ((True, read_corpus()), (False, extras)):
        for s in texts:
            if s not in seen:
                seen.add(s)
                out.append((s, corpus))
    return out


def llama_tokenize_ids(exe, model, text):
    """ids from llama.cpp's llama-tokenize (special tokens parsed, no BOS)."""
    r = subprocess.run([exe, "-m", model, "--ids", "--log-disable", "--no-bos", "--no-escape", "--stdin"],
                       input=text.encode("utf-8"), capture_output=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"llama-tokenize failed on {text!r}: {r.stderr.decode(errors='replace')[-500:]}")
    return json.loads(r.stdout.decode().strip().splitlines()[-1])


def train_llama2(workdir):
    files = sorted(f for f in glob.glob("/usr/share/common-licenses/*") if not os.path.islink(f))
    text = "".join(open(f, encoding="utf-8", errors="replace").read() for f in files)
    lines = [line for line in text.splitlines() if line.strip()]
    train = os.path.join(workdir, "train.txt")
    with open(train, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    prefix = os.path.join(workdir, "llama2")
    spm.SentencePieceTrainer.train(
        input=train, model_prefix=prefix, model_type="bpe", vocab_size=3000, byte_fallback=True,
        character_coverage=0.9995, num_threads=1, split_digits=True, allow_whitespace_only_pieces=True,
        remove_extra_whitespaces=False, normalization_rule_name="identity", unk_id=0, bos_id=1, eos_id=2,
        pad_id=-1, max_sentence_length=100000, minloglevel=2)
    return prefix + ".model", files


def write_llama2_files(model_file, out_dir):
    d = os.path.join(out_dir, "llama2")
    os.makedirs(d, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        os.symlink(model_file, os.path.join(tmp, "tokenizer.model"))
        fast = LlamaTokenizerFast.from_pretrained(tmp, legacy=True)
    tok = fast.backend_tokenizer
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SP), normalizers.Replace(" ", SP)])
    tok.pre_tokenizer = None
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    # Llama 2's file names its unk for the BPE model; transformers 5's LlamaTokenizer leaves it out.
    j = json.loads(tok.to_str())
    j["model"]["unk_token"] = "<unk>"
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(j, ensure_ascii=False, separators=(",", ":")))
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>", "pad_token": None, "legacy": True, "tokenizer_class": "LlamaTokenizer"}
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")

    sp = spm.SentencePieceProcessor(model_file=model_file)
    w = gguf.GGUFWriter(os.path.join(out_dir, "llama2.gguf"), "llama")
    w.add_name("offgen Llama-2-style test vocabulary")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    n = sp.get_piece_size()
    w.add_token_list([sp.id_to_piece(i).encode("utf-8") for i in range(n)])
    w.add_token_scores([sp.get_score(i) for i in range(n)])
    types = []
    for i in range(n):
        types.append(6 if sp.is_byte(i) else 2 if sp.is_unknown(i) else 3 if sp.is_control(i)
                     else 5 if sp.is_unused(i) else 1)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return os.path.join(d, "tokenizer.json"), sp


def apply_variant(base_json, edits):
    j = json.loads(base_json)
    j.update(edits)
    return Tokenizer.from_str(json.dumps(j))


def gen_llama2(args, out_dir):
    with tempfile.TemporaryDirectory() as work:
        model_file, sources = train_llama2(work)
        tok_json, sp = write_llama2_files(model_file, out_dir)
        base = open(tok_json, encoding="utf-8").read()
        tokz = {name: apply_variant(base, edits) for name, edits in LLAMA2_VARIANTS.items()}
        gguf_path = os.path.join(out_dir, "llama2.gguf")
        specials = ["<s>", "</s>", "<unk>"]
        lines, sp_same, sp_checked, lt_same, lt_checked = [], 0, 0, 0, 0
        for text, corpus in strings(LLAMA2_EXTRAS):
            legacy = tokz["legacy"].encode(text, add_special_tokens=False).ids
            ids, decoded = {"legacy": legacy}, {}
            for name, t in tokz.items():
                got = t.encode(text, add_special_tokens=False).ids
                if name != "legacy" and got != legacy:
                    ids[name] = got
                back = t.decode(got, skip_special_tokens=False)
                if back != text:
                    decoded[name] = back
            row = {"text": text, "corpus": corpus, "ids": ids}
            if not corpus:
                row["ids_bos"] = tokz["legacy"].encode(text, add_special_tokens=True).ids
            if decoded:
                row["decoded"] = decoded
            lines.append(row)
            if not any(s in text for s in specials):
                sp_checked += 1
                sp_same += sp.encode(text) == legacy
            if args.llama_tokenize:
                lt_checked += 1
                lt_same += llama_tokenize_ids(args.llama_tokenize, gguf_path, text) == legacy
    meta = {
        "generator": "tools/gen_spm_golden.py",
        "training_text": [os.path.basename(f) for f in sources],
        "vocab_size": sp.get_piece_size(),
        "variants": LLAMA2_VARIANTS,
        "strings": len(lines),
        "corpus_strings": sum(r["corpus"] for r in lines),
        "sentencepiece": spm.__version__,
        "tokenizers": tokenizers.__version__,
        "transformers": transformers.__version__,
        "legacy_equals_sentencepiece": f"{sp_same}/{sp_checked} strings without special tokens",
        "legacy_equals_llama_tokenize": f"{lt_same}/{lt_checked}" if lt_checked else "not run",
    }
    write_jsonl(os.path.join(out_dir, "llama2_golden.jsonl"), meta, lines)
    return meta


def gemma_reference(gguf_path, export_dir):
    """(reference, plain): Hugging Face tokenizers for the Gemma GGUF.

    plain is transformers' GGUF tokenizer as it comes. It respells Gemma's user-defined
    whitespace pieces ("  " ... 31 spaces, stored with real spaces in the GGUF) as "▁▁"... and
    reaches them through merges, which splits runs longer than 31 spaces differently from
    SentencePiece (40 spaces: 16 + 24 instead of 31 + 9). SentencePiece, and llama.cpp, match
    user-defined pieces whole, longest first, before BPE. reference is plain with those pieces
    registered as added tokens (matched whole in the text, as the other user-defined pieces
    already are), their new ids mapped back to the GGUF's.
    """
    with tempfile.TemporaryDirectory() as tmp:
        name = os.path.basename(gguf_path)
        os.symlink(os.path.abspath(gguf_path), os.path.join(tmp, name))
        plain = AutoTokenizer.from_pretrained(tmp, gguf_file=name)
    if export_dir:
        plain.save_pretrained(export_dir)
    reader = gguf.GGUFReader(gguf_path)
    f = reader.fields
    tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode("utf-8") for i in f["tokenizer.ggml.tokens"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    spaces = {t: i for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 4 and t and not t.strip(" ")}
    j = json.loads(plain.backend_tokenizer.to_str())
    for t, i in spaces.items():
        j["added_tokens"].append({"id": i, "content": t, "single_word": False, "lstrip": False,
                                  "rstrip": False, "normalized": False, "special": False})
    tok = Tokenizer.from_str(json.dumps(j))
    remap = {tok.token_to_id(t): i for t, i in spaces.items()}
    assert len(remap) == len(spaces) and all(k >= len(tokens) for k in remap), remap

    def reference(text):
        return [remap.get(x, x) for x in tok.encode(text, add_special_tokens=False).ids]

    return reference, plain, len(spaces)


def gen_gemma(args, out_dir):
    if not os.path.exists(args.gemma):
        print(f"skipping Gemma 3: {args.gemma} is absent (tools/get-model gemma3-270m)")
        return None
    export = os.path.join(os.path.dirname(args.gemma), "gemma-3-270m-hf-tokenizer")
    reference, plain, n_spaces = gemma_reference(args.gemma, export)
    lines, lt_same, lt_checked, lt_diff, plain_same = [], 0, 0, [], 0
    for text, corpus in strings(GEMMA_EXTRAS):
        ids = reference(text)
        plain_ids = plain.encode(text, add_special_tokens=False)
        row = {"text": text, "corpus": corpus, "ids": ids}
        if plain_ids != ids:
            row["ids_transformers"] = plain_ids
        plain_same += plain_ids == ids
        if not corpus:
            row["ids_bos"] = [plain.bos_token_id] + ids
        back = plain.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if back != text:
            row["decoded"] = back
        lines.append(row)
        if args.llama_tokenize:
            lt_checked += 1
            same = llama_tokenize_ids(args.llama_tokenize, args.gemma, text) == ids
            lt_same += same
            if not same:
                lt_diff.append(text)
    meta = {
        "generator": "tools/gen_spm_golden.py",
        "model": os.path.basename(args.gemma),
        "reference": "Hugging Face tokenizers: transformers' tokenizer from the GGUF "
                     f"(AutoTokenizer.from_pretrained(dir, gguf_file=...), {type(plain).__name__}) with "
                     f"Gemma's {n_spaces} user-defined whitespace pieces matched whole as SentencePiece "
                     "does; encode(add_special_tokens=False)",
        "strings": len(lines),
        "corpus_strings": sum(r["corpus"] for r in lines),
        "tokenizers": tokenizers.__version__,
        "transformers": transformers.__version__,
        "equals_plain_transformers": f"{plain_same}/{len(lines)} (ids_transformers where not)",
        "equals_llama_tokenize": f"{lt_same}/{lt_checked}" if lt_checked else "not run",
        "differs_from_llama_tokenize": lt_diff,
        "exported_tokenizer_json": "the plain tokenizer, saved to gemma-3-270m-hf-tokenizer/ beside the GGUF",
    }
    write_jsonl(os.path.join(out_dir, "gemma3_golden.jsonl"), meta, lines)
    return meta


def write_jsonl(path, meta, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"meta": meta}, ensure_ascii=False) + "\n")
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cache = os.environ.get("OFFGEN_CACHE", os.path.expanduser("~/.cache/offgen"))
    ap.add_argument("--gemma", default=os.path.join(cache, "models", "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--llama-tokenize", default=None, help="llama.cpp's llama-tokenize, for a cross-check")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "tests", "data", "spm"))
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for what, meta in (("llama2", gen_llama2(args, args.out_dir)), ("gemma3", gen_gemma(args, args.out_dir))):
        if meta:
            summary = {k: v for k, v in meta.items() if k not in ("variants", "training_text")}
            print(what, json.dumps(summary, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
