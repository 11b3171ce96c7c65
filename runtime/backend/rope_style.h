// RopeStyle: which element pairs rotary embedding rotates (shared by backends and model configs).
#pragma once

namespace offgen {

// kInterleaved rotates adjacent pairs (x0,x1),(x2,x3)... (GGUF Llama weights, whose Q/K rows the
// converter permuted); kHalf rotates (x_i, x_{i+d/2}) (Hugging Face rotate_half).
enum class RopeStyle { kInterleaved, kHalf };

}  // namespace offgen
