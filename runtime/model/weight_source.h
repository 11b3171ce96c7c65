// WeightSource: what a loader hands a model — config plus named tensors (GGUF naming:
// token_embd.weight, blk.N.attn_q.weight, ...) as typed read-only views. Loaders implement it.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/model/config.h"

namespace offgen {

struct TensorRef {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;  // dims[0] innermost (row length), GGML order
  const void* data = nullptr;
  std::shared_ptr<const void> keepalive;  // owns `data` when the source generated it on demand
  int64_t n_elems() const {
    int64_t n = 1;
    for (auto d : dims) n *= d;
    return n;
  }
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const ModelConfig& config() const = 0;
  // Returns the tensor or throws offgen::Error(kInput) naming it and the source file. The data
  // stays valid while the source lives, or while the TensorRef lives when it has a keepalive.
  // Thread-safe.
  virtual TensorRef tensor(const std::string& name) const = 0;
  virtual bool has_tensor(const std::string& name) const = 0;
  // A tensor's element format without touching or generating its data; throws as tensor().
  virtual DType tensor_dtype(const std::string& name) const { return tensor(name).dtype; }
  // A tensor's dims (GGML order) without touching or generating its data; throws as tensor().
  virtual std::vector<int64_t> tensor_dims(const std::string& name) const {
    return tensor(name).dims;
  }
  virtual std::string describe() const = 0;  // e.g. the file path
  // Drops the pages of the files the tensors are mapped from out of this process's resident set
  // (MappedFile::release_pages), for after they have been copied: tensor data stays readable
  // (read from the file again). A no-op for sources that do not map files. Thread-safe.
  virtual void release_pages() const {}
  // Copies the first `bytes` of t's data (t from tensor()) into dst. Sources that map files read
  // them (MappedFile::read_into: faster than touching the mapping from a cold page cache, for the
  // tens of GB a disk-placed model copies out at load). Thread-safe.
  virtual void read_data(const TensorRef& t, size_t bytes, void* dst) const {
    std::memcpy(dst, t.data, bytes);
  }
};

}  // namespace offgen
