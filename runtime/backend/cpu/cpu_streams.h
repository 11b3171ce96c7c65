// Streams and events of the CPU backend: the synchronous stream (copies happen in the calling
// thread) and, for the emulated-device mode, worker streams whose copies run on a thread of their
// own, with events that order them exactly as CUDA events order GPU streams.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "runtime/backend/backend.h"

namespace offgen::cpu {

// Recorded on any CPU stream. A wait or synchronize refers to the latest recording at the time
// of the call (as cudaStreamWaitEvent / cudaEventSynchronize do). Thread-safe.
class CpuEvent final : public Event {
 public:
  void synchronize() override { wait_for(target()); }
  uint64_t record_next();        // a new recording; returns its number
  void complete(uint64_t n);     // recording n (and all before it) has completed
  uint64_t target() const;       // the latest recording's number (0: never recorded)
  void wait_for(uint64_t n);     // blocks until recording n has completed

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t recorded_ = 0, completed_ = 0;
};

// Work happens in the calling thread: copy is memcpy, record completes at once, wait blocks.
class SyncStream final : public Stream {
 public:
  void copy(void* dst, const void* src, int64_t bytes) override;
  void record(Event& e) override;
  void wait(Event& e) override;
  void synchronize() override {}
};

// Work runs in order on a worker thread of its own.
class WorkerStream final : public Stream {
 public:
  WorkerStream();
  ~WorkerStream() override;
  void copy(void* dst, const void* src, int64_t bytes) override;
  void record(Event& e) override;
  void wait(Event& e) override;
  void synchronize() override;

 private:
  void enqueue(std::function<void()> task);
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false, stop_ = false;
  std::thread worker_;
};

}  // namespace offgen::cpu
