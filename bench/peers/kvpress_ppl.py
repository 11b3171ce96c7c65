#!/usr/bin/env python3
"""Independent check of offgen's KV-eviction quality: teacher-forced perplexity under kvpress.

Protocol (the one `offgen eval ppl --evict-scope prefill` implements, so the curves compare):

* Texts (default: four Debian licence files) are tokenised with the model's tokenizer, no special
  tokens (SmolLM2 has no BOS), and truncated to N tokens (default 2048; a shorter text is an error).
* The prefix (tokens 0..P-1, default P = 512) is prefilled in one forward with a kvpress press at
  compression_ratio = 1 - r, r = retained fraction. The press compresses every layer's cache in a
  forward hook right after that layer's attention, so the prefix's own logits are uncompressed.
* The continuation is then fed teacher-forced in one forward over the compressed DynamicCache,
  outside the press context (kvpress presses only act on a prefill anyway). RoPE positions continue
  from P (position_ids = P.., as kvpress's own pipeline does); the causal mask follows the cache.
* Scored: tokens P..N-1 (N-P of them), the first predicted from the prefix's last-position logits.
  ppl = exp(mean NLL); top1_agreement = share of scored positions whose argmax equals the argmax of
  the full-cache run. Text "all" pools the scored tokens of every text.

Policies: full (no press), h2o = ObservedAttentionPress, sinks = StreamingLLMPress (4 sinks),
snapkv = SnapKVPress. Model: SmolLM2-135M-Instruct from the GGUF file (transformers dequantises to
fp32), eager attention (ObservedAttentionPress needs the attention weights), CPU.

Output: --json (a list of DESIGN.md §3 eval rows {policy, budget, metric, value, tokens} plus
"text", "system" and "run" (provenance) keys) and --md (a table, also printed). See
bench/peers/README.md ("kvpress perplexity") for installation and caveats. Dev-time only.

Run with /opt/offgen-kvpress/bin/python (kvpress 0.5.5 + transformers 5.2.0; kvpress's hooks do not
work with the dev venv's transformers 5.24). The presses' r = 1 rows reuse the full-cache run
(compression_ratio 0 leaves the cache untouched); --rerun-unity runs them.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import importlib.metadata as md
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF dequantisation progress bar

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

import kvpress  # noqa: E402
from kvpress import ObservedAttentionPress, SnapKVPress, StreamingLLMPress  # noqa: E402

DEFAULT_MODEL = Path.home() / ".cache/offgen/models/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_TEXTS = ",".join("/usr/share/common-licenses/" + n for n in ("GPL-3", "GFDL-1.3", "MPL-2.0", "Apache-2.0"))


def log(msg: str) -> None:
    print(f"[kvpress_ppl {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_press(policy: str, r: float, args):
    """The kvpress press standing for an offgen policy at retained fraction r (None = full cache)."""
    cr = 1.0 - r
    if policy == "full":
        return None
    if policy == "h2o":
        return ObservedAttentionPress(compression_ratio=cr)
    if policy == "sinks":
        return StreamingLLMPress(compression_ratio=cr, n_sink=args.sinks)
    if policy == "snapkv":
        return SnapKVPress(compression_ratio=cr, window_size=args.snapkv_window, kernel_size=args.snapkv_kernel)
    raise SystemExit(f"unknown policy {policy!r} (known: full, h2o, sinks, snapkv)")


@torch.inference_mode()
def score(model, ids: torch.Tensor, prefix: int, press) -> dict:
    """Prefill ids[:prefix] under `press`, then the continuation teacher-forced over the (compressed)
    cache. Returns per-token NLL and argmax of the scored tokens ids[prefix:], and the kept length."""
    n = ids.shape[1]
    cache = DynamicCache()
    with press(model) if press is not None else contextlib.nullcontext():
        out = model(input_ids=ids[:, :prefix], past_key_values=cache, use_cache=True, logits_to_keep=1)
    lengths = {cache.get_seq_length(layer) for layer in range(len(cache))}
    if len(lengths) != 1:
        raise RuntimeError(f"layers kept different lengths: {sorted(lengths)}")
    kept = lengths.pop()
    # Tokens prefix..n-2 are enough: their logits predict prefix+1..n-1 (the last token is only a target).
    pos = torch.arange(prefix, n - 1).unsqueeze(0)
    out2 = model(input_ids=ids[:, prefix : n - 1], past_key_values=cache, position_ids=pos, use_cache=True)
    logits = torch.cat([out.logits[0, -1:], out2.logits[0]], dim=0).float()  # [n - prefix, vocab]
    targets = ids[0, prefix:]
    nll = -torch.log_softmax(logits, dim=-1).gather(1, targets.unsqueeze(1)).squeeze(1)
    if cache.get_seq_length() != kept + (n - 1 - prefix):
        raise RuntimeError("the continuation changed the cache size (compression during decoding?)")
    return {"nll": nll.double(), "argmax": logits.argmax(-1), "kept": kept}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--texts", default=DEFAULT_TEXTS, help="comma list of text files")
    ap.add_argument("--tokens", type=int, default=2048, help="N: tokens per text")
    ap.add_argument("--prefix", type=int, default=512, help="P: prefix tokens prefilled under the press")
    ap.add_argument("--ratios", default="1.0,0.5,0.3,0.2,0.1", help="retained fractions r")
    ap.add_argument("--policies", default="h2o,sinks,snapkv")
    ap.add_argument("--sinks", type=int, default=4, help="StreamingLLMPress n_sink")
    ap.add_argument("--snapkv-window", type=int, default=64, help="SnapKVPress window_size (kvpress default 64)")
    ap.add_argument("--snapkv-kernel", type=int, default=5, help="SnapKVPress kernel_size (kvpress default 5)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rerun-unity", action="store_true",
                    help="run the presses at r = 1 too instead of reusing the full-cache run")
    ap.add_argument("--json", type=Path, default=Path(__file__).with_name("kvpress_ppl.json"))
    ap.add_argument("--md", type=Path, default=Path(__file__).with_name("kvpress_ppl.md"))
    args = ap.parse_args()

    t_start = time.time()
    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    texts = [Path(t) for t in args.texts.split(",") if t]
    ratios = [float(x) for x in args.ratios.split(",")]
    policies = [p for p in args.policies.split(",") if p]
    n, p = args.tokens, args.prefix
    if not 0 < p < n or any(not 0 < r <= 1 for r in ratios):
        raise SystemExit("need 0 < prefix < tokens and 0 < r <= 1")
    scored = n - p

    tok = AutoTokenizer.from_pretrained(args.model.parent, gguf_file=args.model.name)
    # transformers' GGUF path does not know tokenizer.ggml.pre = "smollm" and skips SmolLM2's
    # digit split; install the real tokenizer.json pre-tokenizer so the token ids are offgen's
    # (and SmolLM2's own) -- see tools/gen_tokenizer_golden.py.
    from tokenizers import pre_tokenizers
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    model = AutoModelForCausalLM.from_pretrained(
        args.model.parent, gguf_file=args.model.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    system = f"kvpress {md.version('kvpress')}"
    presses = {"full": "none", "h2o": "ObservedAttentionPress",
               "sinks": f"StreamingLLMPress(n_sink={args.sinks})",
               "snapkv": f"SnapKVPress(window_size={args.snapkv_window}, kernel_size={args.snapkv_kernel})"}
    # Provenance, repeated in every JSON row (the file stays a plain list of eval rows).
    run = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "kvpress": md.version("kvpress"), "transformers": md.version("transformers"),
        "torch": torch.__version__, "python": platform.python_version(),
        "model_file": args.model.name, "model_sha256": sha256_file(args.model),
        "dtype": "float32", "attn": "eager", "threads": args.threads,
        "tokens_per_text": n, "prefix": p, "evict_scope": "prefill",
    }
    log(f"{system}, transformers {run['transformers']}, torch {run['torch']}, threads {args.threads}")

    # results[(policy, r)][text] = score() output; "full" is run once per text at r = 1.0.
    results: dict[tuple[str, float], dict[str, dict]] = {}
    for path in texts:
        ids = tok(path.read_text(), add_special_tokens=False, return_tensors="pt").input_ids
        if ids.shape[1] < n:
            raise SystemExit(f"{path}: {ids.shape[1]} tokens < --tokens {n}")
        ids = ids[:, :n]
        for policy in ["full"] + policies:
            for r in [1.0] if policy == "full" else ratios:
                t0 = time.time()
                if r == 1.0 and policy != "full" and not args.rerun_unity:
                    # compression_ratio 0: ScorerPress.compress returns the cache untouched, so the
                    # run is the full one (checked with --rerun-unity); reuse it to save time.
                    res = results[("full", 1.0)][path.name]
                else:
                    res = score(model, ids, p, make_press(policy, r, args))
                results.setdefault((policy, r), {})[path.name] = res
                ppl = math.exp(res["nll"].mean().item())
                log(f"{path.name:11s} {policy:6s} r={r:<4} kept={res['kept']:4d} ppl={ppl:8.4f} "
                    f"({time.time() - t0:.1f}s)")

    wall = time.time() - t_start
    run["wall_seconds"] = round(wall, 1)
    rows, table = [], []
    full = results[("full", 1.0)]
    names = [t.name for t in texts]
    for (policy, r), per_text in results.items():
        cells = {}
        for text in names + ["all"]:
            if text == "all":
                nll = torch.cat([per_text[t]["nll"] for t in names])
                agree = torch.cat([per_text[t]["argmax"] == full[t]["argmax"] for t in names])
            else:
                nll, agree = per_text[text]["nll"], per_text[text]["argmax"] == full[text]["argmax"]
            ppl, agr = math.exp(nll.mean().item()), agree.double().mean().item()
            kept = per_text[names[0]]["kept"]
            cells[text] = ppl
            for metric, value in (("ppl", ppl), ("top1_agreement", agr), ("kept_tokens", kept)):
                rows.append({"policy": policy, "budget": r, "metric": metric, "value": value,
                             "tokens": len(nll), "text": text, "system": system,
                             "run": {**run, "press": presses[policy]}})
        table.append((policy, r, kept, cells, agr))

    full_ppl = table[0][3]["all"]
    lines = [
        f"# kvpress perplexity under prefill KV eviction — {system}",
        "",
        f"Run {run['date']}, {wall / 60:.1f} min wall. transformers {run['transformers']}, torch {run['torch']}, "
        f"Python {run['python']}, {args.threads} threads, fp32, eager attention.",
        f"Model `{run['model_file']}` sha256 `{run['model_sha256']}`.",
        f"Texts: {', '.join(names)}; N = {n} tokens each, prefix P = {p} prefilled under the press, "
        f"{scored} scored tokens per text ({scored * len(names)} pooled in \"all\").",
        "Presses: " + "; ".join(f"{k} = {presses[k]}" for k in policies) + ". Budget r = retained fraction; "
        "compression_ratio = 1 − r; kept = KV pairs per layer and KV head after the prefix.",
        "",
        "| policy | budget r | kept / P | ppl (all) | Δppl vs full | top-1 agreement (all) | "
        + " | ".join(f"ppl {t}" for t in names) + " |",
        "|---|---:|---:|---:|---:|---:|" + "---:|" * len(names),
    ]
    for policy, r, kept, cells, agr in table:
        lines.append(f"| {policy} | {r:g} | {kept}/{p} | {cells['all']:.4f} | "
                     f"{100 * (cells['all'] / full_ppl - 1):+.2f}% | {agr:.4f} | "
                     + " | ".join(f"{cells[t]:.4f}" for t in names) + " |")
    lines += ["", "Generated by `bench/peers/kvpress_ppl.py`; raw rows in the JSON next to this file.", ""]
    text_md = "\n".join(lines)
    print(text_md)
    args.md.write_text(text_md)
    args.json.write_text("[\n" + ",\n".join(json.dumps(row) for row in rows) + "\n]\n")
    log(f"wrote {args.json} and {args.md} ({wall:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
