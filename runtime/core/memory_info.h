// How much RAM this process may still use (the kernel's MemAvailable, bounded by a cgroup v2
// memory limit when one applies: containers), and how much it has used at most.
#pragma once

#include <cstdint>

namespace offgen {

// Bytes of RAM available to this process now (0 when it cannot be determined).
int64_t available_ram_bytes();
// The process's peak resident set so far (getrusage's ru_maxrss: every page it has held at once,
// mapped files included), in bytes; 0 when it cannot be determined.
int64_t peak_rss_bytes();
// The process's resident set now, by kind (/proc/self/status): anonymous memory (RssAnon: what
// it allocated) and file-backed pages (RssFile + RssShmem: code, libraries, mapped model files,
// which the kernel can drop and read again). Zeros when it cannot be read.
struct RssBytes {
  int64_t anon = 0, file = 0;
};
RssBytes rss_bytes();
// The anonymous memory the process held as it started, before offgen did any work: mostly the
// shared libraries' static data (cuBLASLt's alone is about 81 MiB in a build with CUDA).
// Recorded during static initialisation, after the libraries' own.
int64_t startup_anon_bytes();
// Samples the anonymous memory now and returns the most seen at any sample so far (a lower
// bound of the true peak: the engine samples after loading and after each step, a calibration
// during each measurement). Thread-safe.
int64_t sample_anon_peak();
// Bytes of written data the kernel has yet to put on disk (/proc/meminfo's Dirty + Writeback):
// while it is written back the disk serves it beside any reads; 0 when it cannot be read.
int64_t unwritten_page_bytes();
// Hands the allocator's free memory back to the system (glibc's malloc_trim), for after work
// that freed much (a calibration) and before work whose memory is counted.
void trim_free_memory();

}  // namespace offgen
