// CUDA memory, streams, events, the upload ring and the copy ops of CudaBackend.
#include <algorithm>
#include <cstring>

#include "runtime/backend/cuda/cuda_backend_cuda.h"
#include "runtime/backend/cuda/cuda_common_cuda.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"

namespace offgen::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  cudaGetLastError();  // a non-sticky error is reported once, here (sticky ones stay)
  const auto cat = err == cudaErrorMemoryAllocation ? ErrorCategory::kResource
                                                    : ErrorCategory::kInternal;
  throw Error(cat, fmt::format("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(err),
                               cudaGetErrorString(err), call, file, line));
}

namespace {

// Buffer release functions: never throw (a failure here is logged).
void free_device(void* p, void* device) {
  cudaSetDevice(static_cast<int>(reinterpret_cast<intptr_t>(device)));
  const cudaError_t e = cudaFree(p);
  if (e != cudaSuccess) log_warn("cudaFree failed: {}", cudaGetErrorString(e));
}

void free_host(void* p, void*) {
  const cudaError_t e = cudaFreeHost(p);
  if (e != cudaSuccess) log_warn("cudaFreeHost failed: {}", cudaGetErrorString(e));
}

}  // namespace

CudaEvent::CudaEvent(int device) : device_(device) {
  OFFGEN_CUDA_CHECK(cudaSetDevice(device_));
  OFFGEN_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

void CudaEvent::synchronize() { OFFGEN_CUDA_CHECK(cudaEventSynchronize(event_)); }

CudaStream::CudaStream(int device) : device_(device) {
  OFFGEN_CUDA_CHECK(cudaSetDevice(device_));
  OFFGEN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaStream::~CudaStream() {
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

void CudaStream::copy(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  OFFGEN_CUDA_CHECK(cudaSetDevice(device_));  // the calling (lane) thread's current device
  OFFGEN_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, stream_));
}

void CudaStream::record(Event& e) {
  OFFGEN_CUDA_CHECK(cudaSetDevice(device_));
  OFFGEN_CUDA_CHECK(cudaEventRecord(static_cast<CudaEvent&>(e).get(), stream_));
}

void CudaStream::wait(Event& e) {
  OFFGEN_CUDA_CHECK(cudaSetDevice(device_));
  OFFGEN_CUDA_CHECK(cudaStreamWaitEvent(stream_, static_cast<CudaEvent&>(e).get(), 0));
}

void CudaStream::synchronize() { OFFGEN_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

UploadRing::~UploadRing() { release(); }

void UploadRing::release() {
  if (host_) cudaFreeHost(host_);
  if (device_) cudaFree(device_);
  host_ = device_ = nullptr;
  capacity_ = offset_ = 0;
}

size_t UploadRing::rounded(size_t bytes) { return (std::max<size_t>(bytes, 1) + 255) / 256 * 256; }

void UploadRing::reserve(size_t total, cudaStream_t stream) {
  if (offset_ + total > capacity_) make_room(total, stream);
}

void UploadRing::make_room(size_t need, cudaStream_t stream) {
  // Everything enqueued so far (which may read the ring) finishes before it is reused.
  OFFGEN_CUDA_CHECK(cudaStreamSynchronize(stream));
  offset_ = 0;
  if (need > capacity_) {
    release();
    const size_t cap = std::max<size_t>(size_t{8} << 20, 2 * need);
    OFFGEN_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_), cap, cudaHostAllocDefault));
    OFFGEN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_), cap));
    capacity_ = cap;
  }
}

void* UploadRing::put(const void* src, size_t bytes, cudaStream_t stream) {
  const size_t need = rounded(bytes);
  if (offset_ + need > capacity_) make_room(need, stream);
  char* h = host_ + offset_;
  char* d = device_ + offset_;
  offset_ += need;
  if (bytes > 0) {
    std::memcpy(h, src, bytes);
    OFFGEN_CUDA_CHECK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream));
  }
  return d;
}

