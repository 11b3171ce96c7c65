#!/usr/bin/env python3
"""Independent check of offgen's multi-query KV eviction: one compressed context, many questions, kvpress.

For each context of a multi-query JSONL file (tools/gen_multikey.py writes them; one line per
context: {"id", "context", "questions": [{"q", "answer"?}, ...]}), each press and each retained
fraction r: prefill the context ONCE under the press (compression_ratio = 1 - r), then answer
every question greedily over that compressed cache, dropping the question/answer KV before the
next question. Compared with the full cache's answers (agreement) and the given answers (accuracy).
This is the protocol of `offgen eval multiquery`; the C++ side mirrors the prompt below token for
token.

Prompt (kvpress's KVPressTextGenerationPipeline, "kv-press-text-generation", used as is):

* context text = chat_template([{"role": "user", "content": CONTEXT + SEP}], add_generation_prompt)
  cut at SEP (a run of '#'), i.e. for SmolLM2 (whose template adds its default system prompt):
      "<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
      "<|im_end|>\\n<|im_start|>user\\n" + CONTEXT
* question text = "\\n\\n" + Q + "<|im_end|>\\n<|im_start|>assistant\\n"
  ("\\n\\n" is this script's QUESTION_PREFIX; the rest is the template's tail after the user
  content, which the pipeline appends as `question_suffix`; answer_prefix is empty)
* the two texts are tokenised SEPARATELY, tokenizer.encode(text, add_special_tokens=False)
  (SmolLM2 has no BOS; <|im_start|> / <|im_end|> are special tokens 1 / 2 inside the text), so a
  token never spans the context/question boundary. Context ids are positions 0..C-1.
* prefill: model.model(context_ids) under the press, on a fresh DynamicCache (no logits).
* per question: one forward of the question ids at positions C..C+Lq-1 over the (compressed)
  cache; the last logits give token 1 (argmax); then up to max_new_tokens - 1 single-token greedy
  steps at positions C+Lq, C+Lq+1, ...; stop after the EOS token (<|im_end|>, id 2) is produced.
  RoPE positions continue from the ORIGINAL context length C whatever the press kept. Then the
  cache is cut back to its length before the question (question + answer KV dropped).
* answer = tokenizer.decode(generated ids, skip_special_tokens=True), cut at the first "\\n",
  then .strip(). (The pipeline does not stop at a newline; cutting the text afterwards is the same
  as stopping there, since greedy tokens before the newline do not depend on what follows.)

Metrics per (policy, r), pooled over all questions of all contexts:
* agreement = fraction of questions whose answer string equals the full cache's answer string
  exactly (after the strip above).
* accuracy (questions with an "answer" only) = fraction where norm(answer) occurs in norm(output)
  at word boundaries: norm(s) = " " + " ".join(re.sub("[^0-9a-z]", " ", s.lower()).split()) + " "
  (lower case, every non-alphanumeric character a space, whitespace collapsed, padded), and the
  test is `norm(gold) in norm(out)`; an empty gold answer never counts as correct.
* kept_fraction = KV pairs kept / (layers x KV heads x C), averaged over contexts (kvzip's
  budgets differ per layer and head; the others keep the same count everywhere).

Policies -> kvpress presses (r = retained fraction = the row's "budget"):
* full      no press.
* kvzip     KVzipPress(compression_ratio=1-r, n_sink=4, layerwise=False, chunk_size=2048): scored
            by context reconstruction (query-agnostic). kvpress MASKS the evicted pairs instead of
            removing them (see bench/peers/README.md, "kvpress multi-query").
* snapkv    SnapKVPress(window_size=64, kernel_size=5) on the context alone: the observation
            window is the last 64 context tokens (query-agnostic use, what the pipeline does).
* snapkv_q1 SnapKV compressed for the FIRST question and reused for all: the prefill is
            context + question 1 (its full question ids, suffix included) and the observation
            window is exactly question 1's tokens; the top-k (k = int(C * r), kvpress's count) of
            the C context positions by SnapKV score are kept and question 1's KV is dropped, so
            every question (the first included) is then answered over the same compressed
            context. (A small subclass of SnapKVPress; kvpress has no such mode.)
* h2o       ObservedAttentionPress on the context (H2O-like scoring; needs eager attention).
* sinks     StreamingLLMPress(n_sink=4): the first 4 context tokens + the most recent ones.
The presses' r = 1 rows reuse the full-cache answers (compression_ratio 0 leaves the cache
untouched); --rerun-unity runs them. h2o runs on a second copy of the model with eager attention,
every other policy with sdpa (KVzipPress refuses eager); the rows "full_eager" (agreement of an
eager full-cache run with the sdpa one) show whether that matters.

Output: --json (a list of DESIGN.md §3 eval rows {policy, budget, metric, value, tokens} with
tokens = context tokens summed over the contexts, plus "questions", "system", "dataset" and "run"
(provenance) keys; the full policy's agreement row also carries "answers": {context id: [answer
per question]} for the C++ side to compare with) and --md (a table, also printed). --answers FILE
writes every (policy, r, context, question) output as JSONL.

Completion style (--completion; automatic when the tokenizer has no chat template), for base models
such as Gemma 3 270M and datasets whose questions are sentence starts (gen_multikey.py --completion).
kvpress's pipeline is NOT used: without a chat template it puts the BOS token's text before the
context and appends "\n" to every question, which this prompt does not. The script drives the model
and the press itself:

* context ids  = [BOS] + tokenizer.encode(CONTEXT, add_special_tokens=False)   (Gemma 3: BOS = 2)
* question ids = tokenizer.encode("\n\n" + Q, add_special_tokens=False), no suffix; e.g. for Gemma 3
  "\n\nThe PIN of the brown safe is" = 108 818 54268 529 506 8864 6338 563 ("\n\n" is one token, 108)
* prefill: model.model(context_ids) under the press on a fresh DynamicCache, positions 0..C-1;
  each question then as above: one forward at positions C..C+Lq-1 over the cache, argmax, up to
  max_new_tokens - 1 single-token steps; stop after EOS (generation_config.eos_token_id; Gemma 3:
  <eos> = 1) or as soon as the decoded text holds a newline (the answer is cut there anyway); the
  cache is cut back after each question. answer = decode(skip_special_tokens=True), cut at the
  first "\n", .strip().
* Sliding-window models (Gemma 3: 15 local layers with a 512-token window, 3 global layers): the
  presses act on the GLOBAL layers only; the local layers keep the whole context and attend to its
  last 512 positions as the model always does (kvpress itself skips them for
  Gemma3ForConditionalGeneration; for the text-only Gemma3ForCausalLM 0.5.5 would hook them too,
  and its KVzipPress refuses Gemma 3, hence the Global*Press classes below). The attention masks of
  the question/answer forwards are built here (layer_masks()), since transformers sizes both from
  layer 0 (a local layer) and would let question tokens see later ones in a shortened global layer.
  kept_fraction counts the global layers only.
* checks on the first context: whole-question vs token-by-token last logits under every press
  (no look-ahead through the masks), and, on the full cache, against transformers' own masks.

Metrics as above, plus agreement_first_word (the answers' first words, trailing punctuation
stripped, equal to the full cache's): a base model runs on after the value ("9463. At the flower
shop, ..."), so whole-answer agreement also counts changes in that continuation.

Run with /opt/offgen-kvpress/bin/python (kvpress 0.5.5 + transformers 5.2.0), on the Hugging Face
export of the model (tools/export_hf_checkpoint.py): KVzipPress loads the tokenizer from
model.config.name_or_path, which must be a directory. See bench/peers/README.md. Dev-time only.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import hashlib
import importlib.metadata as md
import json
import logging
import os
import platform
import re
import sys
import time
from pathlib import Path
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TQDM_DISABLE", "1")
# torch's OpenMP threads spin-wait by default; with another job on the cores that made a 2-thread
# single-token step ~10x slower here (1.4 s against 0.12 s). Sleeping waits change no numerics.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, pipeline  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

import kvpress  # noqa: E402,F401  (registers the "kv-press-text-generation" pipeline)
import kvpress.presses.kvzip_press as kvzip_module  # noqa: E402
from kvpress import KVzipPress, ObservedAttentionPress, SnapKVPress, StreamingLLMPress  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = Path.home() / ".cache/offgen/models/SmolLM2-135M-Instruct-hf"
DEFAULT_CONTEXTS = REPO / "bench/multiquery/multikey.jsonl"
QUESTION_PREFIX = "\n\n"
ALL_POLICIES = ["kvzip", "kvzip_sys", "snapkv", "snapkv_q1", "h2o", "sinks"]
COMPLETION_POLICIES = ["kvzip", "snapkv", "snapkv_q1", "h2o", "sinks"]


def log(msg: str) -> None:
    print(f"[kvpress_multiquery {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def norm(s: str) -> str:
    return " " + " ".join(re.sub(r"[^0-9a-z]", " ", s.lower()).split()) + " "


def correct(gold: str, out: str) -> bool:
    g = norm(gold)
    return g.strip() != "" and g in norm(out)


def clean(answer: str) -> str:
    return answer.split("\n", 1)[0].strip()


def first_word(answer: str) -> str:
    """The answer's first whitespace-separated word without trailing punctuation ("9463. At the" ->
    "9463"): what a completion-style answer puts first, before the base model runs on."""
    words = answer.split()
    return re.sub(r"[^\w]+$", "", words[0]) if words else ""


@dataclasses.dataclass
class FirstQuestionSnapKVPress(SnapKVPress):
    """SnapKV scored by the first question: the prefill is context + question 1, the observation
    window is question 1 (window_size = its length), the top int(n_context * (1 - ratio)) context
    positions are kept and the question's own KV is dropped from the cache."""

    n_context: int = 0

    def compress(self, module, hidden_states, keys, values, attentions, kwargs):
        n = self.n_context
        if self.compression_ratio == 0:
            return keys[:, :, :n].contiguous(), values[:, :, :n].contiguous()
        scores = self.score(module, hidden_states, keys, values, attentions, kwargs)[..., :n]
        n_kept = max(1, int(n * (1 - self.compression_ratio)))
        idx = scores.topk(n_kept, dim=-1).indices.unsqueeze(-1).expand(-1, -1, -1, module.head_dim)
        return keys.gather(2, idx).contiguous(), values.gather(2, idx).contiguous()


