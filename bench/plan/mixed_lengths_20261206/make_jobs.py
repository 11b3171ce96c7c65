"""Writes the mixed-length jobs of bench/RESULTS.md "Planning a job of requests of different
lengths" (2026-12-06): 512 requests, every 16th a prompt of 1,400 words, the rest 28 words (words
drawn from a fixed list, seed 11), max_tokens 32 (mixed.jsonl) and 128 (mixed_gen128.jsonl)."""
import json
import random
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "."
r = random.Random(11)
words = ("the of and to in a is that for it as was with be by on not he this are or his from at "
         "which but have an they you were her she there one all we their").split()
rows = []
for i in range(512):
    n = 1400 if i % 16 == 15 else 28
    rows.append({"id": f"r{i}", "prompt": " ".join(r.choice(words) for _ in range(n))})
for gen, name in ((32, "mixed.jsonl"), (128, "mixed_gen128.jsonl")):
    with open(f"{out}/{name}", "w") as f:
        for row in rows:
            f.write(json.dumps(dict(row, max_tokens=gen)) + "\n")
