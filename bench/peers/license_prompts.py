#!/usr/bin/env python3
"""Writes one prompt per line from the Debian licence texts (paragraphs joined to 800-1600
characters, 16 per text at most): gemma_parity.py's --prompts for the next-token KL divergence of
each system's integer path against its fp32 run (about 250 tokens each, 71 prompts).

  python3 bench/peers/license_prompts.py /tmp/license_prompts.txt
"""
import re
import sys
from pathlib import Path

TEXTS = ["GPL-3", "LGPL-2.1", "MPL-1.1", "GFDL-1.3", "Apache-2.0"]


def main():
    out = []
    for name in TEXTS:
        text = Path("/usr/share/common-licenses", name).read_text()
        paras = [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", text)]
        cur, got = "", 0
        for p in (p for p in paras if len(p) > 200):
            cur = (cur + " " + p).strip()
            if len(cur) > 800:
                out.append(cur[:1600])
                cur, got = "", got + 1
            if got >= 16:
                break
    Path(sys.argv[1]).write_text("\n".join(out) + "\n")
    print(f"{len(out)} prompts -> {sys.argv[1]}")


if __name__ == "__main__":
    main()
