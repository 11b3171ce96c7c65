// Backend interface: the ops the models need (matmul over prepared weights, RMS/layer norms (also
// per head), RoPE, SwiGLU/GeGLU/ReLU/GELU, biases, scaling and soft-capping, embedding gather,
// attention over a KV slot view (causal, optionally windowed and soft-capped), greedy sampling),
// the backend's memory tiers and the streams and events that order copies between them.
// Tensor pointers are in the backend's device memory (host RAM on the CPU backend); index
// arguments (ids, positions, rows, descriptors) are host memory. Ops and Backend::copy* run in
// order on the backend's compute stream: asynchronous to the host on CUDA (results are ready
// after synchronize() or an event), immediate on the CPU. One thread issues ops at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/buffer.h"
#include "runtime/core/dtype.h"
#include "runtime/core/threading.h"
#include "runtime/core/backend_caps.h"
#include "runtime/backend/rope_style.h"

namespace offgen {

// A weight matrix W[rows=out_features, cols=in_features] in a backend's storage (non-owning).
// `dtype` is the storage format (the backend's matmul dispatches on it; the layout is its own).
struct WeightView {
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::kF32;
  const void* data = nullptr;
};

// An owning weight: storage plus its view.
struct Weight {
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::kF32;
  Buffer data;
  int64_t bytes() const { return data.bytes(); }
  WeightView view() const { return {rows, cols, dtype, data.data()}; }
  operator WeightView() const { return view(); }
};

// One sequence of a ragged batch: its n_new tokens occupy rows [row_begin, row_begin + n_new) of
// the activations; its KV view already holds n_past visible slots followed by the n_new new ones.
struct SeqSpan {
  int64_t row_begin = 0;
  int64_t n_new = 0;
  int64_t n_past = 0;
};

// K and V of one sequence for one layer, slot-major: [capacity][n_kv_heads] head vectors, each
// of head_dim values stored as the table's KV dtype (runtime/core/kv_format.h: kv_head_bytes; a
// token's K (or V) for all heads is one contiguous row of kv_row_bytes, so a prefix of slots is
// one extent). The attention reads that format directly.
// Tables that evict also carry per-head slot metadata in host memory, [n_kv_heads][capacity]
// each: the position a head's slot holds and the attention statistics it has received. Heads
// evict independently, so one slot row may hold different positions for different heads.
// A read-only context shared by several sequences (a compressed multi-query context): per KV
// head its own kept K and V head vectors, head-major and of its own length (evicted pairs are
// gone, no padding to the longest head), in position order, stored as the sequences' KV dtype.
// Every row of a sequence attends to it before its own slots: to all of it, or under a sliding
// window to the rows whose positions it sees.
struct KvSharedPrefix {
  const void* const* k = nullptr;  // [n_kv_heads] -> [len[h]] head vectors
  const void* const* v = nullptr;
  const int64_t* len = nullptr;     // [n_kv_heads]
  // Host memory, [n_kv_heads] -> [len[h]] ascending: the rows' positions (null: unknown, which a
  // sliding window refuses).
  const int32_t* const* pos = nullptr;
  DType dtype = DType::kF32;  // the KV dtype of its head vectors
};

struct KvSeqView {
  void* k = nullptr;  // device memory, or host memory when `host` (cpu_cache_compute)
  void* v = nullptr;
  int64_t capacity = 0;
  int32_t* pos = nullptr;   // null: the table never evicts (no metadata)
  float* sum = nullptr;
  float* max = nullptr;
  int32_t* written = nullptr;  // out, [n_kv_heads]: the slot each head's new token went to
  int64_t compact_to = 0;      // slots a multi-token chunk that overflows keeps (0: capacity)
  const KvSharedPrefix* prefix = nullptr;  // a shared context before the slots (null: none)
  // The table lives in host memory: a GPU backend runs this sequence's attention on the CPU
  // (FlexGen's cpu_cache_compute). Metadata (pos/sum/max) is always host memory the device can
  // write (pinned on CUDA).
  bool host = false;
  DType dtype = DType::kF32;  // the KV dtype K and V are stored as (kv_format.h)
};

// Attention-score statistics of one sequence for the KV policies: for each KV head and slot, the
// softmax probability mass the slot received, summed and maxed over the head's query group and
// the new rows: [n_kv_heads][capacity]. The op accumulates (+= and max=) onto what the caller
// put there, so running scores can live in these arrays.
struct AttentionStats {
  float* col_sum = nullptr;  // null: no statistics for this sequence
  float* col_max = nullptr;
  int64_t capacity = 0;
  int64_t first_row = 0;  // new rows before this one do not contribute (an observation window)
};

struct AttentionArgs {
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;
  std::span<const SeqSpan> seqs;
  std::span<const KvSeqView> kv;  // one per seq
  std::span<const AttentionStats> stats;  // one per seq, or empty for none
  // Scores are soft-capped to softcap * tanh(score / softcap) before the softmax (0: not).
  float softcap = 0.0f;
  // Sliding window (0: none): a row at position p sees only keys at positions > p - window. A
  // table without metadata holds consecutive positions (slot j of a sequence whose row t sits at
  // slot n_past + t), so the window is a range of slots; in tables with metadata (that evict) the
  // keys' positions are read from KvSeqView::pos and the rows' from `positions`. A shared prefix
  // under a window needs its rows' positions (KvSharedPrefix::pos) and `positions`.
  int64_t window = 0;
  const int32_t* positions = nullptr;  // host memory, per row; needed with a window
};

struct DeviceInfo {
  std::string name;
  int64_t total_bytes = 0, free_bytes = 0;  // device memory (RAM for the CPU backend)
};

// Completion of the work enqueued on a stream before it was recorded. Thread-safe.
class Event {
 public:
  virtual ~Event() = default;
  // Blocks the calling thread until that work has finished (at once if never recorded).
  virtual void synchronize() = 0;
};

// An ordered queue of copies (a CUDA stream; the calling thread on the CPU backend). Work on
// different streams runs concurrently unless ordered by events. Stream-ordered: a copy's source
// must stay valid and unchanged, and its destination untouched, until an event recorded after
// it has completed. One thread enqueues on a stream at a time.
class Stream {
 public:
  virtual ~Stream() = default;
  // Copies `bytes` between any two tiers' memory (device, host; pageable host memory works but
  // serialises on CUDA).
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
  virtual void record(Event& e) = 0;  // e completes once everything enqueued so far has
  virtual void wait(Event& e) = 0;    // later work here waits for e's latest recording
  virtual void synchronize() = 0;     // blocks the caller until this stream is idle
};

// One head slice copied by copy_heads: row dst_row of the destination takes row src_row's head.
struct HeadCopy {
  int64_t dst_row = 0, src_row = 0, head = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  std::string name() const { return std::string(backend_name(kind())); }
  // What this backend supports (backend_caps(kind()): known before one is constructed).
  BackendCaps caps() const { return backend_caps(kind()); }
  virtual ThreadContext& threads() = 0;