@dataclasses.dataclass
class KVzipKeepPrefixPress(KVzipPress):
    """KVzipPress that never evicts the chat-template prefix (system prompt + user header): kvpress
    scores those tokens 0 -- only the context after them is reconstructed -- and protects only the
    first n_sink of them, so they go first; KVzip's paper keeps the system prompt."""

    def compress_post(self, model):
        if self.compression_ratio > 0 and self.score_val is not None:
            self.score_val[..., : self.prefix_length] = self.score_val.amax() + 1.0
        super().compress_post(model)


# ---------------------------------------------------------------- completion style, sliding-window models
#
# kvpress 0.5.5 and Gemma3ForCausalLM (see bench/peers/README.md, "completion style"): BasePress hooks
# every layer of a text-only Gemma 3, sliding ones included (it skips them only for
# Gemma3ForConditionalGeneration), and KVzipPress refuses any Gemma3PreTrainedModel. The classes below
# keep kvpress's scoring and leave the sliding-window (local) layers whole, as kvpress itself does for
# Gemma3ForConditionalGeneration and as offgen does (its policies act on the global layers).


def is_sliding(module) -> bool:
    return bool(getattr(module, "is_sliding", False))


def has_sliding_layers(model) -> bool:
    return any(is_sliding(layer.self_attn) for layer in model.model.layers)


