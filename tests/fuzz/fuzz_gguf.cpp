// libFuzzer target for the GGUF reader: any byte string must parse or raise offgen::Error, and a
// successful parse must only hand out tensor data and metadata inside the input.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/error.h"
#include "runtime/loaders/gguf.h"

namespace {

template <class F>
void ignore_error(F&& f) {
  try {
    f();
  } catch (const offgen::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace offgen;
  volatile uint64_t sink = 0;
  try {
    const GgufFile f = GgufFile::parse({data, size}, "fuzz.gguf");
    std::vector<float> row;
    for (const GgufTensor& t : f.tensors()) {
      // The reader promises every tensor lies inside the input; check before touching it.
      if (t.bytes <= 0 || t.data < data || t.data + t.bytes > data + size) __builtin_trap();
      sink = sink + t.data[0] + t.data[t.bytes - 1];
      if (f.find_tensor(t.name) != &t || t.rows() * t.dims[0] != t.n_elems) __builtin_trap();
      // Dequantise the first row when it is small: exercises the block decoders on fuzzed bytes.
      if (t.dims[0] <= 4096) {
        row.resize(static_cast<size_t>(t.dims[0]));
        dequantize_row(t.dtype, t.data, row.data(), t.dims[0]);
        for (float x : row) sink = sink + (x == x);
      }
    }
    for (const auto& kv : f.metadata()) {
      const std::string& key = kv.first;  // not a structured binding: clang 14 cannot capture those
      const GgufValue& v = kv.second;
      sink = sink + key.size() + v.str.size() + v.count + (v.num != 0);
      for (const auto& s : v.strs) sink = sink + s.size() + (s.empty() ? 0 : s.front());
      for (double x : v.nums) sink = sink + (x != 0);
      ignore_error([&] { sink = sink + f.get_int(key); });
      ignore_error([&] { sink = sink + f.get_int_opt(key).value_or(0); });
      ignore_error([&] { sink = sink + (f.get_float(key) != 0); });
      ignore_error([&] { sink = sink + f.get_string(key).size(); });
      ignore_error([&] { sink = sink + f.get_bool_or(key, false); });
    }
  } catch (const Error&) {
    // Malformed input: the expected outcome for most inputs.
  }
  (void)sink;
  return 0;
}