DeviceInfo CudaBackend::device_info() const {
  OFFGEN_CUDA_CHECK(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  OFFGEN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  size_t free_b = 0, total_b = 0;
  OFFGEN_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return DeviceInfo{prop.name, static_cast<int64_t>(total_b), static_cast<int64_t>(free_b)};
}

Buffer CudaBackend::alloc(int64_t bytes, Tier tier) {
  OFFGEN_CHECK(bytes >= 0, kInternal, "negative allocation {}", bytes);
  if (bytes == 0) return Buffer();
  OFFGEN_CUDA_CHECK(cudaSetDevice(device_));
  void* p = nullptr;
  if (tier == Tier::kDevice) {
    const cudaError_t e = cudaMalloc(&p, static_cast<size_t>(bytes));
    if (e != cudaSuccess) cudaGetLastError();  // not sticky: later launches must not report it
    OFFGEN_CHECK(e == cudaSuccess, kResource, "GPU out of memory allocating {} bytes: {}", bytes,
                 cudaGetErrorString(e));
    Buffer b = Buffer::adopt(p, bytes, tier, free_device,
                             reinterpret_cast<void*>(static_cast<intptr_t>(device_)), false);
    OFFGEN_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), stream()));
    OFFGEN_CUDA_CHECK(cudaStreamSynchronize(stream()));  // other streams may use it next
    return b;
  }
  // Pinned, mapped into the device's address space (unified addressing: the same pointer).
  const size_t rounded = (static_cast<size_t>(bytes) + 4095) / 4096 * 4096;
  const cudaError_t e = cudaHostAlloc(&p, rounded, cudaHostAllocPortable | cudaHostAllocMapped);
  if (e != cudaSuccess) cudaGetLastError();
  OFFGEN_CHECK(e == cudaSuccess, kResource, "out of pinned host memory allocating {} bytes: {}",
               bytes, cudaGetErrorString(e));
  std::memset(p, 0, rounded);
  return Buffer::adopt(p, bytes, tier, free_host, nullptr, true);
}

void CudaBackend::copy(void* dst, const void* src, int64_t bytes) { compute_->copy(dst, src, bytes); }

void CudaBackend::copy_rows(void* dst, int64_t dst_stride, const void* src, int64_t src_stride,
                            int64_t rows, int64_t row_bytes) {
  if (rows <= 0 || row_bytes <= 0) return;
  OFFGEN_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_stride), src,
                                      static_cast<size_t>(src_stride), static_cast<size_t>(row_bytes),
                                      static_cast<size_t>(rows), cudaMemcpyDefault, stream()));
}

void CudaBackend::gather_rows(float* dst, const float* src, std::span<const int64_t> rows,
                              int64_t width) {
  if (rows.empty()) return;
  const auto* idx = static_cast<const int64_t*>(ring_.put(rows.data(), rows.size_bytes(), stream()));
  cuda::gather_rows(dst, src, idx, static_cast<int64_t>(rows.size()), width, stream());
}

void CudaBackend::zero(float* x, int64_t n) {
  if (n == 0) return;
  OFFGEN_CUDA_CHECK(cudaMemsetAsync(x, 0, static_cast<size_t>(n) * 4, stream()));
}

void CudaBackend::add_rows_scaled(float* y, const float* x, std::span<const int64_t> rows,
                                  std::span<const float> scales, int64_t width) {
  if (rows.empty()) return;
  const auto* idx = static_cast<const int64_t*>(ring_.put(rows.data(), rows.size_bytes(), stream()));
  const auto* s = static_cast<const float*>(ring_.put(scales.data(), scales.size_bytes(), stream()));
  cuda::add_rows_scaled(y, x, idx, s, static_cast<int64_t>(rows.size()), width, stream());
}

void CudaBackend::copy_kv_heads(void* dst, int64_t dst_stride, const void* src,
                                int64_t src_stride, int64_t head_bytes,
                                std::span<const HeadCopy> copies) {
  if (copies.empty()) return;
  static_assert(sizeof(HeadCopy) == 3 * sizeof(int64_t), "HeadCopy is three int64 fields");
  const auto* c = static_cast<const int64_t*>(ring_.put(copies.data(), copies.size_bytes(), stream()));
  cuda::copy_kv_heads(dst, dst_stride, src, src_stride, head_bytes, c,
                      static_cast<int64_t>(copies.size()), stream());
}

void CudaBackend::kv_encode_rows(const float* src, int64_t src_stride, int64_t n, DType dtype,
                                 int64_t n_kv_heads, int64_t head_dim, void* dst) {
  OFFGEN_CHECK(cuda::kv_encode_supported(dtype), kInternal, "cuda: no KV encoder for {}",
               dtype_name(dtype));
  cuda::kv_encode(src, src_stride, dtype, n_kv_heads, head_dim, dst, nullptr, n * n_kv_heads,
                  stream());
}

void CudaBackend::kv_encode_heads(const float* src, int64_t src_stride, DType dtype,
                                  int64_t n_kv_heads, int64_t head_dim, void* dst,
                                  std::span<const HeadCopy> copies) {
  OFFGEN_CHECK(cuda::kv_encode_supported(dtype), kInternal, "cuda: no KV encoder for {}",
               dtype_name(dtype));
  if (copies.empty()) return;
  const auto* c = static_cast<const int64_t*>(ring_.put(copies.data(), copies.size_bytes(), stream()));
  cuda::kv_encode(src, src_stride, dtype, n_kv_heads, head_dim, dst, c,
                  static_cast<int64_t>(copies.size()), stream());
}

std::unique_ptr<Stream> CudaBackend::make_stream() { return std::make_unique<CudaStream>(device_); }

std::unique_ptr<Event> CudaBackend::make_event() { return std::make_unique<CudaEvent>(device_); }

}  // namespace offgen::cuda