def compressed_layers(model) -> list[int]:
    """The layers a press acts on: the global ones of a sliding-window model, else all."""
    idx = [i for i, layer in enumerate(model.model.layers) if not is_sliding(layer.self_attn)]
    return idx if has_sliding_layers(model) else list(range(len(model.model.layers)))


def _crop_layer(cache, layer_idx: int, n: int) -> None:
    layer = cache.layers[layer_idx]
    layer.keys, layer.values = layer.keys[:, :, :n], layer.values[:, :, :n]


class GlobalLayersOnly:
    """Mixin for a BasePress: the forward hook acts on global layers only; a sliding layer keeps its
    KV (cut to the context when the prefill also held question 1, n_context > 0)."""

    def forward_hook(self, module, input, kwargs, output):
        if not is_sliding(module):
            return super().forward_hook(module, input, kwargs, output)
        n = getattr(self, "n_context", 0)
        if n:
            _crop_layer(kwargs["past_key_values"], module.layer_idx, n)
        return output


class GlobalSnapKVPress(GlobalLayersOnly, SnapKVPress):
    pass


class GlobalFirstQuestionSnapKVPress(GlobalLayersOnly, FirstQuestionSnapKVPress):
    pass


class GlobalObservedAttentionPress(GlobalLayersOnly, ObservedAttentionPress):
    pass


class GlobalStreamingLLMPress(GlobalLayersOnly, StreamingLLMPress):
    pass


class _NotAModel:
    """Stands in for Gemma3PreTrainedModel in KVzipPress's refusal check (nothing is an instance)."""


