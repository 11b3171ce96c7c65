#!/usr/bin/env python3
"""Multi-query evaluation contexts for `offgen eval multiquery` (and bench/peers/kvpress_multiquery.py).

Stdlib only, deterministic for a given --seed (and, in --real mode, the given text files). Writes
JSONL, one context per line:

    {"id": "...", "context": "...", "questions": [{"q": "...", "answer": "..."}, ...], "meta": {...}}

Synthetic mode (default): many key-value facts embedded in filler prose, and several questions per
context, each asking for a different key. Every value is a number; the relations (RELATIONS) are

  code      "The secret code of Alice is 482913."      Q: "What is the secret code of Alice?"
  passcode  "The passcode of Lisbon is 7391."          Q: "What is the passcode of Lisbon?"
  room, ticket, locker, order (of a person), phone (of a city), safe ("The PIN of the red safe")

With --completion (for base models without a chat template) each question is instead the start
of its fact's sentence, which the model completes with the value:

  fact "The ticket number of Vincent is 76362."   q: "The ticket number of Vincent is"   answer "76362"
  fact "The PIN of the red safe is 4821."         q: "The PIN of the red safe is"

and everything else (facts, filler, positions, which facts are asked, their order, the ids) is
identical to the question-style file of the same seed and options; meta.questions = "completion".

--style picks the relations: mixed (default; the eight relations in turn, in a random order per
context, so facts differ in kind as well as key), code or city (one relation for every fact: harder
for a small model, which then confuses the values). Keys (names, cities, colours) are distinct
within a context, values too, and no key occurs in the filler, which is built from varied template
sentences about everyday scenes. The facts are spread over the context: the filler is cut into
--facts equal segments and each fact lands at a random sentence boundary in its segment, so some
facts sit near the start and some near the end; meta.asked lists, per question, the index of its
fact in text order. Questions ask --questions distinct facts in random order. Length: filler is
added until the approximate token count (approx_tokens(): one token per word, digit and punctuation
mark, within a few percent of SmolLM2's tokenizer on this text) of the whole context reaches
--filler-tokens-approx.

Real mode (--real FILE[,FILE...]): contexts from real texts, e.g. Debian's licences under
/usr/share/common-licenses. Hard line wraps are joined (each paragraph becomes one line, inner
whitespace collapsed; paragraphs separated by a blank line), then consecutive paragraphs are
grouped into chunks of about --filler-tokens-approx tokens. Questions have verbatim answers:

  section  "What is the title of section 5?" -> "Conveying Modified Source Versions"
           (top-level numbered headings "N. Title" whose numbers run consecutively in the file)
  cloze    'Complete the sentence: "<first words of a sentence in the text>"' -> the next 3-5 words
           of that sentence (the quoted start is unique in the chunk and at least 8 words long)

Accuracy, as bench/peers/kvpress_multiquery.py scores it: the normalised answer (lower case,
every non-alphanumeric character a space, whitespace collapsed) occurs in the normalised output
between word boundaries.

Examples (the committed datasets):

    tools/gen_multikey.py --seed 1 --contexts 20 --facts 8 --questions 8 \
        --filler-tokens-approx 1000 --out bench/multiquery/multikey.jsonl
    tools/gen_multikey.py --seed 1 --contexts 20 --facts 8 --questions 8 \
        --filler-tokens-approx 1000 --completion --out bench/multiquery/multikey_completion.jsonl
    tools/gen_multikey.py --seed 2 --contexts 4 --facts 8 --questions 8 \
        --filler-tokens-approx 4200 --out bench/multiquery/multikey_4k.jsonl
    tools/gen_multikey.py --seed 3 --real /usr/share/common-licenses/{GPL-3,Apache-2.0,MPL-2.0,GFDL-1.3} \
        --questions 8 --filler-tokens-approx 1500 --out bench/multiquery/licenses.jsonl
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

# ---------------------------------------------------------------- vocabulary (synthetic mode)

NAMES = """Alice Bruno Clara Daniel Elena Felix Grace Hugo Irene Jonas Karen Leo Maria Nathan Olga
Peter Quentin Rosa Simon Tanya Victor Wendy Xavier Yasmin Zoe Adam Bella Carlos Diana Edgar Fiona
George Helen Ivan Julia Kevin Laura Martin Nora Oscar Paula Ralph Sara Thomas Ursula Vera Walter
Amber Boris Cecile Dennis Emma Frank Gloria Henry Ingrid Jack Kira Lucas Mona Nick Oliver Pamela
Rita Steve Tina Umar Violet Arthur Bianca Colin Dora Ethan Flora Gavin Hannah Isaac Jane Karl Lena
Marco Nadia Otto Petra Roland Sophie Tobias Una Vincent Willa""".split()

CITIES = """Lisbon Madrid Paris Berlin Vienna Prague Warsaw Dublin Oslo Stockholm Helsinki Athens Rome
Milan Munich Zurich Geneva Brussels Amsterdam London Glasgow Cairo Nairobi Lagos Tokyo Osaka Seoul
Beijing Shanghai Delhi Mumbai Bangkok Hanoi Manila Jakarta Sydney Melbourne Auckland Toronto
Montreal Chicago Boston Denver Seattle Houston Miami Lima Bogota Santiago Havana Quito Tunis Dakar
Accra Kyiv Riga Vilnius Tallinn Sofia Zagreb Belgrade Budapest Ankara Tehran Doha Dubai Muscat
Kabul Lahore Dhaka Colombo Perth Hobart Calgary Ottawa Phoenix Dallas Austin Porto Seville Lyon
Nantes Bordeaux Hamburg Cologne Bergen Malmo Krakow Gdansk""".split()

ROLES = """the baker|the old fisherman|a young teacher|the librarian|my neighbour|the mayor|a tired
nurse|the gardener|the postman|a curious child|the shopkeeper|an elderly farmer|the painter|the
night guard|a travelling musician|the school principal|the taxi driver|a retired sailor|the
chef|the village doctor|a quiet student|the carpenter|the bus driver|a local poet""".replace("\n", " ").split("|")

PLACES = """the market|the river bank|the small bakery|the train station|the public library|the
harbour|the town square|the old bridge|the village school|the hill behind the church|the corner
café|the busy port|the museum|the city park|the quiet beach|the flower shop|the bus stop|the
farm road|the football field|the wooden pier""".replace("\n", " ").split("|")

TIMES = """on Monday morning|early in the evening|after lunch|before sunrise|late at night|on a
rainy afternoon|during the summer festival|in the first week of spring|at the end of autumn|on a
cold winter day|every Sunday|just after dawn|around noon|on the last day of the month""".replace(
    "\n", " ").split("|")

OBJECTS = """a basket of apples|an old map|a wooden chair|a blue umbrella|a loaf of bread|a pile of
letters|a box of tools|a jar of honey|a bunch of flowers|a heavy suitcase|a small radio|a red
bicycle|a stack of books|a bag of oranges|a pair of boots|a painted kite|a warm blanket|a bottle of
milk|a tin of paint|a fishing net""".replace("\n", " ").split("|")

WEATHER = """The sky was grey and the wind blew from the sea.|A light rain fell over the roofs for
most of the day.|The sun was warm and the streets were full of people.|Fog covered the valley until
the middle of the morning.|It was the coldest week of the year, and the lake froze at the edges.|A
soft breeze carried the smell of fresh bread down the street.|Dark clouds gathered above the hills,
but the storm never came.|The snow melted quickly and the rivers rose.""".replace("\n", " ").split("|")

ADJS = "quiet busy cheerful sleepy crowded peaceful noisy friendly small lively".split()

VERBS_MOVE = "walked|hurried|drove|cycled|wandered|went".split("|")
VERBS_CARRY = "carried|brought|found|bought|repaired|sold|painted|borrowed".split("|")
ACTIVITIES = """talked about the weather|read the newspaper|counted the boats in the harbour|fed the
ducks|sang an old song|wrote a long letter|watched the clouds|played cards with friends|cleaned the
windows|planted new seeds""".replace("\n", " ").split("|")


def _a(rng, xs):
    return rng.choice(xs)


def _cap(s: str) -> str:
    return s[0].upper() + s[1:]


def filler_sentence(rng: random.Random) -> str:
    """One sentence of everyday prose from a random template."""
    t = rng.randrange(14)
    r, p, tm, o = _a(rng, ROLES), _a(rng, PLACES), _a(rng, TIMES), _a(rng, OBJECTS)
    if t == 0:
        return f"{_cap(r)} {_a(rng, VERBS_MOVE)} to {p} {tm}."
    if t == 1:
        return f"{_cap(tm)}, {r} {_a(rng, VERBS_CARRY)} {o} near {p}."
    if t == 2:
        return _a(rng, WEATHER)
    if t == 3:
        return f"At {p}, {r} {_a(rng, ACTIVITIES)} while {_a(rng, ROLES)} waited outside."
    if t == 4:
        return f"Nobody remembered why {r} had left {o} at {p}."
    if t == 5:
        return f"{_cap(p)} was {_a(rng, ADJS)} {tm}, and {r} {_a(rng, ACTIVITIES)}."
    if t == 6:
        n = rng.randrange(2, 12)
        return f"{_cap(r)} said that {n} people had visited {p} {tm}."
    if t == 7:
        return f"Later, {r} and {_a(rng, ROLES)} {_a(rng, VERBS_MOVE)} together to {p}."
    if t == 8:
        return f"{_cap(r)} often {_a(rng, ACTIVITIES)} {tm}."
    if t == 9:
        return f"There was {o} on the table, and {r} looked at it for a long time."
    if t == 10:
        return f"When {r} arrived at {p}, the doors were already closed."
    if t == 11:
        return f"{_cap(r)} {_a(rng, VERBS_CARRY)} {o} and gave it to {_a(rng, ROLES)}."
    if t == 12:
        return f"People say that {p} looks best {tm}."
    return f"{_cap(r)} {_a(rng, ACTIVITIES)}, then {_a(rng, VERBS_MOVE)} home."


_TOKEN_RE = re.compile(r"\d|[A-Za-z]+|[^\sA-Za-z\d]")


def approx_tokens(text: str) -> int:
    """Rough token count: one per word, digit and punctuation mark (SmolLM2 splits digits)."""
    return len(_TOKEN_RE.findall(text))


COLOURS = "red blue green yellow black white orange purple grey brown silver golden".split()

# Relations for the facts: (kind of key, digits of the value, fact template, question template).
# Every value is a number: SmolLM2-135M copies digit strings from its context far more reliably
# than it retrieves an arbitrary word (measured with the full cache on 16 questions: word values
# under 0.1, one digit relation for all facts 0.6-0.7, the mixed relations about 0.9).
RELATIONS = {
    "code": ("name", 6, "The secret code of {k} is {v}.", "What is the secret code of {k}?"),
    "passcode": ("city", 4, "The passcode of {k} is {v}.", "What is the passcode of {k}?"),
    "room": ("name", 3, "The room number of {k} is {v}.", "What is the room number of {k}?"),
    "ticket": ("name", 5, "The ticket number of {k} is {v}.", "What is the ticket number of {k}?"),
    "safe": ("colour", 4, "The PIN of the {k} safe is {v}.", "What is the PIN of the {k} safe?"),
    "phone": ("city", 6, "The phone number of {k} is {v}.", "What is the phone number of {k}?"),
    "locker": ("name", 2, "The locker number of {k} is {v}.", "What is the locker number of {k}?"),
    "order": ("name", 7, "The order number of {k} is {v}.", "What is the order number of {k}?"),
}
STYLES = {
    "code": ["code"],          # every fact a secret code of a person (homogeneous, hardest)
    "city": ["passcode"],      # every fact a passcode of a city
    "mixed": list(RELATIONS),  # the relations in turn, so facts differ in kind
}


def completion_prompt(fact_template: str, key: str) -> str:
    """The fact's sentence up to its value: "The ticket number of {k} is {v}." -> "The ticket
    number of Vincent is" (what a base model completes with the value)."""
    head, sep, _ = fact_template.partition(" {v}")
    if not sep:
        raise ValueError(f"fact template without ' {{v}}': {fact_template!r}")
    return head.format(k=key)


