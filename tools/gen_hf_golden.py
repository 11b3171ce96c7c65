#!/usr/bin/env python3
"""Generate tiny random Hugging Face checkpoints and golden logits for offgen's HF loader.

Purpose: parity data for the loader of Hugging Face checkpoint directories (config.json +
*.safetensors + tokenizer.json). Every file in a model directory is written by Hugging Face's
own writers (model.save_pretrained(dir, safe_serialization=True) and tokenizer.save_pretrained),
and every golden number is computed by transformers from the model loaded back FROM THAT
DIRECTORY (AutoModelForCausalLM.from_pretrained(dir, dtype=torch.float32,
attn_implementation="eager")), on CPU, in fp32, 2 threads. For the bf16/fp16 checkpoints that
load upcasts the stored values exactly, which is what the C++ side does.

Writes into tests/data/hf_models/ (or --out):
  llama/     LlamaForCausalLM   d=32, 4 heads / 2 KV heads, 2 layers, ff=64, rope_theta 1e4,
             untied lm_head, fp32, saved SHARDED (model-0000i-of-0000n.safetensors +
             model.safetensors.index.json)
  mistral/   MistralForCausalLM same shape, 3 layers, rope_theta 1e6, sliding_window null, bf16
  qwen2/     Qwen2ForCausalLM   same shape as llama (q/k/v with bias), tied lm_head, fp16,
             tokenizer with a ChatML chat_template (saved by transformers as chat_template.jinja)
  opt/       OPTForCausalLM     pre-norm (do_layer_norm_before true), d=32, 4 heads, ffn 64,
             2 layers, max_position_embeddings 64, word_embed_proj_dim 32, tied, fp32
  opt350/    OPTForCausalLM     post-norm like facebook/opt-350m (do_layer_norm_before false, so
             no decoder.final_layer_norm), d=32, word_embed_proj_dim 16 (project_in/project_out
             exist), tied, fp32
  gemma3/    Gemma3ForCausalLM  d=32, 4 heads / 2 KV heads of head_dim 16 (q width 64 != d), 6
             layers in Gemma 3's pattern (5 sliding-window layers, window 4, RoPE base 1e4; then
             a global one, base 1e6 with linear scaling x8 as the 4B+ models have), QK-norm,
             sandwich norms, GeGLU (gelu_pytorch_tanh), query_pre_attn_scalar = head_dim, tied,
             bf16
  gemma2/    Gemma2ForCausalLM  d=32, 4 heads / 2 KV heads of head_dim 8, 3 layers alternating
             sliding (window 4) and global, query_pre_attn_scalar 24 (scale != head_dim^-0.5),
             attention soft-capping 2.0 and final logit soft-capping 8.0 (small enough to bite on
             these random weights), tied, fp32
  qwen3/     Qwen3ForCausalLM   d=32, 4 heads / 2 KV heads of head_dim 16, 2 layers, QK-norm, no
             QKV bias, rope_theta 1e6, tied, bf16
  llama3/    LlamaForCausalLM   Llama 3.1 RoPE scaling (rope_type llama3, factor 8, low/high
             frequency factors 1/4, original_max_position_embeddings 64; with head_dim 16 and base
             1e4 the 8 frequencies fall in all three bands), d=32, 4 heads / 2 KV heads, 2
             layers, untied, fp32
  phi3/      Phi3ForCausalLM    Llama's shape (d=32, 4 heads / 2 KV heads, 2 layers, ff=64) with
             Phi-3's fused qkv_proj and gate_up_proj, rope_theta 1e4, untied, fp32
  phi3_longrope/ Phi3ForCausalLM like the 128K models: LongRoPE (rope_type longrope, 6 short and
             6 long factors, original_max_position_embeddings 4 against max_position_embeddings
             128, so every prompt exceeds the original context and transformers rotates by the
             LONG factors, with the attention factor sqrt(1 + ln 32 / ln 4) on cos and sin) and
             partial_rotary_factor 0.75 (12 of head_dim 16 rotate, as Phi-4-mini), d=64, 4 heads
             / 2 KV heads, ff=96, 2 layers, untied, fp32
  mixtral/   MixtralForCausalLM d=32, 4 heads / 2 KV heads, 2 layers, 4 experts of 24 (top 2,
             renormalised), rope_theta 1e6, untied, fp32
  qwen2_moe/ Qwen2MoeForCausalLM 6 experts of 40 (top 2, not renormalised) and a shared expert
             of 48 behind its sigmoid gate, QKV bias, untied, fp16
  qwen3_moe/ Qwen3MoeForCausalLM head_dim 16, QK-norm, 8 experts of 24 (top 3, renormalised),
             tied, bf16 (expert widths differ from d so that a transposed expert cannot pass)
  golden.json  per model: arch, dtype, seed, vocab_size, min margin, and 3 cases each with the
             text, token ids (tokenizer(text, add_special_tokens=True) from the saved dir), fp32
             logits at EVERY prompt position, a 16-token greedy continuation (no EOS stop),
             per-step top-1/top-2 margins and their minimum.

Weights: HF initialises norm gains to 1 and biases to 0, which would hide loader bugs, so after
construction EVERY parameter is overwritten (sorted by name, from a torch.Generator seeded per
model): linear weights N(0, 0.15), token embeddings N(0, 0.5) (N(0, 0.3) when tied to the
lm_head), OPT positional table N(0, 0.3),
norm gains 1 + N(0, 0.1) (Gemma, whose RMSNorm scales by 1 + w: N(0, 0.1)), norm biases and linear
biases N(0, 0.1). If any greedy step of a
model has a top-1/top-2 margin below MIN_MARGIN (computed from the reloaded fp32 model, i.e.
after bf16/fp16 rounding), the model is rebuilt with the next seed; the seed used is recorded.

Tokenizer: ONE byte-level BPE trained with the `tokenizers` library on the "text" fields of
tests/data/tokenizer_corpus.jsonl (line 1 is a {"meta": ...} record and is skipped): no
normalizer, pre_tokenizer ByteLevel(add_prefix_space=False, use_regex=True), decoder ByteLevel,
BpeTrainer(vocab_size=320, min_frequency=2, initial_alphabet=ByteLevel.alphabet(), special tokens
"<|endoftext|>" (id 0), "<|im_start|>" (id 1), "<|im_end|>" (id 2)); 61 merges. The corpus is
a tokenizer edge-case corpus, so the merges are odd ("aa", "ha", CJK, emoji, digit runs) and
English splits almost into bytes; the prompts are chosen to hit several merges. It is wrapped in
PreTrainedTokenizerFast with bos = eos = "<|endoftext|>" and every model uses
vocab_size = len(tokenizer) = 320.
  llama, mistral, qwen2: post_processor ByteLevel(trim_offsets=False) (ids unchanged: no BOS is
    added, as for Qwen2 / SmolLM2).
  qwen2 additionally: chat_template = CHATML_TEMPLATE below (transformers 5 saves it as
    chat_template.jinja, not inside tokenizer_config.json).
  opt, opt350: post_processor TemplateProcessing(single="<|endoftext|>:0 $A:0",
    pair="<|endoftext|>:0 $A:0 <|endoftext|>:1 $B:1", special_tokens=[("<|endoftext|>", 0)])
    set on the tokenizers object before wrapping, so tokenizer.json prepends id 0 -- the analogue
    of OPT's tokenizer prepending "</s>" (id 2 there). tokenizer_config.json has NO add_bos_token
    key: transformers 5 never writes it (and ignores it when tokenizer.json exists), so the
    tokenizer.json post_processor is the only source of truth for the BOS.
  tokenizer_config.json (all dirs): tokenizer_class "TokenizersBackend", bos/eos "<|endoftext|>",
    extra_special_tokens [<|im_start|>, <|im_end|>]. Golden ids are produced with
    PreTrainedTokenizerFast.from_pretrained(dir) and checked against tokenizers.Tokenizer.from_file(
    tokenizer.json); NOT AutoTokenizer, which in transformers 5 builds Qwen2Tokenizer for qwen2 and
    re-derives the pre-tokenizer (splitting digits) instead of using tokenizer.json.

GGUF files (gguf/ under the output directory): gemma3, qwen3, llama3, qwen2 and the three MoE
models (experts stacked in ffn_*_exps) are also converted by
llama.cpp's own converter (convert_hf_to_gguf.py from the llama-cpp-python sdist that
tools/peers fetches; --llama-cpp DIR, default ~/.cache/offgen/peers/llama_cpp_python-*/vendor/
llama.cpp), --outtype the checkpoint's precision (bf16, or f32), run in a subprocess with that
tree's gguf-py. Its checks of the
tokenizer's pre-tokenizer hash do not know this test tokenizer, so get_vocab_base_pre is patched
to answer "default" (the GPT-2 regex, which ByteLevel(use_regex=True) is); everything else is the
converter's: tensor names, the 1 + w Gemma norms, Q/K permutation (Llama) or not (Gemma, Qwen2, Qwen3),
rope_freqs.weight (Llama 3.1), metadata. The same golden logits apply to them. gemma2 is not
converted: GGUF has no query_pre_attn_scalar (llama.cpp assumes head_dim outside the 27B size).
phi3 and phi3_longrope are written with the gguf package (write_phi3_gguf below, no llama.cpp
tree needed) the way llama.cpp's converter lays Phi-3 out: attn_qkv and ffn_up (gate rows then
up rows) fused as in the checkpoint, rotate-half order kept, phi3.rope.dimension_count the
rotated dims, and for LongRoPE rope_factors_short/long.weight, rope.scaling.original_context_length
and rope.scaling.attn_factor; the tokenizer as tokenizer.ggml.* (gpt2, pre "default").

Usage:
  /opt/offgen-dev/bin/python tools/gen_hf_golden.py [--out DIR] [--only NAME,...] [--llama-cpp DIR]
--only regenerates the named models (and their GGUF files) and keeps the other entries of an
existing golden.json as they are.
Output is deterministic: running it twice gives identical bytes.

qwen2_moe's GGUF is also quantised to Q8_0 by llama.cpp's llama-quantize (gguf/qwen2_moe_q8_0.gguf,
recorded as "gguf_q8_0"; --llama-quantize, default the peers build under ~/.cache/offgen/peers).

Needs: torch, transformers (5.x; tested with 5.24), tokenizers, safetensors, numpy, gguf (phi3).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import inspect
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")  # BPE training: keep it single-threaded

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    AutoTokenizer,
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    OPTConfig,
    OPTForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

VOCAB_SIZE = 320
N_GREEDY = 16
MIN_MARGIN = 5e-3  # reseed below this (C++ compares in fp32 with a different summation order)
MAX_SHARD_SIZE = "100KB"  # llama only: forces >= 2 shards
EOT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"

# Jinja string literals use the escape '\n' (as Qwen2.5's template does), not raw newlines.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Shared prompts (5..20 tokens with this tokenizer; checked below). Case 2 has digits and punctuation.
# The BPE is trained on an edge-case corpus, so few English merges exist; case 2 exercises the
# multi-byte merges (CJK, emoji) and a trailing "\n\n" token.
TEXTS = [
    "Hello, the other day",
    "Pay $2963 (07-41)?",
    "haha \u4e2d\u4e2d \U0001F600!! ok\n\n",
]
# qwen2 replaces case 0 with a ChatML prompt rendered by its chat template.
QWEN2_CHAT = [{"role": "user", "content": "Hi!"}]

# name, class, dtype, base seed, config kwargs
COMMON_LLAMA = dict(
    hidden_size=32,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=2,
    intermediate_size=64,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
    hidden_act="silu",
)
MODELS = [
    (
        "llama",
        LlamaConfig,
        LlamaForCausalLM,
        torch.float32,
        1000,
        dict(COMMON_LLAMA, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False),
    ),
    (
        "mistral",
        MistralConfig,
        MistralForCausalLM,
        torch.bfloat16,
        2000,
        dict(
            COMMON_LLAMA,
            num_hidden_layers=3,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            sliding_window=None,
            tie_word_embeddings=False,
        ),
    ),
    (
        "qwen2",
        Qwen2Config,
        Qwen2ForCausalLM,
        torch.float16,
        3000,
        dict(
            COMMON_LLAMA,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            use_sliding_window=False,
            sliding_window=None,
            tie_word_embeddings=True,
        ),
    ),
    (
        "opt",
        OPTConfig,
        OPTForCausalLM,
        torch.float32,
        4000,
        dict(
            hidden_size=32,
            num_attention_heads=4,
            ffn_dim=64,
            num_hidden_layers=2,
            max_position_embeddings=64,
            word_embed_proj_dim=32,
            do_layer_norm_before=True,
            activation_function="relu",
            dropout=0.0,
            attention_dropout=0.0,
            tie_word_embeddings=True,
        ),
    ),
    (
        "opt350",
        OPTConfig,
        OPTForCausalLM,
        torch.float32,
        5000,
        dict(
            hidden_size=32,
            num_attention_heads=4,
            ffn_dim=64,
            num_hidden_layers=2,
            max_position_embeddings=64,
            word_embed_proj_dim=16,
            do_layer_norm_before=False,
            activation_function="relu",
            dropout=0.0,
            attention_dropout=0.0,
            tie_word_embeddings=True,
        ),
    ),
    (
        "gemma3",
        Gemma3TextConfig,
        Gemma3ForCausalLM,
        torch.bfloat16,
        6000,
        dict(
            hidden_size=32,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            intermediate_size=64,
            num_hidden_layers=6,
            max_position_embeddings=128,
            rms_norm_eps=1e-6,
            hidden_activation="gelu_pytorch_tanh",
            query_pre_attn_scalar=16,
            sliding_window=4,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
            },
            attention_dropout=0.0,
            tie_word_embeddings=True,
        ),
    ),
    (
        "gemma2",
        Gemma2Config,
        Gemma2ForCausalLM,
        torch.float32,
        7000,
        dict(
            hidden_size=32,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            intermediate_size=64,
            num_hidden_layers=3,
            max_position_embeddings=128,
            rms_norm_eps=1e-6,
            hidden_activation="gelu_pytorch_tanh",
            query_pre_attn_scalar=24,
            sliding_window=4,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=8.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            attention_dropout=0.0,
            tie_word_embeddings=True,
        ),
    ),
    (
        "qwen3",
        Qwen3Config,
        Qwen3ForCausalLM,
        torch.bfloat16,
        8000,
        dict(
            COMMON_LLAMA,
            head_dim=16,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            attention_bias=False,
            use_sliding_window=False,
            tie_word_embeddings=True,
        ),
    ),
    (
        "llama3",
        LlamaConfig,
        LlamaForCausalLM,
        torch.float32,
        9000,
        dict(
            COMMON_LLAMA,
            head_dim=16,
            max_position_embeddings=512,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 10000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
            tie_word_embeddings=False,
        ),
    ),
]
PHI3_LONGROPE = {
    "rope_type": "longrope",
    "rope_theta": 10000.0,
    "short_factor": [1.0, 1.25, 1.5, 2.0, 3.0, 4.0],
    "long_factor": [1.5, 2.5, 5.0, 9.0, 17.0, 33.0],
}
MODELS += [
    (
        "phi3",
        Phi3Config,
        Phi3ForCausalLM,
        torch.float32,
        10000,
        dict(
            COMMON_LLAMA,
            original_max_position_embeddings=128,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            sliding_window=None,
            tie_word_embeddings=False,
        ),
    ),
    (
        "phi3_longrope",
        Phi3Config,
        Phi3ForCausalLM,
        torch.float32,
        11000,
        dict(
            COMMON_LLAMA,
            hidden_size=64,
            intermediate_size=96,
            original_max_position_embeddings=4,
            partial_rotary_factor=0.75,
            rope_parameters=PHI3_LONGROPE,
            sliding_window=None,
            tie_word_embeddings=False,
        ),
    ),
]
# Mixtures of experts (every layer sparse; expert widths differ from d so that a transposed expert
# matrix cannot pass): Mixtral (top-2 of 4, renormalised), Qwen2-MoE (top-2 of 6, not
# renormalised, plus a shared expert of width 48 behind its sigmoid gate) and Qwen3-MoE (top-3 of
# 8, renormalised, QK-norm).
MODELS += [
    (
        "mixtral",
        MixtralConfig,
        MixtralForCausalLM,
        torch.float32,
        12000,
        dict(
            COMMON_LLAMA,
            intermediate_size=24,
            num_local_experts=4,
            num_experts_per_tok=2,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            sliding_window=None,
            tie_word_embeddings=False,
        ),
    ),
    (
        "qwen2_moe",
        Qwen2MoeConfig,
        Qwen2MoeForCausalLM,
        torch.float16,
        13000,
        dict(
            COMMON_LLAMA,
            num_experts=6,
            num_experts_per_tok=2,
            moe_intermediate_size=40,
            shared_expert_intermediate_size=48,
            norm_topk_prob=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            use_sliding_window=False,
            tie_word_embeddings=False,
        ),
    ),
    (
        "qwen3_moe",
        Qwen3MoeConfig,
        Qwen3MoeForCausalLM,
        torch.bfloat16,
        14000,
        dict(
            COMMON_LLAMA,
            head_dim=16,
            num_experts=8,
            num_experts_per_tok=3,
            moe_intermediate_size=24,
            norm_topk_prob=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            attention_bias=False,
            use_sliding_window=False,
            tie_word_embeddings=True,
        ),
    ),
]
# Written as GGUF by write_phi3_gguf (the gguf package), fp32.
PHI3_GGUF = ("phi3", "phi3_longrope")
# Converted to GGUF by llama.cpp's converter as well (see the module docstring), with the
# checkpoint's own precision for matrices (bf16 -> bf16 is exact; the converter upcasts to fp32
# before adding Gemma's 1 to the norms, which it writes in fp32).
GGUF_MODELS = {
    "gemma3": "bf16",
    "qwen3": "bf16",
    "llama3": "f32",
    "qwen2": "f16",
    "mixtral": "f32",
    "qwen2_moe": "f16",
    "qwen3_moe": "bf16",
}
# Also quantised to Q8_0 by llama.cpp's llama-quantize (the peers build: ~/.cache/offgen/peers/
# build-*/bin, or --llama-quantize): a block-format file as llama.cpp writes it, whose shared-expert
# gate ffn_gate_inp_shexp is a vector ({n_embd}) where the converter wrote a one-row matrix.
Q8_GGUF = ("qwen2_moe",)
# Gemma's RMSNorm multiplies by (1 + w): random gains are drawn around 0 instead of 1.
NORM_MEAN = {"gemma3": 0.0, "gemma2": 0.0}
DTYPE_NAME = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _pkg_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def read_corpus(path: Path) -> list[str]:
    texts = []
    # split on "\n" only: some texts hold U+2028 etc., which str.splitlines() would break on.
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        rec = json.loads(line)
        if "text" in rec:
            texts.append(rec["text"])
    return texts


def train_tokenizer(corpus: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        show_progress=False,
        special_tokens=[EOT, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    assert tok.token_to_id(EOT) == 0 and tok.token_to_id(IM_START) == 1 and tok.token_to_id(IM_END) == 2
    return tok


def wrap_tokenizer(raw: Tokenizer, opt_bos: bool, chat_template: str | None) -> PreTrainedTokenizerFast:
    if opt_bos:
        raw = Tokenizer.from_str(raw.to_str())
        raw.post_processor = processors.TemplateProcessing(
            single=f"{EOT}:0 $A:0", pair=f"{EOT}:0 $A:0 {EOT}:1 $B:1", special_tokens=[(EOT, 0)]
        )
    # No add_bos_token kwarg: transformers 5 never writes it to tokenizer_config.json and ignores it
    # when tokenizer.json exists; the post_processor is what adds (or does not add) the BOS.
    kw = dict(tokenizer_object=raw, bos_token=EOT, eos_token=EOT, additional_special_tokens=[IM_START, IM_END])
    if chat_template is not None:
        kw["chat_template"] = chat_template
    tok = PreTrainedTokenizerFast(**kw)
    return tok


@torch.no_grad()
def randomize(model: torch.nn.Module, seed: int, tied: bool, norm_mean: float = 1.0) -> None:
    g = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())  # tied parameters appear once
    for name in sorted(params):
        p = params[name]
        leaf = name.rsplit(".", 1)[-1]
        is_norm = "norm" in name  # input_layernorm, post_attention_layernorm, norm, self_attn_layer_norm, ...
        if name.endswith("embed_positions.weight"):
            std, mean = 0.3, 0.0
        elif name.endswith("embed_tokens.weight"):
            std, mean = (0.3 if tied else 0.5), 0.0  # tied: it is the lm_head too; keep logits O(1..10)
        elif is_norm and leaf == "weight":
            std, mean = 0.1, norm_mean
        elif leaf == "bias":
            std, mean = 0.1, 0.0
        elif leaf == "weight" and p.dim() == 2:
            std, mean = 0.15, 0.0
        elif leaf in ("gate_up_proj", "down_proj") and p.dim() == 3:  # experts, stacked
            std, mean = 0.15, 0.0
        else:
            raise RuntimeError(f"unexpected parameter {name} {tuple(p.shape)}")
        v = torch.randn(p.shape, generator=g, dtype=torch.float32) * std + mean
        p.copy_(v)


def f32list(t: torch.Tensor) -> list[float]:
    a = np.asarray(t.detach().cpu().float().numpy(), dtype=np.float32).reshape(-1)
    return [float(x) for x in a]


def _cache_kw(model) -> str:
    # transformers 5.x renamed past_key_values -> cache (the old name still works, with a warning).
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _get_cache(out):
    c = getattr(out, "cache", None)
    return c if c is not None else out.past_key_values


@torch.no_grad()
def run_case(model, ids: list[int]) -> dict:
    x = torch.tensor([ids], dtype=torch.long)
    prompt_logits = model(input_ids=x, use_cache=False).logits[0].float()  # [T, V]

    # Greedy with full recomputation (no cache), no EOS stop.
    seq = list(ids)
    greedy, margins = [], []
    for _ in range(N_GREEDY):
        last = model(input_ids=torch.tensor([seq], dtype=torch.long), use_cache=False).logits[0, -1].float()
        v, i = torch.topk(last, 2)
        greedy.append(int(i[0]))
        margins.append(float(v[0] - v[1]))
        seq.append(int(i[0]))

    # Cross-check with the KV cache: same argmax at every step, logits close.
    out = model(input_ids=x, use_cache=True)
    past = _get_cache(out)
    cached = [out.logits[0, -1].float()]
    for t in greedy[:-1]:
        out = model(input_ids=torch.tensor([[t]], dtype=torch.long), use_cache=True, **{_cache_kw(model): past})
        past = _get_cache(out)
        cached.append(out.logits[0, -1].float())
    cached_ids = [int(c.argmax()) for c in cached]
    assert cached_ids == greedy, (cached_ids, greedy)
    full = model(input_ids=torch.tensor([seq[:-1]], dtype=torch.long), use_cache=False).logits[0, len(ids) - 1 :]
    cache_diff = float((torch.stack(cached) - full.float()).abs().max())
    assert cache_diff < 1e-3, cache_diff
    return {
        "logits": prompt_logits,
        "greedy": greedy,
        "margins": margins,
        "cache_diff": cache_diff,
        "prompt_margin": float(min(torch.topk(prompt_logits, 2, dim=-1).values.diff(dim=-1).abs().reshape(-1))),
    }


def build_and_save(name, cfg_cls, model_cls, dtype, seed, cfg_kw, raw_tok, out_dir: Path):
    mdir = out_dir / name
    if mdir.exists():
        shutil.rmtree(mdir)
    mdir.mkdir(parents=True)
    torch.manual_seed(seed)
    cfg = cfg_cls(
        vocab_size=VOCAB_SIZE,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=None,
        **cfg_kw,
    )
    model = model_cls(cfg).eval()
    randomize(model, seed, tied=bool(cfg_kw["tie_word_embeddings"]), norm_mean=NORM_MEAN.get(name, 1.0))
    model = model.to(dtype)
    save_kw = {"safe_serialization": True}
    if name == "llama":
        save_kw["max_shard_size"] = MAX_SHARD_SIZE
    model.save_pretrained(mdir, **save_kw)

    is_opt = name.startswith("opt")
    tok = wrap_tokenizer(raw_tok, opt_bos=is_opt, chat_template=CHATML_TEMPLATE if name == "qwen2" else None)
    assert len(tok) == VOCAB_SIZE, len(tok)
    tok.save_pretrained(mdir)
    return mdir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    repo = Path(__file__).resolve().parent.parent
    ap.add_argument("--out", default=str(repo / "tests" / "data" / "hf_models"), help="output directory")
    ap.add_argument("--corpus", default=str(repo / "tests" / "data" / "tokenizer_corpus.jsonl"))
    ap.add_argument("--only", default="", help="comma-separated model names to regenerate (default: all)")
    ap.add_argument("--llama-cpp", default="", help="llama.cpp source tree (its convert_hf_to_gguf.py)")
    ap.add_argument("--llama-quantize", default="", help="llama.cpp's llama-quantize binary")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [m[0] for m in MODELS]
    only = [n for n in args.only.split(",") if n]
    for n in only:
        if n not in names:
            raise SystemExit(f"--only: unknown model {n!r} (models: {', '.join(names)})")
    llama_cpp = find_llama_cpp(args.llama_cpp) if any(n in GGUF_MODELS for n in (only or names)) else None

    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()

    raw_tok = train_tokenizer(read_corpus(Path(args.corpus)))

    doc: dict = {
        "generator": "tools/gen_hf_golden.py",
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": _pkg_version("tokenizers"),
            "safetensors": _pkg_version("safetensors"),
            "numpy": np.__version__,
            "python": sys.version.split()[0],
        },
        "reference": "transformers, model reloaded from the saved dir with dtype=float32, eager attention, CPU",
        "tokenizer_load": "PreTrainedTokenizerFast.from_pretrained(dir) == tokenizers.Tokenizer.from_file(tokenizer.json)",
        "n_greedy": N_GREEDY,
        "min_margin_threshold": MIN_MARGIN,
        # Diagnostic only: the class AutoTokenizer picks for each dir, and whether its ids agree.
        "auto_tokenizer_class": {},
        "models": [],
    }
    old_models: dict = {}
    if only:  # keep the other models' entries (and files) as they are
        old = json.loads((out_dir / "golden.json").read_text(encoding="utf-8"))
        old_models = {m["name"]: m for m in old["models"]}
        doc["auto_tokenizer_class"] = old["auto_tokenizer_class"]
        doc["versions"] = old["versions"]
        for n in names:
            if n not in only and n not in old_models:
                raise SystemExit(f"--only: {n} is in neither --only nor the existing golden.json")
    if llama_cpp is not None:
        doc["gguf_converter"] = (
            f"convert_hf_to_gguf.py of llama.cpp {llama_cpp_version(llama_cpp)}, --outtype: "
            + ", ".join(f"{k} {v}" for k, v in GGUF_MODELS.items())
        )
    elif only and "gguf_converter" in old:
        doc["gguf_converter"] = old["gguf_converter"]

    for name, cfg_cls, model_cls, dtype, base_seed, cfg_kw in MODELS:
        if only and name not in only:
            doc["models"].append(old_models[name])
            continue
        for attempt in range(50):
            seed = base_seed + attempt
            mdir = build_and_save(name, cfg_cls, model_cls, dtype, seed, cfg_kw, raw_tok, out_dir)
            # NOT AutoTokenizer: in transformers 5 it picks a model-specific class for qwen2 / opt
            # (Qwen2Tokenizer / GPT2Tokenizer) that rebuilds the pre-tokenizer from its own defaults
            # instead of using tokenizer.json. The golden ids must be what tokenizer.json says.
            tok = PreTrainedTokenizerFast.from_pretrained(mdir)
            raw_saved = Tokenizer.from_file(str(mdir / "tokenizer.json"))
            model = AutoModelForCausalLM.from_pretrained(mdir, dtype=torch.float32, attn_implementation="eager").eval()
            assert model.config.vocab_size == len(tok) == VOCAB_SIZE
            texts = list(TEXTS)
            if name == "qwen2":
                texts[0] = tok.apply_chat_template(QWEN2_CHAT, tokenize=False, add_generation_prompt=True)
            cases = []
            for text in texts:
                ids = tok(text, add_special_tokens=True).input_ids
                assert ids == raw_saved.encode(text, add_special_tokens=True).ids, (name, text)
                assert 5 <= len(ids) <= 20, (name, text, len(ids))
                if name.startswith("opt"):
                    assert ids[0] == 0 and ids[1:] == tok(text, add_special_tokens=False).input_ids
                else:
                    assert ids == tok(text, add_special_tokens=False).input_ids
                assert tok.decode(ids, skip_special_tokens=name.startswith("opt")) == text
                r = run_case(model, ids)
                cases.append((text, ids, r))
            min_margin = min(min(r["margins"]) for _, _, r in cases)
            if min_margin >= MIN_MARGIN:
                break
            print(f"{name}: seed {seed} min margin {min_margin:.2e} < {MIN_MARGIN}, reseeding")
        else:
            raise RuntimeError(f"{name}: no seed with margins >= {MIN_MARGIN}")

        # Diagnostic only: what AutoTokenizer makes of the directory.
        auto = AutoTokenizer.from_pretrained(mdir)
        agree = all(auto(t, add_special_tokens=True).input_ids == i for t, i, _ in cases)
        note = f"{type(auto).__name__}, ids {'agree' if agree else 'DIFFER'}"
        doc["auto_tokenizer_class"][name] = note
        print(f"{name}: AutoTokenizer -> {note}")

        mentry = {
            "name": name,
            "arch": model.config.architectures[0],
            "dtype": DTYPE_NAME[dtype],
            "seed": seed,
            "vocab_size": VOCAB_SIZE,
            "min_margin": min_margin,
            "cases": [],
        }
        if name in GGUF_MODELS:
            gguf_path = convert_to_gguf(llama_cpp, mdir, out_dir / "gguf" / f"{name}.gguf", GGUF_MODELS[name])
            mentry["gguf"] = str(gguf_path.relative_to(out_dir))
            if name in Q8_GGUF:
                q8 = quantize_q8_0(find_llama_quantize(args.llama_quantize), gguf_path)
                mentry["gguf_q8_0"] = str(q8.relative_to(out_dir))
        if name in PHI3_GGUF:
            gguf_path = write_phi3_gguf(mdir, out_dir / "gguf" / f"{name}.gguf")
            mentry["gguf"] = str(gguf_path.relative_to(out_dir))
        for text, ids, r in cases:
            entry = {"text": text}
            if name == "qwen2" and text == texts[0]:
                entry["chat_messages"] = QWEN2_CHAT
            entry.update(
                {
                    "ids": ids,
                    "logits": [f32list(row) for row in r["logits"]],
                    "greedy": r["greedy"],
                    "greedy_margins": r["margins"],
                    "greedy_min_margin": min(r["margins"]),
                }
            )
            mentry["cases"].append(entry)
            lg = r["logits"]
            print(
                f"{name} seed {seed}: {len(ids)} ids, |logits| max {float(lg.abs().max()):.2f} std "
                f"{float(lg.std()):.2f}, greedy min margin {min(r['margins']):.4f}, prompt-pos min margin "
                f"{r['prompt_margin']:.4f}, cache diff {r['cache_diff']:.1e}; greedy {tok.decode(r['greedy'])!r}"
            )
        doc["models"].append(mentry)

    write_json(doc, out_dir / "golden.json")
    print(f"wrote {out_dir}")
    return 0


def find_llama_cpp(given: str) -> Path:
    if given:
        cands = [Path(given)]
    else:
        cands = sorted(Path.home().glob(".cache/offgen/peers/llama_cpp_python-*/vendor/llama.cpp"))
    for c in cands:
        if (c / "convert_hf_to_gguf.py").is_file():
            return c.resolve()
    raise SystemExit("llama.cpp's convert_hf_to_gguf.py not found: pass --llama-cpp DIR (tools/peers fetches it)")


def llama_cpp_version(tree: Path) -> str:
    # The sdist's directory name carries the llama-cpp-python version.
    for part in tree.parts:
        if part.startswith("llama_cpp_python-"):
            return "from " + part
    return str(tree)


# Runs the converter in a subprocess with its own gguf-py; only the pre-tokenizer hash check is
# replaced (it does not know this test tokenizer; see the module docstring).
CONVERT_SNIPPET = """
import sys
tree, src, dst = sys.argv[1:4]
sys.path.insert(0, tree)
sys.argv = ["convert_hf_to_gguf.py", src, "--outfile", dst, "--outtype", sys.argv[4]]
import convert_hf_to_gguf
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "default"
convert_hf_to_gguf.main()
"""


def convert_to_gguf(tree: Path, mdir: Path, dst: Path, outtype: str) -> Path:
    import subprocess

    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        dst.unlink()
    env = dict(os.environ)
    env.pop("NO_LOCAL_GGUF", None)  # the tree's gguf-py, not the venv's gguf
    r = subprocess.run(
        [sys.executable, "-c", CONVERT_SNIPPET, str(tree), str(mdir), str(dst), outtype],
        env=env, capture_output=True, text=True,
    )
    if r.returncode != 0 or not dst.is_file():
        raise RuntimeError(f"converting {mdir} failed:\n{r.stdout}\n{r.stderr}")
    print(f"{mdir.name}: {dst} ({dst.stat().st_size} bytes)")
    return dst


def find_llama_quantize(given: str) -> Path:
    cands = [Path(given)] if given else sorted(Path.home().glob(".cache/offgen/peers/build-*/bin/llama-quantize"))
    for c in cands:
        if c.is_file():
            return c.resolve()
    raise SystemExit("llama-quantize not found: pass --llama-quantize PATH (tools/peers builds it)")


def quantize_q8_0(tool: Path, src: Path) -> Path:
    import subprocess

    dst = src.with_name(src.stem + "_q8_0.gguf")
    if dst.exists():
        dst.unlink()
    r = subprocess.run([str(tool), str(src), str(dst), "Q8_0"], capture_output=True, text=True)
    if r.returncode != 0 or not dst.is_file():
        raise RuntimeError(f"llama-quantize {src} failed:\n{r.stdout}\n{r.stderr}")
    print(f"{src.name}: {dst} ({dst.stat().st_size} bytes)")
    return dst


def write_phi3_gguf(mdir: Path, dst: Path) -> Path:
    """The Phi-3 checkpoint in mdir as a GGUF file laid out as llama.cpp's converter does."""
    import math

    import gguf
    from safetensors.numpy import load_file

    cfg = json.loads((mdir / "config.json").read_text(encoding="utf-8"))
    tj = json.loads((mdir / "tokenizer.json").read_text(encoding="utf-8"))
    w = {}
    for f in sorted(mdir.glob("*.safetensors")):
        w.update(load_file(str(f)))
    n_embd, n_head = cfg["hidden_size"], cfg["num_attention_heads"]
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    partial = cfg.get("partial_rotary_factor", rope.get("partial_rotary_factor", 1.0))
    rope_dims = int(partial * n_embd) // n_head
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        dst.unlink()
    g = gguf.GGUFWriter(str(dst), "phi3")
    g.add_name(mdir.name)
    g.add_context_length(cfg["max_position_embeddings"])
    g.add_embedding_length(n_embd)
    g.add_feed_forward_length(cfg["intermediate_size"])
    g.add_block_count(cfg["num_hidden_layers"])
    g.add_head_count(n_head)
    g.add_head_count_kv(cfg["num_key_value_heads"])
    g.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    g.add_rope_dimension_count(rope_dims)
    g.add_rope_freq_base(rope.get("rope_theta", 10000.0))
    g.add_rope_scaling_orig_ctx_len(cfg["original_max_position_embeddings"])
    g.add_file_type(gguf.LlamaFileType.ALL_F32)
    if rope.get("rope_type", rope.get("type")) in ("longrope", "su"):
        orig = cfg["original_max_position_embeddings"]
        scale = cfg["max_position_embeddings"] / orig
        g.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1 else 1.0)
        g.add_tensor("rope_factors_long.weight", np.asarray(rope["long_factor"], dtype=np.float32))
        g.add_tensor("rope_factors_short.weight", np.asarray(rope["short_factor"], dtype=np.float32))
    # Tokenizer: the byte-level BPE of tokenizer.json (ids in order; added tokens are control).
    vocab = dict(tj["model"]["vocab"])
    special = {}
    for t in tj["added_tokens"]:
        vocab[t["content"]] = t["id"]
        if t.get("special"):
            special[t["id"]] = True
    tokens = [None] * len(vocab)
    for s, i in vocab.items():
        tokens[i] = s
    assert all(t is not None for t in tokens)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    g.add_tokenizer_model("gpt2")
    g.add_tokenizer_pre("default")
    g.add_token_list(tokens)
    g.add_token_types([gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for i in range(len(tokens))])
    g.add_token_merges(merges)
    g.add_bos_token_id(cfg["bos_token_id"])
    g.add_eos_token_id(cfg["eos_token_id"])
    g.add_add_bos_token(False)
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    layer = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.qkv_proj.weight": "attn_qkv.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    for k in sorted(w):
        if k in names:
            out = names[k]
        else:
            parts = k.split(".")
            assert parts[:2] == ["model", "layers"], k
            out = f"blk.{parts[2]}." + layer[".".join(parts[3:])]
        g.add_tensor(out, np.ascontiguousarray(w[k].astype(np.float32)))
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()
    print(f"{mdir.name}: {dst} ({dst.stat().st_size} bytes)")
    return dst


def write_json(doc: dict, path: Path) -> None:
    """Indented JSON, but every list of numbers on one line (keeps the file small and diffable)."""

    def enc(v, ind: int) -> str:
        pad = " " * ind
        if isinstance(v, dict):
            if not v:
                return "{}"
            items = [f'{pad} {json.dumps(k)}: {enc(x, ind + 1)}' for k, x in v.items()]
            return "{\n" + ",\n".join(items) + "\n" + pad + "}"
        if isinstance(v, list):
            if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
                return "[" + ", ".join(json.dumps(x) for x in v) + "]"
            items = [f"{pad} {enc(x, ind + 1)}" for x in v]
            return "[\n" + ",\n".join(items) + "\n" + pad + "]"
        return json.dumps(v, ensure_ascii=False)

    text = enc(doc, 0) + "\n"
    json.loads(text)  # sanity
    path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