  // --- memory, copies and ordering ---
  // Whether device memory is host memory (the CPU backend): then the host may touch device
  // buffers directly and tier copies are plain memcpy.
  bool device_is_host() const { return caps().device_is_host; }
  virtual DeviceInfo device_info() const = 0;
  // Zeroed memory: kDevice (where ops read and write: GPU memory on CUDA, 256-byte aligned) or
  // kHost (host memory the device can read and write and copies run asynchronously from: pinned
  // on CUDA; 4 KiB aligned, as O_DIRECT needs). Throws Error(kResource) when out of memory.
  virtual Buffer alloc(int64_t bytes, Tier tier) = 0;
  // A device buffer holding a copy of `bytes` of host memory (ready when this returns).
  Buffer upload(const void* src, int64_t bytes);
  // Copies on the compute stream, in order with the ops: bytes between any tiers; `rows` rows of
  // row_bytes with their own strides (bytes); dst row i = src row rows[i] (fp32 rows of `width`);
  // head vectors of KV slot rows in any KV dtype (strides and the head vector's size in bytes:
  // kv_format.h; row r's head h at r * stride + h * head_bytes). Index lists are host memory.
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
  virtual void copy_rows(void* dst, int64_t dst_stride, const void* src, int64_t src_stride,
                         int64_t rows, int64_t row_bytes) = 0;
  virtual void gather_rows(float* dst, const float* src, std::span<const int64_t> rows,
                           int64_t width) = 0;
  virtual void copy_kv_heads(void* dst, int64_t dst_stride, const void* src, int64_t src_stride,
                             int64_t head_bytes, std::span<const HeadCopy> copies) = 0;
  // New K or V vectors into a KV table stored as `dtype` (kv_format.h; the bytes kv_encode_head
  // gives, f32 a plain copy), on the compute stream: rows [0, n) of src (fp32 rows of n_kv_heads
  // x head_dim, `src_stride` floats apart) into consecutive slot rows from dst; or, per HeadCopy,
  // head `head` of src row src_row into head `head` of slot row dst_row (the other heads of that
  // slot keep their bytes). dst: device memory, or host memory the device can write.
  virtual void kv_encode_rows(const float* src, int64_t src_stride, int64_t n, DType dtype,
                              int64_t n_kv_heads, int64_t head_dim, void* dst) = 0;
  virtual void kv_encode_heads(const float* src, int64_t src_stride, DType dtype,
                               int64_t n_kv_heads, int64_t head_dim, void* dst,
                               std::span<const HeadCopy> copies) = 0;
  // The stream the ops run on, new streams for the schedule's load and store lanes, and events.
  virtual Stream& compute_stream() = 0;
  virtual std::unique_ptr<Stream> make_stream() = 0;
  virtual std::unique_ptr<Event> make_event() = 0;
  // Blocks until every op and copy issued so far on the compute stream has finished.
  void synchronize() { compute_stream().synchronize(); }

