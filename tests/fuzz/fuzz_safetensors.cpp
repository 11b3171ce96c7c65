// libFuzzer target for the safetensors reader: any byte string must parse or raise offgen::Error,
// and a successful parse must hand out only tensors that lie inside the input and tile its data
// section exactly. Seeds: tests/fuzz/corpus/safetensors (make_safetensors_corpus.py writes them).
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/core/error.h"
#include "runtime/loaders/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace offgen;
  volatile uint64_t sink = 0;
  try {
    const SafetensorsFile f = SafetensorsFile::parse({data, size}, "fuzz.safetensors");
    if (f.data_offset() < 10 || f.data_offset() > size) __builtin_trap();  // 8 + at least "{}"
    uint64_t covered = 0;
    for (const SafetensorsTensor& t : f.tensors()) {
      // The reader promises every tensor lies inside the input; check before touching it.
      if (t.bytes < 0 || t.data != data + t.file_offset ||
          static_cast<uint64_t>(t.file_offset) < f.data_offset() ||
          static_cast<uint64_t>(t.file_offset) + static_cast<uint64_t>(t.bytes) > size)
        __builtin_trap();
      if (t.bytes > 0) sink = sink + t.data[0] + t.data[t.bytes - 1];
      const int64_t elem = safetensors_dtype_size(t.dtype_name);
      if (elem <= 0 || t.n_elems() * elem != t.bytes) __builtin_trap();
      const bool is_float =
          t.dtype_name == "F32" || t.dtype_name == "F16" || t.dtype_name == "BF16";
      if (t.dtype.has_value() != is_float) __builtin_trap();
      for (int64_t d : t.shape)
        if (d < 0) __builtin_trap();
      if (f.find(t.name) != &t) __builtin_trap();
      covered += static_cast<uint64_t>(t.bytes);
    }
    // Fully indexed and non-overlapping: the tensor sizes add up to the data section exactly.
    if (covered != size - f.data_offset()) __builtin_trap();
    for (const auto& kv : f.metadata()) sink = sink + kv.first.size() + kv.second.size();
  } catch (const Error& e) {
    // Malformed input: the expected outcome for most inputs. Every error is an input error.
    if (e.category() != ErrorCategory::kInput) __builtin_trap();
  }
  (void)sink;
  return 0;
}