@dataclasses.dataclass
class GlobalKVzipPress(KVzipPress):
    """kvpress's KVzipPress (context reconstruction, max attention score, masked eviction) on the
    global layers of a sliding-window model. kvpress 0.5.5 refuses Gemma 3 (kvzip_press.py, first
    check of __call__); that check is lifted for the duration of the call. The reconstruction pass
    runs through the whole model as kvpress runs it; a sliding layer is not scored and its copy of the
    reconstruction input is cut off, as kvpress cuts it off every layer. The eviction is kvpress's
    compress_post restricted to the global layers: with layerwise=False one bottom-k over global
    layers x KV heads x positions (int(numel * compression_ratio) pairs, the first n_sink protected),
    then a bottom-k inside each layer; sliding layers get no masked keys."""

    @contextlib.contextmanager
    def __call__(self, model):
        with mock.patch.object(kvzip_module, "Gemma3PreTrainedModel", _NotAModel):
            with super().__call__(model):
                yield

    def forward_hook(self, module, input, kwargs, output):
        if is_sliding(module):
            _crop_layer(kwargs["past_key_values"], module.layer_idx, self.context_length)
            return output
        return super().forward_hook(module, input, kwargs, output)

    def compress_post(self, model):
        layers = model.model.layers
        for layer in layers:
            layer.self_attn.masked_key_indices = None
        if self.compression_ratio <= 0 or self.score_val is None:
            return
        glob = compressed_layers(model)
        scores = self.score_val[glob].clone()  # (G, bsz, kv heads, C)
        scores[..., : self.n_sink] = scores.amax() + 1.0
        n_glob, bsz, n_heads, n_ctx = scores.shape
        per_layer_numel = bsz * n_heads * n_ctx
        if self.layerwise:
            pruned = [int(per_layer_numel * self.compression_ratio)] * n_glob
        else:
            n_pruned = int(scores.numel() * self.compression_ratio)
            flat = torch.topk(-scores.reshape(-1), n_pruned).indices
            pruned = torch.bincount(flat // per_layer_numel, minlength=n_glob).tolist()
        for gi, li in enumerate(glob):
            k = int(pruned[gi])
            idx = torch.topk(-scores[gi].reshape(bsz, -1), k, dim=1).indices.flatten().cpu()
            layers[li].self_attn.masked_key_indices = (torch.arange(bsz).repeat_interleave(k), idx // n_ctx,
                                                       idx % n_ctx)


def make_completion_press(policy: str, r: float, args, sliding: bool):
    """The press of `policy` for completion mode: kvpress's own classes on a model without sliding
    layers, the global-layers-only variants above on one with them."""
    if not sliding:
        return make_press(policy, r, args)
    cr = 1.0 - r
    if policy == "kvzip":
        return GlobalKVzipPress(compression_ratio=cr, n_sink=args.sinks, layerwise=args.kvzip_layerwise,
                                chunk_size=args.kvzip_chunk)
    if policy == "snapkv":
        return GlobalSnapKVPress(compression_ratio=cr, window_size=args.snapkv_window,
                                 kernel_size=args.snapkv_kernel)
    if policy == "snapkv_q1":
        return GlobalFirstQuestionSnapKVPress(compression_ratio=cr, kernel_size=args.snapkv_kernel)
    if policy == "h2o":
        return GlobalObservedAttentionPress(compression_ratio=cr)
    if policy == "sinks":
        return GlobalStreamingLLMPress(compression_ratio=cr, n_sink=args.sinks)
    raise SystemExit(f"policy {policy!r} not available with --completion "
                     f"(known: {', '.join(COMPLETION_POLICIES)})")


def completion_ids(tok, context: str, questions: list[str]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The completion-style prompt: [BOS] + encode(context), and per question encode("\n\n" + q),
    all without special tokens added by the tokenizer; no suffix."""
    if tok.bos_token_id is None:
        raise SystemExit("--completion needs a tokenizer with a BOS token")
    ctx = [tok.bos_token_id] + tok.encode(context, add_special_tokens=False)
    qs = [torch.tensor([tok.encode(QUESTION_PREFIX + q, add_special_tokens=False)]) for q in questions]
    return torch.tensor([ctx]), qs


def layer_masks(model, cache, q_len: int) -> dict:
    """Attention masks for q_len new tokens over a cache whose global layers may hold fewer pairs than
    its sliding layers (transformers sizes both masks from layer 0, a sliding layer, so its own masks
    would let question tokens see later question tokens in a shortened global layer). Global layers:
    the P_g cached pairs are all visible, the new tokens causal among themselves. Sliding layers (never
    compressed, so column = position): key j visible to new token i iff P_s + i - window < j <= P_s + i,
    transformers' sliding-window rule. Boolean for sdpa, additive 0 / -inf-like for eager."""
    types = model.config.layer_types
    lens = {t: {cache.get_seq_length(i) for i, ty in enumerate(types) if ty == t} for t in set(types)}
    if any(len(v) != 1 for v in lens.values()):
        raise RuntimeError(f"layers of one type hold different lengths: {lens}")
    p_g, p_s = lens["full_attention"].pop(), lens["sliding_attention"].pop()
    i = torch.arange(q_len)[:, None]
    jg, js = torch.arange(p_g + q_len)[None], torch.arange(p_s + q_len)[None]
    full = jg <= p_g + i
    slide = (js <= p_s + i) & (js > p_s + i - model.config.sliding_window)
    out = {}
    for name, m in (("full_attention", full), ("sliding_attention", slide)):
        m = m[None, None]
        if model.config._attn_implementation == "eager":
            m = torch.zeros(m.shape, dtype=model.dtype).masked_fill(~m, torch.finfo(model.dtype).min)
        out[name] = m
    return out


def step(model, ids: torch.Tensor, cache, pos: int, sliding: bool, own_masks: bool = False) -> torch.Tensor:
    """One forward of `ids` at positions pos.. over the cache; the last position's logits."""
    mask = layer_masks(model, cache, ids.shape[1]) if sliding and not own_masks else None
    out = model(input_ids=ids, past_key_values=cache, attention_mask=mask,
                position_ids=torch.arange(pos, pos + ids.shape[1])[None], logits_to_keep=1)
    return out.logits[0, -1]


def cache_lengths(cache) -> list[int]:
    return [cache.get_seq_length(i) for i in range(len(cache))]


def crop_cache(cache, lengths: list[int]) -> None:
    for i, n in enumerate(lengths):
        _crop_layer(cache, i, n)


def answer_completion(model, tok, cache, q_ids: torch.Tensor, n_ctx: int, args, sliding: bool) -> str:
    """Greedy answer to one question over the cache at positions n_ctx..; stops after EOS or once the
    text holds a newline (the answer is cut there anyway); the cache is cut back afterwards."""
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    lengths = cache_lengths(cache)
    gen: list[int] = []
    ids, pos = q_ids, n_ctx
    for _ in range(args.max_new_tokens):
        nxt = int(step(model, ids, cache, pos, sliding).argmax())
        gen.append(nxt)
        pos += ids.shape[1]
        ids = torch.tensor([[nxt]])
        if nxt in eos or "\n" in tok.decode(gen, skip_special_tokens=True):
            break
    crop_cache(cache, lengths)
    return tok.decode(gen, skip_special_tokens=True)


def check_masks(model, cache, q_ids: torch.Tensor, n_ctx: int, sliding: bool, label: str,
                compare_own: bool = False) -> float:
    """Self-check on one question: the last logits of one forward over the whole question equal those
    of token-by-token forwards (no token sees a later one through the masks); with compare_own, also
    those of transformers' own masks (valid only while every layer holds the whole context)."""
    lengths = cache_lengths(cache)
    whole = step(model, q_ids, cache, n_ctx, sliding)
    crop_cache(cache, lengths)
    for t in range(q_ids.shape[1]):
        last = step(model, q_ids[:, t:t + 1], cache, n_ctx + t, sliding)
    crop_cache(cache, lengths)
    diff = float((whole - last).abs().max())
    msg = f"mask check {label}: max |dlogit| whole question vs token by token {diff:.2e}"
    if compare_own:
        own = step(model, q_ids, cache, n_ctx, sliding, own_masks=True)
        crop_cache(cache, lengths)
        own_diff = float((whole - own).abs().max())
        msg += f", vs transformers' own masks {own_diff:.2e}"
        diff = max(diff, own_diff)
    log(msg)
    if diff > 1e-3:
        raise RuntimeError(msg)
    return diff


@torch.inference_mode()
def run_one_completion(model, tok, policy: str, r: float, ctx_ids: torch.Tensor, q_ids: list[torch.Tensor],
                       args, check: bool = False) -> tuple[list[str], float]:
    """Completion mode: answers (cleaned) and kept fraction for one context under one press, driving
    the model and press directly (prefill under the press, then each question over the cache)."""
    sliding = has_sliding_layers(model)
    clear_masks(model)
    cache = DynamicCache()
    n_ctx = ctx_ids.shape[1]
    if policy == "full":
        model.model(input_ids=ctx_ids, past_key_values=cache)
    elif policy == "snapkv_q1":
        press = make_completion_press(policy, r, args, sliding)
        press.window_size = q_ids[0].shape[1]
        press.n_context = n_ctx
        with press(model):
            model.model(input_ids=torch.cat([ctx_ids, q_ids[0]], dim=1), past_key_values=cache)
    else:
        press = make_completion_press(policy, r, args, sliding)
        with press(model):
            model.model(input_ids=ctx_ids, past_key_values=cache)
    for i in range(len(cache)):
        n = cache.get_seq_length(i)
        if (i not in compressed_layers(model) or policy in ("full", "kvzip")) and n != n_ctx:
            raise RuntimeError(f"{policy} r={r}: layer {i} holds {n} pairs, expected the whole context {n_ctx}")
    if check:
        check_masks(model, cache, q_ids[0], n_ctx, sliding, f"{policy} r={r}", compare_own=policy == "full")
    answers = [answer_completion(model, tok, cache, q, n_ctx, args, sliding) for q in q_ids]
    frac = kept_fraction(model, cache, n_ctx)
    clear_masks(model)
    return [clean(a) for a in answers], frac


def make_press(policy: str, r: float, args):
    cr = 1.0 - r
    if policy == "kvzip":
        return KVzipPress(compression_ratio=cr, n_sink=args.sinks, layerwise=args.kvzip_layerwise,
                          chunk_size=args.kvzip_chunk)
    if policy == "kvzip_sys":
        return KVzipKeepPrefixPress(compression_ratio=cr, n_sink=args.sinks, layerwise=args.kvzip_layerwise,
                                    chunk_size=args.kvzip_chunk)
    if policy == "snapkv":
        return SnapKVPress(compression_ratio=cr, window_size=args.snapkv_window, kernel_size=args.snapkv_kernel)
    if policy == "snapkv_q1":
        return FirstQuestionSnapKVPress(compression_ratio=cr, kernel_size=args.snapkv_kernel)
    if policy == "h2o":
        return ObservedAttentionPress(compression_ratio=cr)
    if policy == "sinks":
        return StreamingLLMPress(compression_ratio=cr, n_sink=args.sinks)
    raise SystemExit(f"unknown policy {policy!r} (known: {', '.join(ALL_POLICIES)})")


def clear_masks(model) -> None:
    for layer in model.model.layers:
        layer.self_attn.masked_key_indices = None


def kept_fraction(model, cache, n_ctx: int) -> float:
    """Kept KV pairs / (layers x KV heads x n_ctx) of the compressed context cache; on a
    sliding-window model over the global layers only (the ones the presses act on)."""
    cfg = model.config
    layers = compressed_layers(model)
    total = len(layers) * cfg.num_key_value_heads * n_ctx
    kept = 0
    for li in layers:
        layer = model.model.layers[li]
        length = cache.get_seq_length(li)
        kept += cfg.num_key_value_heads * length
        masked = getattr(layer.self_attn, "masked_key_indices", None)
        if masked is not None:
            kept -= len(masked[0])
    return kept / total


@torch.inference_mode()
def run_one(pipe, policy: str, r: float, ctx: dict, questions: list[str], args) -> tuple[list[str], float]:
    """Answers (cleaned) and kept fraction for one context under one press."""
    model = pipe.model
    clear_masks(model)
    cache = DynamicCache()
    inputs = pipe.preprocess(ctx["context"], questions=questions, answer_prefix="",
                             max_context_length=int(1e10))
    ctx_ids, q_ids = inputs["context_ids"], inputs["questions_ids"]
    n_ctx = ctx_ids.shape[1]
    if policy == "full":
        out = pipe(ctx["context"], questions=questions, max_new_tokens=args.max_new_tokens, cache=cache)
        answers = out["answers"]
    elif policy == "snapkv_q1":
        press = make_press(policy, r, args)
        press.window_size = q_ids[0].shape[1]
        press.n_context = n_ctx
        with press(model):
            model.model(input_ids=torch.cat([ctx_ids, q_ids[0]], dim=1), past_key_values=cache)
        if cache.get_seq_length() != max(1, int(n_ctx * (1 - press.compression_ratio))) and r < 1:
            raise RuntimeError(f"snapkv_q1 kept {cache.get_seq_length()} of {n_ctx}")
        answers = []
        for q in q_ids:  # as KVPressTextGenerationPipeline._forward does
            lengths = [cache.get_seq_length(i) for i in range(len(cache))]
            answers.append(pipe.generate_answer(question_ids=q, cache=cache, context_length=n_ctx,
                                                max_new_tokens=args.max_new_tokens))
            pipe._remove_answer_from_cache(cache, lengths)
    else:
        press = make_press(policy, r, args)
        out = pipe(ctx["context"], questions=questions, press=press, max_new_tokens=args.max_new_tokens,
                   cache=cache)
        answers = out["answers"]
    frac = kept_fraction(model, cache, n_ctx)
    if policy == "kvzip" and args.kvzip_prefix_stats:
        # how much of the chat-template prefix (system prompt, never reconstructed) was evicted
        pre = args.prefix_len
        ev = sum(int(((m[2] >= 4) & (m[2] < pre)).sum()) for m in
                 (layer.self_attn.masked_key_indices for layer in model.model.layers) if m is not None)
        cfg = model.config
        args.kvzip_prefix_evicted.setdefault(r, []).append(ev / (cfg.num_hidden_layers * cfg.num_key_value_heads
                                                                 * max(1, pre - 4)))
    clear_masks(model)
    return [clean(a) for a in answers], frac


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="Hugging Face checkpoint directory")
    ap.add_argument("--contexts", type=Path, default=DEFAULT_CONTEXTS)
    ap.add_argument("--limit", type=int, default=0, help="use the first N contexts only (0 = all)")
    ap.add_argument("--ratios", default="0.1,0.2,0.3,0.5,0.7,1.0", help="retained fractions r")
    ap.add_argument("--policies", default=",".join(ALL_POLICIES))
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--sinks", type=int, default=4, help="n_sink of StreamingLLMPress and KVzipPress")
    ap.add_argument("--snapkv-window", type=int, default=64)
    ap.add_argument("--snapkv-kernel", type=int, default=5)
    ap.add_argument("--kvzip-chunk", type=int, default=2048)
    ap.add_argument("--kvzip-layerwise", action="store_true", help="KVzipPress(layerwise=True): same ratio per layer")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rerun-unity", action="store_true", help="run the presses at r = 1 too")
    ap.add_argument("--no-eager-check", action="store_true", help="skip the full_eager rows")
    ap.add_argument("--json", type=Path, default=Path(__file__).with_name("kvpress_multiquery.json"))
    ap.add_argument("--md", type=Path, default=Path(__file__).with_name("kvpress_multiquery.md"))
    ap.add_argument("--answers", type=Path, default=None, help="also write every answer as JSONL here")
    ap.add_argument("--completion", action="store_true",
                    help="completion-style prompt for base models: [BOS] + context, questions '\\n\\n' + q, "
                         "no chat template (automatic when the tokenizer has none)")
    args = ap.parse_args()

    t_start = time.time()
    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    logging.getLogger("kvpress").setLevel(logging.ERROR)  # KVzipPress warns about its cost on every use
    ratios = [float(x) for x in args.ratios.split(",")]
    policies = [p for p in args.policies.split(",") if p]
    if any(not 0 < r <= 1 for r in ratios):
        raise SystemExit("need 0 < r <= 1")
    rows_in = [json.loads(line) for line in args.contexts.read_text().splitlines() if line.strip()]
    if args.limit:
        rows_in = rows_in[: args.limit]

    tok = AutoTokenizer.from_pretrained(args.model)
    if tok.chat_template is None and not args.completion:
        log("the tokenizer has no chat template: completion-style prompt (--completion)")
        args.completion = True
    if args.completion and (bad := [p for p in policies if p not in COMPLETION_POLICIES]):
        raise SystemExit(f"--completion: policies {bad} not available (known: {', '.join(COMPLETION_POLICIES)}; "
                         "kvzip_sys has no chat-template prefix to keep)")
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa").eval()
    pipe = pipe_eager = model_e = None
    if not args.completion:
        pipe = pipeline("kv-press-text-generation", model=model, tokenizer=tok, device="cpu")
    if "h2o" in policies or not args.no_eager_check:
        model_e = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32,
                                                       attn_implementation="eager").eval()
        if not args.completion:
            pipe_eager = pipeline("kv-press-text-generation", model=model_e, tokenizer=tok, device="cpu")
    sliding = has_sliding_layers(model)
    glob = compressed_layers(model)

    # the chat-template prefix length (what KVzipPress calls prefix_length) for the diagnostics
    if args.completion:
        args.prefix_len = 0
    else:
        probe = pipe.preprocess("", questions=["q"], answer_prefix="", max_context_length=int(1e10))
        args.prefix_len = probe["context_ids"].shape[1]
    args.kvzip_prefix_stats = not args.completion
    args.kvzip_prefix_evicted = {}

    weights = sorted(args.model.glob("*.safetensors"))
    system = f"kvpress {md.version('kvpress')}"
    presses = {
        "full": "none",
        "full_eager": "none (eager attention)",
        "kvzip": f"KVzipPress(n_sink={args.sinks}, layerwise={args.kvzip_layerwise}, chunk_size={args.kvzip_chunk})",
        "kvzip_sys": f"KVzipPress(n_sink={args.sinks}, layerwise={args.kvzip_layerwise}, "
                     f"chunk_size={args.kvzip_chunk}) with the chat-template prefix never evicted",
        "snapkv": f"SnapKVPress(window_size={args.snapkv_window}, kernel_size={args.snapkv_kernel})",
        "snapkv_q1": f"SnapKVPress scored by question 1 (window = its tokens, kernel_size={args.snapkv_kernel}), reused",
        "h2o": "ObservedAttentionPress (eager attention)",
        "sinks": f"StreamingLLMPress(n_sink={args.sinks})",
    }
    if args.completion and sliding:
        for k in ("kvzip", "snapkv", "snapkv_q1", "h2o", "sinks"):
            presses[k] += f" on the {len(glob)} global layers only (sliding-window layers left whole)"
    run = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "kvpress": md.version("kvpress"), "transformers": md.version("transformers"),
        "torch": torch.__version__, "python": platform.python_version(),
        "model_dir": str(args.model), "model_sha256": sha256_file(weights[0]) if weights else None,
        "dtype": "float32", "threads": args.threads, "max_new_tokens": args.max_new_tokens,
        "question_prefix": QUESTION_PREFIX, "contexts": len(rows_in),
        "prompt": "chat template, context in the user turn; question = '\\n\\n' + q + "
                  "'<|im_end|>\\n<|im_start|>assistant\\n', tokenised separately",
    }
    if args.completion:
        kvzip_repeat = (tok.encode("\n\nRepeat the previous context exactly.", add_special_tokens=False)
                        + tok.encode("\n", add_special_tokens=False))
        run.update({
            "prompt": "completion style: context ids = [BOS] + encode(context); question ids = "
                      "encode('\\n\\n' + q), no suffix; both add_special_tokens=False, tokenised separately",
            "bos_id": tok.bos_token_id, "eos_ids": model.generation_config.eos_token_id,
            "kvzip_repeat_ids": kvzip_repeat + ["<context ids, BOS included>"],
            "compressed_layers": glob if sliding else "all",
        })
    log(f"{system}, transformers {run['transformers']}, torch {run['torch']}, {len(rows_in)} contexts "
        f"from {args.contexts}, policies {policies}, ratios {ratios}")

    # results[(policy, r)] = {"answers": {id: [..]}, "kept": [..], "tokens": int}
    results: dict[tuple[str, float], dict] = {}
    example = None
    for ci, ctx in enumerate(rows_in):
        questions = [QUESTION_PREFIX + q["q"] for q in ctx["questions"]]
        if args.completion:
            ctx_ids, q_ids = completion_ids(tok, ctx["context"], [q["q"] for q in ctx["questions"]])
            n_ctx = ctx_ids.shape[1]
            if example is None:
                example = {"id": ctx["id"], "context_ids_head": ctx_ids[0, :40].tolist(),
                           "context_ids_tail": ctx_ids[0, -8:].tolist(), "question_ids": q_ids[0][0].tolist(),
                           "context_tokens": n_ctx}
        elif example is None:
            inp = pipe.preprocess(ctx["context"], questions=questions, answer_prefix="", max_context_length=int(1e10))
            # the documented prompt, built by hand, must give the pipeline's ids exactly
            sys_user = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                        "<|im_end|>\n<|im_start|>user\n")
            suffix = "<|im_end|>\n<|im_start|>assistant\n"
            if "SmolLM" in (tok.chat_template or "") and (
                    tok.encode(sys_user + ctx["context"], add_special_tokens=False) != inp["context_ids"][0].tolist()
                    or tok.encode(questions[0] + suffix, add_special_tokens=False)
                    != inp["questions_ids"][0][0].tolist()):
                raise RuntimeError("the pipeline's prompt differs from the documented one")
            example = {"id": ctx["id"], "context_ids_head": inp["context_ids"][0, :40].tolist(),
                       "context_ids_tail": inp["context_ids"][0, -8:].tolist(),
                       "question_ids": inp["questions_ids"][0][0].tolist(),
                       "context_tokens": inp["context_ids"].shape[1]}
        if not args.completion:
            n_ctx = pipe.preprocess(ctx["context"], questions=questions[:1], answer_prefix="",
                                    max_context_length=int(1e10))["context_ids"].shape[1]
        combos = [("full", 1.0)]
        if not args.no_eager_check:
            combos.append(("full_eager", 1.0))
        combos += [(p, r) for p in policies for r in ratios]
        t_ctx = time.time()
        for policy, r in combos:
            t0 = time.time()
            reuse_full = r == 1.0 and policy not in ("full", "full_eager") and not args.rerun_unity
            if args.completion and not reuse_full:
                m = model_e if policy in ("full_eager", "h2o") else model
                answers, frac = run_one_completion(m, tok, "full" if policy == "full_eager" else policy, r,
                                                   ctx_ids, q_ids, args, check=ci == 0)
            elif policy == "full_eager":
                answers, frac = run_one(pipe_eager, "full", 1.0, ctx, questions, args)
            elif r == 1.0 and policy != "full" and not args.rerun_unity:
                answers, frac = results[("full", 1.0)]["answers"][ctx["id"]], 1.0
            else:
                p = pipe_eager if policy == "h2o" else pipe
                answers, frac = run_one(p, policy, r, ctx, questions, args)
            res = results.setdefault((policy, r), {"answers": {}, "kept": [], "tokens": 0})
            res["answers"][ctx["id"]] = answers
            res["kept"].append(frac)
            res["tokens"] += n_ctx
            full = results[("full", 1.0)]["answers"][ctx["id"]]
            agree = sum(a == b for a, b in zip(answers, full))
            head = sum(first_word(a) == first_word(b) for a, b in zip(answers, full))
            acc = sum(correct(q.get("answer", ""), a) for q, a in zip(ctx["questions"], answers))
            log(f"ctx {ci + 1}/{len(rows_in)} {ctx['id']} C={n_ctx} {policy:10s} r={r:<4} kept={frac:.3f} "
                f"agree={agree}/{len(answers)} acc={acc}/{len(answers)} "
                + (f"first_word={head}/{len(answers)} " if args.completion else "") + f"({time.time() - t0:.1f}s)")
        log(f"ctx {ci + 1}/{len(rows_in)} done in {time.time() - t_ctx:.0f}s; "
            f"elapsed {(time.time() - t_start) / 60:.1f} min")

    wall = time.time() - t_start
    run["wall_seconds"] = round(wall, 1)
    gold = {c["id"]: c["questions"] for c in rows_in}
    full_answers = results[("full", 1.0)]["answers"]
    rows, table = [], []
    for (policy, r), res in results.items():
        n_q = agree = n_gold = acc = head = 0
        for cid, answers in res["answers"].items():
            for q, a, f in zip(gold[cid], answers, full_answers[cid]):
                n_q += 1
                agree += a == f
                head += first_word(a) == first_word(f)
                if "answer" in q:
                    n_gold += 1
                    acc += correct(q["answer"], a)
        kept = sum(res["kept"]) / len(res["kept"])
        vals = {"agreement": agree / n_q, "accuracy": acc / n_gold if n_gold else None, "kept_fraction": kept,
                "agreement_first_word": head / n_q if args.completion else None}
        for metric, value in vals.items():
            if value is None:
                continue
            row = {"policy": policy, "budget": r, "metric": metric, "value": value, "tokens": res["tokens"],
                   "questions": n_gold if metric == "accuracy" else n_q, "system": system,
                   "dataset": args.contexts.name, "run": {**run, "press": presses[policy]}}
            if policy == "full" and metric == "agreement":
                row["answers"] = res["answers"]
            rows.append(row)
        table.append((policy, r, kept, vals["agreement"], vals["accuracy"], agree, acc, n_q, n_gold,
                      vals["agreement_first_word"], head))

    if args.answers:
        with open(args.answers, "w") as f:
            for (policy, r), res in results.items():
                for cid, answers in res["answers"].items():
                    for qi, a in enumerate(answers):
                        f.write(json.dumps({"policy": policy, "budget": r, "id": cid, "q": qi, "answer": a,
                                            "full": full_answers[cid][qi]}) + "\n")

    n_tok = results[("full", 1.0)]["tokens"]
    lines = [
        f"# kvpress multi-query: one compressed context, many questions — {system}",
        "",
        f"Run {run['date']}, {wall / 60:.1f} min wall. transformers {run['transformers']}, torch {run['torch']}, "
        f"Python {run['python']}, {args.threads} threads, fp32, CPU.",
        f"Model `{args.model.name}` (model.safetensors sha256 `{run['model_sha256']}`).",
        f"Dataset `{args.contexts.name}`: {len(rows_in)} contexts, {sum(len(c['questions']) for c in rows_in)} "
        f"questions, {n_tok} context tokens in all ("
        + ("BOS included" if args.completion else "chat-template prefix included")
        + f"; {n_tok / len(rows_in):.0f} per context on average). "
        f"Greedy, at most {args.max_new_tokens} new tokens.",
        ("Prompt: completion style (no chat template): context = [BOS] + context ids, each question = ids of "
         "'\\n\\n' + q, no suffix (see bench/peers/README.md)." if args.completion else
         "Prompt: the chat template, context in the user turn (see bench/peers/README.md)."),
        "Policies: " + "; ".join(f"{k} = {presses[k]}" for k in ["full"] + policies) + ".",
        "Budget r = retained fraction (compression_ratio = 1 − r); kept = mean kept fraction of the context's KV "
        "pairs over " + (f"the {len(glob)} global layers × KV heads (the sliding-window layers keep the whole "
                         "context; their attention reaches its last "
                         f"{model.config.sliding_window} positions)" if sliding and args.completion
                         else "layers × KV heads")
        + ". agreement = answers identical to the full cache's; accuracy = gold answer "
        "contained in the output (normalised)"
        + ("; first word = the answers' first words (trailing punctuation stripped) identical to the full "
           "cache's" if args.completion else "")
        + ". Presses at r = 1 reuse the full-cache answers"
        + (" (rerun here)." if args.rerun_unity else "."),
        "",
        "| policy | budget r | kept | agreement | accuracy |" + (" first word |" if args.completion else ""),
        "|---|---:|---:|---:|---:|" + ("---:|" if args.completion else ""),
    ]
    for policy, r, kept, agr, accv, agree, acc, n_q, n_gold, headv, head in table:
        acc_s = f"{accv:.3f} ({acc}/{n_gold})" if accv is not None else "—"
        lines.append(f"| {policy} | {r:g} | {kept:.3f} | {agr:.3f} ({agree}/{n_q}) | {acc_s} |"
                     + (f" {headv:.3f} ({head}/{n_q}) |" if args.completion else ""))
    # compact curves: agreement per policy across r
    rs = sorted({r for (p, r) in results if p not in ("full", "full_eager")})
    def curve(title, col, none_as_zero=False):
        """A table of column `col` of `table`: rows the policies, columns the budgets."""
        out = ["", title, "", "| policy | " + " | ".join(f"{r:g}" for r in rs) + " |",
               "|---|" + "---:|" * len(rs)]
        for p in policies:
            cells = []
            for r in rs:
                if (p, r) not in results:
                    cells.append("—")
                    continue
                v = next(t[col] for t in table if t[0] == p and t[1] == r)
                cells.append(f"{(v or 0) if none_as_zero else v:.3f}")
            out.append(f"| {p} | " + " | ".join(cells) + " |")
        return out

    if rs:
        lines += curve("Agreement with the full cache (rows: policy; columns: r):", 3)
        lines += curve("Accuracy (full cache: "
                       f"{next(t[4] for t in table if t[0] == 'full') or 0:.3f}):", 4, none_as_zero=True)
        if args.completion:
            lines += curve("First-word agreement with the full cache:", 9)
    if args.kvzip_prefix_evicted:
        lines += ["", "KVzipPress and the chat-template prefix (system prompt + `<|im_start|>user\\n`, "
                  f"{args.prefix_len} tokens): kvpress scores it 0 (only the context after it is reconstructed) "
                  "and protects only the first n_sink = 4 tokens, so it is evicted first. Fraction of the prefix "
                  "pairs after the sinks that were evicted: " + ", ".join(
                      f"r={r:g}: {sum(v) / len(v):.2f}" for r, v in sorted(args.kvzip_prefix_evicted.items())) + "."]
    lines += ["", f"Example token ids (context `{example['id']}`, {example['context_tokens']} context tokens): "
              f"context starts `{example['context_ids_head']}` … ends `{example['context_ids_tail']}`; "
              f"question 1 = `{example['question_ids']}`."
              + (f" KVzipPress's reconstruction input = `{run['kvzip_repeat_ids'][:-1]}` + the context ids "
                 "(BOS included)." if args.completion else ""),
              "", "Generated by `bench/peers/kvpress_multiquery.py`; raw rows in the JSON next to this file.", ""]
    text_md = "\n".join(lines)
    print(text_md)
    args.md.write_text(text_md)
    args.json.write_text("[\n" + ",\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n]\n")
    log(f"wrote {args.json} and {args.md} ({wall:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