  // The weight storage option the backend was made with.
  virtual WeightMode weight_mode() const = 0;
  // The storage a rows x `cols` weight whose elements come as `src` gets under the backend's
  // WeightMode (a fixed storage whose blocks do not divide `cols` falls back to a plain one). A
  // mode that quantises (WeightMode::quantises()) gives each matrix the type of the rule table
  // (runtime/model/quant_rules.h), which the caller picks and passes to matmul_storage_as.
  virtual DType matmul_storage(DType src, int64_t cols) const = 0;
  // The storage of a rows x `cols` weight the caller wants as `wanted`: `wanted` where the backend
  // multiplies by it at this width, else its closest plain format (CPU: f32; GPU: f16).
  virtual DType matmul_storage_as(DType wanted, int64_t cols) const = 0;
  // Bytes of a rows x cols weight stored as `storage` (a multiple of 64).
  virtual int64_t weight_bytes(DType storage, int64_t rows, int64_t cols) const = 0;
  // Converts rows x cols elements of `src` (type `src_type`, row-major, rows contiguous) into
  // `storage` (matmul_storage(src_type, cols) or matmul_storage_as(...)) at `dst` (64-byte
  // aligned, weight_bytes() long, HOST memory on every backend: unit blobs are built on the host
  // and moved to the device as bytes). Returns the view of dst. Deterministic: the same input
  // gives the same bytes.
  virtual WeightView prepare_weight_into(DType src_type, const void* src, int64_t rows,
                                         int64_t cols, DType storage, void* dst) = 0;
  // Owning convenience over prepare_weight_into (storage: matmul_storage(src_type, cols) unless
  // given); the weight ends up in device memory.
  Weight prepare_weight(DType src_type, const void* src, int64_t rows, int64_t cols);
  Weight prepare_weight(DType src_type, const void* src, int64_t rows, int64_t cols,
                        DType storage);
  // A table for embedding gathers in device memory (the CPU backend keeps its source storage,
  // e.g. q8_0 rows).
  virtual Weight prepare_table(DType src_type, const void* src, int64_t rows, int64_t cols) = 0;