def make_facts(rng: random.Random, style: str, n: int,
               completion: bool = False) -> list[tuple[str, str, str]]:
    """n facts as (fact sentence, question, answer); keys and values distinct within the list.
    With completion=True the question is the start of the fact's sentence (completion_prompt);
    the random draws are the same either way."""
    pools = {"name": rng.sample(NAMES, len(NAMES)), "city": rng.sample(CITIES, len(CITIES)),
             "colour": rng.sample(COLOURS, len(COLOURS))}
    rels = STYLES[style]
    order = rng.sample(rels, len(rels))
    used: set[str] = set()
    facts = []
    for i in range(n):
        kind, digits, fact, question = RELATIONS[order[i % len(order)]]
        if not pools[kind]:
            raise SystemExit(f"too many facts: ran out of {kind} keys")
        key = pools[kind].pop()
        while True:
            v = str(rng.randrange(10 ** (digits - 1), 10 ** digits))
            if v not in used:
                break
        used.add(v)
        q = completion_prompt(fact, key) if completion else question.format(k=key)
        facts.append((fact.format(k=key, v=v), q, v))
    return facts


def synthetic(args) -> list[dict]:
    rng = random.Random(args.seed)
    out = []
    for c in range(args.contexts):
        style = args.style
        facts = make_facts(rng, style, args.facts, args.completion)
        values = [f[2] for f in facts]
        fact_tokens = sum(approx_tokens(f[0]) for f in facts)
        sentences: list[str] = []
        total = fact_tokens
        while total < args.filler_tokens_approx:
            s = filler_sentence(rng)
            if sentences and s == sentences[-1]:
                continue
            sentences.append(s)
            total += approx_tokens(s)
        # fact i goes to a random sentence boundary inside segment i of the filler
        n = len(sentences)
        bounds = [round(i * n / args.facts) for i in range(args.facts + 1)]
        slots = [rng.randint(bounds[i], bounds[i + 1]) for i in range(args.facts)]
        pieces: list[str] = []
        fi = 0
        for si in range(n + 1):
            while fi < args.facts and slots[fi] == si:
                pieces.append(facts[fi][0])
                fi += 1
            if si < n:
                pieces.append(sentences[si])
        # paragraphs of 4-7 sentences
        paras, cur = [], []
        want = rng.randint(4, 7)
        for p in pieces:
            cur.append(p)
            if len(cur) >= want:
                paras.append(" ".join(cur))
                cur, want = [], rng.randint(4, 7)
        if cur:
            paras.append(" ".join(cur))
        context = "\n\n".join(paras)
        asked = rng.sample(range(args.facts), min(args.questions, args.facts))
        questions = [{"q": facts[i][1], "answer": values[i]} for i in asked]
        out.append({
            "id": f"multikey-{args.seed}-{c:03d}",
            "context": context,
            "questions": questions,
            "meta": {"style": style, "facts": args.facts, "approx_tokens": approx_tokens(context),
                     "asked": asked, **({"questions": "completion"} if args.completion else {})},
        })
    return out


