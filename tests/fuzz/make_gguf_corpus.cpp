// Writes the fuzz seed corpus for fuzz_gguf (small valid and deliberately broken GGUF files) with
// the test GGUF writer. Run once: make_gguf_corpus tests/fuzz/corpus/gguf
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "tests/runtime/gguf_writer.h"

namespace {

using offgen::test::GgufLayout;
using offgen::test::GgufWriter;
namespace T = offgen::test;
using Bytes = std::vector<uint8_t>;

Bytes ramp(size_t n, uint8_t start) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(start + 3 * i);
  return b;
}

GgufWriter model_like() {
  GgufWriter w;
  w.add_string("general.architecture", "llama")
      .add_u32("llama.block_count", 1)
      .add_u32("llama.context_length", 64)
      .add_f32("llama.rope.freq_base", 10000.0f)
      .add_bool("tokenizer.ggml.add_bos_token", true)
      .add_string_array("tokenizer.ggml.tokens", {"<s>", "</s>", "a", "b"})
      .add_i32_array("tokenizer.ggml.token_type", {3, 3, 1, 1})
      .add_f32_array("tokenizer.ggml.scores", {0.0f, 0.0f, -1.0f, -2.0f});
  w.add_tensor("token_embd.weight", {32, 4}, T::kGgmlQ8_0, ramp(4 * 34, 1))
      .add_tensor("output_norm.weight", {32}, T::kGgmlF32, ramp(128, 2))
      .add_tensor("blk.0.attn_q.weight", {32, 2}, T::kGgmlQ4_1, ramp(40, 3))
      .add_tensor("blk.0.attn_k.weight", {32, 1}, T::kGgmlQ4_0, ramp(18, 4))
      .add_tensor("blk.0.attn_v.weight", {8, 2}, T::kGgmlF16, ramp(32, 5))
      .add_tensor("blk.0.attn_output.weight", {4, 2, 1}, T::kGgmlBF16, ramp(16, 6));
  return w;
}

void write(const std::string& dir, const std::string& name, const Bytes& b) {
  std::ofstream f(dir + "/" + name, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  std::printf("%-28s %5zu bytes\n", name.c_str(), b.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  GgufLayout L;
  const Bytes model = model_like().build(&L);

  // Valid files.
  write(dir, "valid_model.gguf", model);
  write(dir, "valid_v2.gguf", model_like().version(2).build());
  {
    GgufWriter w = model_like();
    w.add_u32("general.alignment", 64);
    write(dir, "valid_align64.gguf", w.build());
  }
  {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    write(dir, "valid_metadata_only.gguf", w.build());
  }
  {
    GgufWriter w;
    w.add_tensor("t", {3}, T::kGgmlF32, ramp(12, 9));
    write(dir, "valid_tensor_only.gguf", w.build());
  }
  {  // one tensor of each GGML block format (two rows of two blocks, bytes ramped)
    GgufWriter w;
    struct Q {
      const char* name;
      uint32_t type;
      uint64_t elems, bytes;
    };
    for (Q q : {Q{"q5_0", T::kGgmlQ5_0, 32, 22}, Q{"q5_1", T::kGgmlQ5_1, 32, 24},
                Q{"q2_k", T::kGgmlQ2_K, 256, 84}, Q{"q3_k", T::kGgmlQ3_K, 256, 110},
                Q{"q4_k", T::kGgmlQ4_K, 256, 144}, Q{"q5_k", T::kGgmlQ5_K, 256, 176},
                Q{"q6_k", T::kGgmlQ6_K, 256, 210}, Q{"q8_k", T::kGgmlQ8_K, 256, 292},
                Q{"iq4_nl", T::kGgmlIQ4_NL, 32, 18}, Q{"iq4_xs", T::kGgmlIQ4_XS, 256, 136}})
      w.add_tensor(std::string("t_") + q.name, {2 * q.elems, 2}, q.type,
                   ramp(4 * q.bytes, static_cast<uint8_t>(q.type)));
    write(dir, "valid_quant_types.gguf", w.build());
  }
  {  // every scalar type once, plus a nested array
    GgufWriter w;
    const uint32_t types[] = {T::kGgufU8,  T::kGgufI8,  T::kGgufU16, T::kGgufI16,
                              T::kGgufU64, T::kGgufI64, T::kGgufF64};
    const size_t sizes[] = {1, 1, 2, 2, 8, 8, 8};
    for (int i = 0; i < 7; ++i)
      w.add_raw("k" + std::to_string(types[i]), types[i], ramp(sizes[i], 0x80));
    Bytes nested = GgufWriter::pod(uint32_t{T::kGgufArray});
    for (const Bytes& part : {GgufWriter::pod(uint64_t{1}), GgufWriter::pod(uint32_t{T::kGgufU16}),
                              GgufWriter::pod(uint64_t{2}), Bytes{1, 0, 2, 0}})
      nested.insert(nested.end(), part.begin(), part.end());
    w.add_raw("nested", T::kGgufArray, nested);
    write(dir, "valid_all_types.gguf", w.build());
  }

  // Broken files.
  {
    Bytes b = model;
    b[0] = 'X';
    write(dir, "bad_magic.gguf", b);
  }
  write(dir, "truncated_header.gguf", Bytes(model.begin(), model.begin() + L.kvs[2].value_at + 2));
  write(dir, "truncated_data.gguf", Bytes(model.begin(), model.end() - 5));
  {
    Bytes b = model;
    GgufWriter::patch(b, L.kvs[5].value_at + 4, uint64_t{1} << 60);
    write(dir, "huge_array_count.gguf", b);
  }
  {
    Bytes b = model;
    GgufWriter::patch(b, L.tensors[1].offset_at, uint64_t{L.tensors[1].offset + 4});
    write(dir, "misaligned_offset.gguf", b);
  }
  {
    Bytes b = model;
    GgufWriter::patch(b, L.tensors[2].type_at, uint32_t{T::kGgmlIQ2_XXS});
    write(dir, "unknown_tensor_type.gguf", b);
  }
  {
    GgufWriter w = model_like();
    w.add_u32("llama.block_count", 2);
    write(dir, "duplicate_key.gguf", w.build());
  }
  return 0;
}