  // y[m, w.rows] = x[m, w.cols] · Wᵀ; row i of y starts at y + i * ldy (0: w.rows), so several
  // weights can fill the column ranges of one output.
  virtual void matmul(const float* x, int64_t m, const WeightView& w, float* y,
                      int64_t ldy = 0) = 0;
  // y[m, d] = x / rms(x) * gamma (y may alias x).
  virtual void rms_norm(const float* x, const float* gamma, int64_t m, int64_t d, float eps,
                        float* y) = 0;
  // In place over x[n_tokens][n_heads][head_dim]: every head's vector v = v / rms(v) * gamma
  // (gamma: head_dim floats; QK-norm); token t starts at x + t * token_stride (0 = contiguous).
  virtual void head_rms_norm(float* x, const float* gamma, int64_t n_tokens, int64_t n_heads,
                             int64_t head_dim, float eps, int64_t token_stride = 0) = 0;
  // In-place rotary embedding of x[n_tokens][n_heads][head_dim] at the given positions: pair i of
  // each head rotates by positions[t] * inv_freq[i] (inv_freq: host memory, at most head_dim / 2
  // floats, see rope.h). Only the first 2 * inv_freq.size() elements of a head rotate (partial
  // rotary embedding: the others pass unchanged); the rotated ones are scaled by mscale (cos and
  // sin times mscale: LongRoPE's attention factor). Token t starts at x + t * token_stride
  // (0 = contiguous, n_heads * head_dim).
  virtual void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                    const int32_t* positions, std::span<const float> inv_freq, RopeStyle style,
                    int64_t token_stride = 0, float mscale = 1.0f) = 0;
  // out[i] = silu(gate[i]) * up[i] over rows of width n in an interleaved [m][2][n] or separate
  // layout: gate and up are [m, n] with row strides gate_stride/up_stride.
  virtual void swiglu(const float* gate, const float* up, int64_t m, int64_t n, int64_t stride,
                      float* out) = 0;
  // The same with the tanh-approximated GELU (HF "gelu_pytorch_tanh") in place of silu: GeGLU.
  virtual void geglu(const float* gate, const float* up, int64_t m, int64_t n, int64_t stride,
                     float* out) = 0;
  // y[m, d] = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta per row (y may alias x).
  virtual void layer_norm(const float* x, const float* gamma, const float* beta, int64_t m,
                          int64_t d, float eps, float* y) = 0;
  // In place over x[m, n]: relu (max(x, 0)) or gelu (exact, erf form), as HF's "relu"/"gelu".
  virtual void relu(float* x, int64_t n) = 0;
  virtual void gelu(float* x, int64_t n) = 0;
  // y[i] += x[i]
  virtual void add(float* y, const float* x, int64_t n) = 0;
  // x[i] = 0 for i < n.
  virtual void zero(float* x, int64_t n) = 0;
  // Row rows[i] of y += scales[i] * row i of x, for fp32 rows of `width` (rows distinct; index
  // and scale lists in host memory): the experts' outputs combined into the tokens' rows.
  virtual void add_rows_scaled(float* y, const float* x, std::span<const int64_t> rows,
                               std::span<const float> scales, int64_t width) = 0;
  // x[i] *= s (embedding scale).
  virtual void scale(float* x, float s, int64_t n) = 0;
  // x[i] = cap * tanh(x[i] / cap) (logit soft-capping; cap > 0).
  virtual void softcap(float* x, float cap, int64_t n) = 0;
  // y[r, j] += bias[j] for rows r < m of width n whose row stride is `stride` (0 = n).
  virtual void add_bias(float* y, const float* bias, int64_t m, int64_t n, int64_t stride = 0) = 0;
  // out[i, :] = table[ids[i], :] (dequantised).
  virtual void embedding(const WeightView& table, const int32_t* ids, int64_t n, float* out) = 0;
  // Whether gather_weight_rows reads a matmul weight stored as `storage` (so a tied embedding can
  // share the output head's storage instead of holding a second copy).
  virtual bool can_gather_weight_rows(DType storage) const = 0;
  // out[i, :] = row ids[i] of the prepared matmul weight w, as fp32 (exactly its values).
  virtual void gather_weight_rows(const WeightView& w, const int32_t* ids, int64_t n,
                                  float* out) = 0;
  // Causal attention of q[rows][n_heads][head_dim] over each sequence's KV slots; out has q's shape.
  virtual void attention(const float* q, const AttentionArgs& args, float* out) = 0;
  // Greedy sampling on the device: out[i] = the lowest id among the largest logits of row i, or
  // kNonFiniteRow (-1, argmax.h) when row i holds a NaN or an infinity, for n rows of `vocab`;
  // out is host memory, filled when this returns.
  virtual void argmax_rows(const float* logits, int64_t n, int64_t vocab, int32_t* out) = 0;
};

// weights: the matmul storage (see cpu/cpu_backend.h).
std::unique_ptr<Backend> make_cpu_backend(int threads, WeightMode weights = DType::kF32);
// The CPU backend posing as a device with memory of its own (tests of the host-side paths of a
// GPU backend): device_is_host() is false, kDevice memory is separate host memory only reached
// through copies, and streams made by make_stream() run their copies on a worker thread, so
// every tier transfer, event and stream wait a GPU backend needs happens — and results must be
// bitwise those of the plain CPU backend.
std::unique_ptr<Backend> make_emulated_device_backend(int threads,
                                                      WeightMode weights = DType::kF32);
// A backend of any kind: the CPU, its emulated device, or CUDA (GPU `device`; Error(kConfig)
// when this build has no CUDA backend, Error(kResource) when no usable GPU is present, with the
// reason).
std::unique_ptr<Backend> make_backend(BackendKind kind, int threads, WeightMode weights,
                                      int device = 0);
// Whether the CUDA backend was compiled in and a GPU is usable; `why` gets the reason if not.
bool cuda_backend_available(std::string* why = nullptr);

}  // namespace offgen
