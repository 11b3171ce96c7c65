// CudaBackend: the Backend on one GPU. Device memory is cudaMalloc'd, host memory pinned and
// mapped (the device reads and writes it: KV statistics, cpu_cache_compute tables); ops run on
// one non-blocking compute stream; small host inputs (ids, positions, descriptors) go through a
// pinned upload ring; GEMMs through cuBLAS. Only *_cuda.* files include this header.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/backend/cuda/cuda_kernels_cuda.h"

namespace offgen::cuda {

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(int device);
  ~CudaEvent() override;
  void synchronize() override;
  cudaEvent_t get() const { return event_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

class CudaStream final : public Stream {
 public:
  explicit CudaStream(int device);
  ~CudaStream() override;
  void copy(void* dst, const void* src, int64_t bytes) override;
  void record(Event& e) override;
  void wait(Event& e) override;
  void synchronize() override;
  cudaStream_t get() const { return stream_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

// Host inputs for kernels, staged in pinned memory and copied on the compute stream; a slot is
// reused only after the stream has drained past it (the ring synchronises when it wraps).
class UploadRing {
 public:
  UploadRing() = default;
  ~UploadRing();
  UploadRing(const UploadRing&) = delete;
  UploadRing& operator=(const UploadRing&) = delete;
  // The device address of a copy of `bytes` of host memory, valid for the work enqueued on
  // `stream` after this call until the ring wraps. 256-byte aligned.
  void* put(const void* src, size_t bytes, cudaStream_t stream);
  template <class T>
  const T* put(const std::vector<T>& v, cudaStream_t stream) {
    return static_cast<const T*>(put(v.data(), v.size() * sizeof(T), stream));
  }
  // Makes room for uploads of `total` bytes (the sum of rounded() sizes) so that the next puts
  // neither wrap nor grow: addresses handed out by them stay valid together.
  void reserve(size_t total, cudaStream_t stream);
  static size_t rounded(size_t bytes);

 private:
  void make_room(size_t need, cudaStream_t stream);
  void release();
  char* host_ = nullptr;
  char* device_ = nullptr;
  size_t capacity_ = 0, offset_ = 0;
};

// A cuBLAS handle on `stream` (fp32 GEMMs without TF32). Throws Error(kInternal) (and frees a
// handle it created).
cublasHandle_t cublas_create(cudaStream_t stream);
// Whether this build's kernels run on `device` (cudaSuccess) or why not.
cudaError_t probe_kernels(int device);

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, int threads, WeightMode weights);
  ~CudaBackend() override;
  BackendKind kind() const override { return BackendKind::kCuda; }
  ThreadContext& threads() override { return cpu_->threads(); }

  DeviceInfo device_info() const override;
  Buffer alloc(int64_t bytes, Tier tier) override;
  void copy(void* dst, const void* src, int64_t bytes) override;
  void copy_rows(void* dst, int64_t dst_stride, const void* src, int64_t src_stride, int64_t rows,
                 int64_t row_bytes) override;
  void gather_rows(float* dst, const float* src, std::span<const int64_t> rows,
                   int64_t width) override;
  void copy_kv_heads(void* dst, int64_t dst_stride, const void* src, int64_t src_stride,
                     int64_t head_bytes, std::span<const HeadCopy> copies) override;
  void kv_encode_rows(const float* src, int64_t src_stride, int64_t n, DType dtype,
                      int64_t n_kv_heads, int64_t head_dim, void* dst) override;
  void kv_encode_heads(const float* src, int64_t src_stride, DType dtype, int64_t n_kv_heads,
                       int64_t head_dim, void* dst, std::span<const HeadCopy> copies) override;
  Stream& compute_stream() override { return *compute_; }
  std::unique_ptr<Stream> make_stream() override;
  std::unique_ptr<Event> make_event() override;

  WeightMode weight_mode() const override { return weights_; }
  DType matmul_storage(DType src, int64_t cols) const override;
  DType matmul_storage_as(DType wanted, int64_t cols) const override;
  int64_t weight_bytes(DType storage, int64_t rows, int64_t cols) const override;
  WeightView prepare_weight_into(DType src_type, const void* src, int64_t rows, int64_t cols,
                                 DType storage, void* dst) override;
  Weight prepare_table(DType src_type, const void* src, int64_t rows, int64_t cols) override;
  void matmul(const float* x, int64_t m, const WeightView& w, float* y, int64_t ldy = 0) override;
  void rms_norm(const float* x, const float* gamma, int64_t m, int64_t d, float eps,
                float* y) override;
  void head_rms_norm(float* x, const float* gamma, int64_t n_tokens, int64_t n_heads,
                     int64_t head_dim, float eps, int64_t token_stride = 0) override;
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            std::span<const float> inv_freq, RopeStyle style, int64_t token_stride = 0,
            float mscale = 1.0f) override;
  void swiglu(const float* gate, const float* up, int64_t m, int64_t n, int64_t stride,
              float* out) override;
  void geglu(const float* gate, const float* up, int64_t m, int64_t n, int64_t stride,
             float* out) override;
  void layer_norm(const float* x, const float* gamma, const float* beta, int64_t m, int64_t d,
                  float eps, float* y) override;
  void relu(float* x, int64_t n) override;
  void gelu(float* x, int64_t n) override;
  void add(float* y, const float* x, int64_t n) override;
  void zero(float* x, int64_t n) override;
  void add_rows_scaled(float* y, const float* x, std::span<const int64_t> rows,
                       std::span<const float> scales, int64_t width) override;
  void scale(float* x, float s, int64_t n) override;
  void softcap(float* x, float cap, int64_t n) override;
  void add_bias(float* y, const float* bias, int64_t m, int64_t n, int64_t stride = 0) override;
  void embedding(const WeightView& table, const int32_t* ids, int64_t n, float* out) override;
  bool can_gather_weight_rows(DType storage) const override;
  void gather_weight_rows(const WeightView& w, const int32_t* ids, int64_t n, float* out) override;
  void attention(const float* q, const AttentionArgs& args, float* out) override;
  void argmax_rows(const float* logits, int64_t n, int64_t vocab, int32_t* out) override;

 private:
  // The compute stream, with this backend's GPU current on the calling thread.
  cudaStream_t stream() const {
    cudaSetDevice(device_);
    return compute_->get();
  }
  // Device scratch grown on demand (contents not kept); only the compute stream uses it.
  void* scratch(Buffer& b, int64_t bytes, Tier tier = Tier::kDevice);
  const int32_t* device_positions(const int32_t* host, int64_t n);
  const float* device_inv_freq(std::span<const float> inv_freq);
  void attention_on_device(const float* q, const AttentionArgs& a, std::span<const size_t> seqs,
                           float* out);
  void stage_host_queries(const float* q, const AttentionArgs& a, std::span<const size_t> seqs);
  void attention_on_host(const AttentionArgs& a, std::span<const size_t> seqs, float* out);

  int device_;
  WeightMode weights_;
  std::unique_ptr<CudaStream> compute_;
  struct CublasDeleter {
    void operator()(cublasContext* h) const;
  };
  std::unique_ptr<cublasContext, CublasDeleter> cublas_;
  std::unique_ptr<Backend> cpu_;  // host threads; attention over host-resident KV
  UploadRing ring_;
  Buffer gemm_x_, gemm_w_, ml_, argmax_dev_, argmax_host_, host_q_, host_out_;
  // The last uploaded positions (the model passes the same ones to every unit of a forward).
  Buffer positions_;
  std::vector<int32_t> positions_host_;
  // Device copies of the inverse-frequency tables seen so far (a model has one or two: global and
  // sliding-window layers), by content.
  struct InvFreq {
    std::vector<float> host;
    Buffer device;
  };
  std::vector<InvFreq> inv_freq_;
  int64_t max_head_dim_ = 0;  // what the device's shared memory allows (attention_init)
  std::unique_ptr<CudaEvent> host_ready_;  // cpu_cache_compute: queries staged / outputs sent
};

}  // namespace offgen::cuda
