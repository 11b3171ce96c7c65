// CPU streams and events.
#include "runtime/backend/cpu/cpu_streams.h"

#include <algorithm>
#include <cstring>

namespace offgen::cpu {

uint64_t CpuEvent::record_next() {
  std::lock_guard lock(mu_);
  return ++recorded_;
}

void CpuEvent::complete(uint64_t n) {
  {
    std::lock_guard lock(mu_);
    completed_ = std::max(completed_, n);
  }
  cv_.notify_all();
}

uint64_t CpuEvent::target() const {
  std::lock_guard lock(mu_);
  return recorded_;
}

void CpuEvent::wait_for(uint64_t n) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return completed_ >= n; });
}

void SyncStream::copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) std::memmove(dst, src, static_cast<size_t>(bytes));
}

void SyncStream::record(Event& e) {
  auto& ev = static_cast<CpuEvent&>(e);
  ev.complete(ev.record_next());
}

void SyncStream::wait(Event& e) { e.synchronize(); }

WorkerStream::WorkerStream() : worker_([this] { loop(); }) {}

WorkerStream::~WorkerStream() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void WorkerStream::enqueue(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void WorkerStream::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and drained
    auto task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    task();
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

void WorkerStream::copy(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0 || dst == src) return;
  enqueue([dst, src, bytes] { std::memmove(dst, src, static_cast<size_t>(bytes)); });
}

void WorkerStream::record(Event& e) {
  auto* ev = &static_cast<CpuEvent&>(e);
  const uint64_t n = ev->record_next();
  enqueue([ev, n] { ev->complete(n); });
}

void WorkerStream::wait(Event& e) {
  auto* ev = &static_cast<CpuEvent&>(e);
  const uint64_t n = ev->target();
  enqueue([ev, n] { ev->wait_for(n); });
}

void WorkerStream::synchronize() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

}  // namespace offgen::cpu
