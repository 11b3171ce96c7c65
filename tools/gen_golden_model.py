#!/usr/bin/env python3
"""Generate golden model-parity data for offgen's Llama implementation.

Reference: Hugging Face transformers, loading SmolLM2-135M-Instruct straight from
the same GGUF file the C++ runtime reads (transformers dequantises every tensor to
fp32 and un-permutes the attn_q / attn_k rows). Runs in fp32, eager attention, on
CPU with 2 threads.

Writes into tests/data/golden/ (or --out):
  smollm2.json        prompts, token ids, greedy continuations, margins, debug numbers
  smollm2_p<i>.f32    raw little-endian float32 last-position logits (n_vocab floats)

Usage:
  /opt/offgen-dev/bin/python tools/gen_golden_model.py [GGUF] [--out DIR]

GGUF defaults to $OFFGEN_MODEL, else $OFFGEN_CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf,
else ~/.cache/offgen/models/SmolLM2-135M-Instruct.Q4_1.gguf (same order as
tests/model_path.h).

Needs: torch, transformers (>=4.45 for GGUF), accelerate (transformers refuses GGUF
loading without it), gguf, numpy.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import inspect
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
N_GREEDY = 32
N_DEBUG = 8

# Prompts, shortest first. Token counts (no BOS) are checked below and recorded.
PROMPTS: list[tuple[str, str]] = [
    # p0: plain English, 5 tokens.
    ("english_short", "The capital of France is"),
    # p1: code, ~20 tokens.
    (
        "code",
        "def fibonacci(n):\n"
        '    """Return the n-th Fibonacci number."""\n'
        "    if n < 2:\n",
    ),
    # p2: ChatML chat prompt (what the model's chat template produces), ~60 tokens.
    (
        "chatml",
        "<|im_start|>system\n"
        "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\n"
        "I am writing the user guide for a small command-line tool. "
        "Give me three short tips for writing clear technical documentation, "
        "one sentence each.<|im_end|>\n"
        "<|im_start|>assistant\n",
    ),
    # p3: digits and punctuation, ~150 tokens (SmolLM2 tokenises every digit separately).
    (
        "digits_punct",
        "Order #48213 (placed 2024-03-17 at 09:45 UTC): 3 x widget @ $12.99, 2 x gadget @ $7.50; "
        "total = $53.97 + tax (8.25%) = $58.42. Phone: +1 (555) 010-9876; ref: [ID:0xFF3A]. "
        "Q: Is 17 * 23 == 391? A: yes; 391 / 17 = 23.0, so... pi ~ 3.14159!",
    ),
]


def default_gguf() -> str:
    e = os.environ.get("OFFGEN_MODEL")
    if e and os.path.isfile(e):
        return e
    cache = os.environ.get("OFFGEN_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "offgen")
    return os.path.join(cache, "models", MODEL_FILE)


def _pkg_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def f32list(t) -> list[float]:
    """float32 values as exact Python floats (round-trip through JSON exactly)."""
    a = np.asarray(t.detach().cpu() if isinstance(t, torch.Tensor) else t, dtype=np.float32).reshape(-1)
    return [float(x) for x in a]


def top2(logits: torch.Tensor) -> tuple[int, int, float]:
    v, i = torch.topk(logits, 2)
    return int(i[0]), int(i[1]), float(v[0] - v[1])


def _cache_kw(model) -> str:
    # transformers 5.x renamed past_key_values -> cache (the old name still works, with a warning).
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _get_cache(out):
    c = getattr(out, "cache", None)
    return c if c is not None else out.past_key_values


@torch.no_grad()
def run_prompt(model, ids: list[int], want_debug: bool) -> dict:
    x = torch.tensor([ids], dtype=torch.long)
    debug: dict = {}
    hooks = []
    if want_debug:
        captured: dict[str, torch.Tensor] = {}

        def grab(name):
            def hook(_mod, _inp, out):
                o = out[0] if isinstance(out, tuple) else out
                captured.setdefault(name, o.detach().clone())

            return hook

        hooks.append(model.model.embed_tokens.register_forward_hook(grab("embed")))
        hooks.append(model.model.norm.register_forward_hook(grab("final_norm")))
        for li, layer in enumerate(model.model.layers):
            hooks.append(layer.register_forward_hook(grab(f"layer{li}")))

    # Single forward pass over the whole prompt; its last-position logits are the golden logits.
    out = model(input_ids=x, use_cache=True)
    for h in hooks:
        h.remove()
    prompt_logits = out.logits[0, -1].float().clone()
    past = _get_cache(out)

    if want_debug:
        # Sanity: the captured final-norm vector times the (tied) output matrix gives the logits.
        h = captured["final_norm"][0, -1]
        recon = model.lm_head.weight @ h
        assert torch.allclose(recon, prompt_logits, atol=1e-3), float((recon - prompt_logits).abs().max())
        n_layers = len(model.model.layers)
        debug = {
            "position": len(ids) - 1,
            "logits_first8": f32list(prompt_logits[:N_DEBUG]),
            "final_norm_hidden_first8": f32list(captured["final_norm"][0, -1, :N_DEBUG]),
            "embed_first8": f32list(captured["embed"][0, -1, :N_DEBUG]),
            "layer_out_first8": [f32list(captured[f"layer{i}"][0, -1, :N_DEBUG]) for i in range(n_layers)],
            "layer_out_rms": [
                float(captured[f"layer{i}"][0, -1].pow(2).mean().sqrt()) for i in range(n_layers)
            ],
        }

    # Manual greedy loop with the KV cache, no EOS stopping.
    greedy_ids: list[int] = []
    margins: list[float] = []
    runner_up: list[int] = []
    step_logits = prompt_logits
    for step in range(N_GREEDY):
        t1, t2, m = top2(step_logits)
        greedy_ids.append(t1)
        runner_up.append(t2)
        margins.append(m)
        if step + 1 == N_GREEDY:
            break
        out = model(input_ids=torch.tensor([[t1]], dtype=torch.long), use_cache=True, **{_cache_kw(model): past})
        past = _get_cache(out)
        step_logits = out.logits[0, -1].float()

    # Cross-check: recompute the whole sequence without the cache; report disagreement.
    full = torch.tensor([ids + greedy_ids[:-1]], dtype=torch.long)
    nocache = model(input_ids=full, use_cache=False).logits[0, len(ids) - 1 :].float()
    nocache_argmax = nocache.argmax(-1).tolist()
    cache_vs_nocache = float((nocache[0] - prompt_logits).abs().max())
    mism = [i for i, (a, b) in enumerate(zip(nocache_argmax, greedy_ids)) if a != b]

    return {
        "prompt_logits": prompt_logits.numpy().astype("<f4"),
        "greedy_ids": greedy_ids,
        "greedy_runner_up_ids": runner_up,
        "greedy_margins": margins,
        "nocache_mismatch_steps": mism,
        "nocache_first_logits_max_diff": cache_vs_nocache,
        "debug": debug,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf", nargs="?", default=None, help="path to SmolLM2-135M-Instruct.Q4_1.gguf")
    repo = Path(__file__).resolve().parent.parent
    ap.add_argument("--out", default=str(repo / "tests" / "data" / "golden"), help="output directory")
    args = ap.parse_args()

    gguf_path = os.path.abspath(args.gguf or default_gguf())
    if not os.path.isfile(gguf_path):
        print(f"error: GGUF not found: {gguf_path}", file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(0)
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)

    gdir, gname = os.path.split(gguf_path)
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    model = AutoModelForCausalLM.from_pretrained(
        gdir, gguf_file=gname, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    t_load = time.time() - t0
    cfg = model.config
    n_vocab = cfg.vocab_size
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    rope = getattr(cfg, "rope_parameters", None) or {"rope_theta": getattr(cfg, "rope_theta", None)}
    print(
        f"loaded in {t_load:.1f}s: vocab={n_vocab} layers={cfg.num_hidden_layers} d={cfg.hidden_size} "
        f"heads={cfg.num_attention_heads}/{cfg.num_key_value_heads} rope={rope} eps={cfg.rms_norm_eps} tied={tied}"
    )

    doc: dict = {
        "model_file": os.path.basename(gguf_path),
        "model_sha256": sha256_file(gguf_path),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "tokenizers_version": _pkg_version("tokenizers"),
        "accelerate_version": _pkg_version("accelerate"),
        "python_version": sys.version.split()[0],
        "dtype": "float32",
        "attn_implementation": "eager",
        "device": "cpu",
        "torch_num_threads": 2,
        "n_vocab": n_vocab,
        "n_greedy": N_GREEDY,
        "tokenizer": {
            "source": "transformers AutoTokenizer from the same GGUF",
            "add_bos_token": bool(getattr(tok, "add_bos_token", False)),
            "bos_prepended": False,
            "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id,
            "note": "ids were produced with add_special_tokens=True and contain no BOS; "
            "<|im_start|>/<|im_end|> are special tokens ids 1/2. Tests should feed 'ids' directly.",
        },
        "config": {
            "rope_theta": float(rope.get("rope_theta")),
            "rms_norm_eps": float(cfg.rms_norm_eps),
            "tie_word_embeddings": bool(tied),
            "n_layer": cfg.num_hidden_layers,
            "n_embd": cfg.hidden_size,
            "n_head": cfg.num_attention_heads,
            "n_head_kv": cfg.num_key_value_heads,
            "n_ff": cfg.intermediate_size,
        },
        "prompts": [],
    }

    t_gen_total = 0.0
    for i, (name, text) in enumerate(PROMPTS):
        ids = tok(text).input_ids
        ids_nospecial = tok(text, add_special_tokens=False).input_ids
        assert ids == ids_nospecial, "tokenizer added special tokens unexpectedly"
        if tok.bos_token_id is not None and name != "chatml":
            assert ids[0] != tok.bos_token_id, "BOS was prepended"
        assert tok.decode(ids) == text, f"prompt {i} does not round-trip through the tokenizer"

        t1 = time.time()
        r = run_prompt(model, ids, want_debug=(i == 0))
        dt = time.time() - t1
        t_gen_total += dt

        logits = r["prompt_logits"]
        assert logits.shape == (n_vocab,) and logits.dtype == np.dtype("<f4")
        fname = f"smollm2_p{i}.f32"
        logits.tofile(out_dir / fname)
        order = np.argsort(-logits, kind="stable")[:5]
        entry = {
            "name": name,
            "text": text,
            "n_tokens": len(ids),
            "ids": ids,
            "greedy_ids": r["greedy_ids"],
            "greedy_text": tok.decode(r["greedy_ids"]),
            "greedy_margins": r["greedy_margins"],
            "greedy_runner_up_ids": r["greedy_runner_up_ids"],
            "logits_file": fname,
            "logits_sha256": hashlib.sha256(logits.tobytes()).hexdigest(),
            "logits_max_abs": float(np.abs(logits).max()),
            "logits_top5_ids": [int(x) for x in order],
            "logits_top5": [float(logits[x]) for x in order],
        }
        if r["debug"]:
            entry["debug"] = r["debug"]
        doc["prompts"].append(entry)
        print(
            f"p{i} {name}: {len(ids)} tokens, {dt:.2f}s, min margin {min(r['greedy_margins']):.4f} "
            f"at step {int(np.argmin(r['greedy_margins']))}, cache-vs-nocache first logits diff "
            f"{r['nocache_first_logits_max_diff']:.2e}, nocache argmax mismatches {r['nocache_mismatch_steps']}"
        )
        print(f"    greedy: {entry['greedy_text']!r}")

    with open(out_dir / "smollm2.json", "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"generation took {t_gen_total:.1f}s for {len(PROMPTS)} prompts (load {t_load:.1f}s); wrote {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