# ---------------------------------------------------------------- real texts

_HEADING_RE = re.compile(r"^(\d+)\.\s+(.*)$")
_SENT_RE = re.compile(r"[^.!?;:]+[.!?;:]")


def paragraphs(text: str) -> list[str]:
    """Paragraphs with hard line wraps joined and whitespace collapsed; underline lines ("-----")
    are dropped."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln for ln in block.split("\n") if not re.fullmatch(r"\s*[-=*_]{3,}\s*", ln)]
        p = " ".join(" ".join(lines).split())
        if p:
            out.append(p)
    return out


def headings(paras: list[str]) -> dict[int, tuple[int, str]]:
    """paragraph index -> (section number, title) for top-level 'N. Title' headings whose numbers
    run consecutively through the file (a stray '7.' inside section 5 is skipped)."""
    found: dict[int, tuple[int, str]] = {}
    expect = None
    for i, p in enumerate(paras):
        m = _HEADING_RE.match(p)
        if not m:
            continue
        num, rest = int(m.group(1)), m.group(2)
        if expect is not None and num != expect:
            continue
        if expect is None and num not in (0, 1):
            continue
        # the title runs to the first ". " (Apache-style "N. Title. Body...") or the paragraph end
        title = rest.split(". ")[0].rstrip(".").strip()
        if not title or len(title.split()) > 9 or not title[0].isupper():
            continue
        found[i] = (num, title)
        expect = num + 1
    return found


def real(args) -> list[dict]:
    rng = random.Random(args.seed)
    out = []
    for path in [Path(p) for p in args.real.split(",") if p]:
        paras = paragraphs(path.read_text(encoding="utf-8", errors="replace"))
        heads = headings(paras)
        # group consecutive paragraphs into chunks of about the target length
        chunks: list[list[int]] = []
        cur: list[int] = []
        size = 0
        for i, p in enumerate(paras):
            t = approx_tokens(p)
            if cur and size + t > args.filler_tokens_approx * 1.15:
                chunks.append(cur)
                cur, size = [], 0
            cur.append(i)
            size += t
        if cur:
            chunks.append(cur)
        # a short tail chunk joins the previous one
        if len(chunks) > 1 and sum(approx_tokens(paras[i]) for i in chunks[-1]) < args.filler_tokens_approx / 2:
            chunks[-2].extend(chunks.pop())
        for ci, idx in enumerate(chunks):
            context = "\n\n".join(paras[i] for i in idx)
            qs = []
            seen_titles = set()
            for i in idx:
                if i in heads:
                    num, title = heads[i]
                    if title.lower() in seen_titles:
                        continue
                    seen_titles.add(title.lower())
                    qs.append({"q": f"What is the title of section {num}?", "answer": title, "kind": "section"})
            cloze = []
            for i in idx:
                if i in heads:
                    continue
                for s in _SENT_RE.findall(paras[i]):
                    words = s.split()
                    if len(words) < 12:
                        continue
                    cut = rng.randint(8, len(words) - 4)
                    start = " ".join(words[:cut])
                    ans = " ".join(words[cut:cut + rng.randint(3, 5)]).rstrip(".,;:!?\"')")
                    if context.count(start) != 1 or len(re.sub(r"[^A-Za-z0-9]", "", ans)) < 6:
                        continue
                    cloze.append({"q": f'Complete the sentence: "{start}"', "answer": ans, "kind": "cloze"})
            rng.shuffle(qs)
            rng.shuffle(cloze)
            n_sec = min(len(qs), args.questions // 2)
            questions = qs[:n_sec] + cloze[: args.questions - n_sec]
            rng.shuffle(questions)
            if len(questions) < min(2, args.questions):
                continue
            out.append({
                "id": f"{path.name}-{ci}",
                "context": context,
                "questions": questions,
                "meta": {"source": str(path), "paragraphs": [idx[0], idx[-1]],
                         "approx_tokens": approx_tokens(context)},
            })
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--contexts", type=int, default=20, help="synthetic contexts to write")
    ap.add_argument("--facts", type=int, default=8, help="key-value facts per synthetic context")
    ap.add_argument("--questions", type=int, default=8, help="questions per context")
    ap.add_argument("--filler-tokens-approx", type=int, default=1000,
                    help="approximate context length in tokens (synthetic: whole context; real: chunk)")
    ap.add_argument("--style", choices=sorted(STYLES), default="mixed",
                    help="fact relations: mixed (eight kinds in turn), code or city (one kind)")
    ap.add_argument("--completion", action="store_true",
                    help="synthetic: each question is the start of its fact's sentence, for base models")
    ap.add_argument("--real", default="", help="comma list of text files: build contexts from them instead")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.real and args.completion:
        raise SystemExit("--completion applies to synthetic contexts only (--real has its own cloze questions)")
    if not args.real and not 1 <= args.questions <= args.facts:
        raise SystemExit("need 1 <= --questions <= --facts")
    rows = real(args) if args.real else synthetic(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    nq = sum(len(r["questions"]) for r in rows)
    toks = [r["meta"]["approx_tokens"] for r in rows]
    print(f"wrote {args.out}: {len(rows)} contexts, {nq} questions, approx tokens "
          f"{min(toks)}..{max(toks)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
