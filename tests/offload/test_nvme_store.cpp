// NVMe store tests that need no io_uring: the pread/pwrite engine under every store check (odd
// sizes, async batches, injected short transfers / EAGAIN / EIO / ENOSPC), fallbacks, misuse,
// and that no file is ever left in the offload dir (also after kill -9).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>
#include <sstream>

#include "offload/nvme_store.h"
#include "runtime/core/error.h"
#include "tests/offload/store_cases.h"

using namespace offgen;
using namespace offgen::test;

namespace {

// Runs `body` in a forked child with stderr redirected to a file; returns (exit code, stderr).
template <class F>
std::pair<int, std::string> run_in_child(const std::string& dir, F body) {
  const std::string log = dir + "/../offgen-test-stderr-" + std::to_string(::getpid());
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) ::dup2(fd, 2);
    int rc = 0;
    try {
      rc = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child exception: %s\n", e.what());
      rc = 3;
    }
    std::fflush(stderr);
    ::_exit(rc);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  ::unlink(log.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("sync engine: round trip of odd sizes", "[nvme]") {
  check_round_trip_odd_sizes(EngineKind::kSync);
}

TEST_CASE("sync engine: big multi-op async batch", "[nvme]") {
  check_async_batch(EngineKind::kSync, 1);
  check_async_batch(EngineKind::kSync, 16);
}

TEST_CASE("sync engine: concurrent callers", "[nvme]") {
  check_concurrent_threads(EngineKind::kSync);
}

TEST_CASE("sync engine: injected faults", "[nvme]") {
  SECTION("short reads") { check_short_reads(EngineKind::kSync); }
  SECTION("short writes") { check_short_writes(EngineKind::kSync); }
  SECTION("EAGAIN") { check_eagain(EngineKind::kSync); }
  SECTION("EIO") { check_eio(EngineKind::kSync); }
  SECTION("ENOSPC") { check_enospc(EngineKind::kSync); }
  SECTION("EIO inside an async batch") { check_eio_in_async_batch(EngineKind::kSync); }
}

TEST_CASE("io_uring disabled: pread/pwrite fallback, said once", "[nvme]") {
  TempDir dir;
  const auto before = list_dir(dir.path());
  auto [rc, err] = run_in_child(dir.path(), [&] {
    ::setenv("OFFGEN_NO_IO_URING", "1", 1);
    NvmeStoreOptions opt;
    opt.dir = dir.path();
    for (int i = 0; i < 3; ++i) {
      NvmeStore store(opt);
      if (std::string(store.engine_name()) != "sync") return 1;
      const auto data = random_bytes(100000, i);
      const Extent e = store.allocate(data.size());
      store.write(e, data.data(), data.size());
      std::vector<uint8_t> back(data.size());
      store.read(e, back.data(), back.size());
      if (back != data) return 2;
    }
    return 0;
  });
  INFO(err);
  CHECK(rc == 0);
  CHECK(count(err, "OFFGEN_NO_IO_URING") == 1);
  CHECK(list_dir(dir.path()) == before);

  NvmeStoreOptions opt;
  opt.dir = dir.path();
  opt.use_io_uring = false;
  NvmeStore store(opt);
  CHECK(std::string(store.engine_name()) == "sync");
}

TEST_CASE("backing file: O_TMPFILE, open+unlink fallback, buffered, tmpfs", "[nvme]") {
  TempDir dir;
  const auto before = list_dir(dir.path());
  for (bool tmpfile : {true, false}) {
    for (bool direct : {true, false}) {
      NvmeStoreOptions opt = store_options(dir.path(), EngineKind::kSync);
      opt.use_tmpfile = tmpfile;
      opt.direct = direct;
      NvmeStore store(opt);
      INFO("tmpfile=" << tmpfile << " direct=" << direct << " path=" << store.path());
      if (!tmpfile) CHECK_FALSE(store.tmpfile());
      if (!direct) CHECK_FALSE(store.direct());
      CHECK(list_dir(dir.path()) == before);  // unlinked while in use
      if (store.tmpfile()) {
        CHECK(store.path() == dir.path() + " (unnamed offload file)");  // no name ever existed
      } else {
        CHECK_THAT(store.path(), Catch::StartsWith(dir.path() + "/offgen-"));
      }
      const auto data = random_bytes(3 * 4096 + 5, 3);
      const Extent e = store.allocate(data.size());
      store.write(e, data.data(), data.size());
      std::vector<uint8_t> back(data.size());
      store.read(e, back.data(), back.size());
      CHECK(back == data);
    }
  }
  CHECK(list_dir(dir.path()) == before);
  if (::access("/dev/shm", W_OK) == 0) {  // tmpfs: O_DIRECT support depends on the kernel
    TempDir shm("/dev/shm");
    NvmeStore store(store_options(shm.path(), EngineKind::kSync));
    const auto data = random_bytes(70000, 4);
    const Extent e = store.allocate(data.size());
    store.write(e, data.data(), data.size());
    std::vector<uint8_t> back(data.size());
    store.read(e, back.data(), back.size());
    CHECK(back == data);
    CHECK(list_dir(shm.path()).empty());
  }
}

TEST_CASE("kill -9 leaves nothing in the offload dir", "[nvme]") {
  TempDir dir;
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);
  for (bool tmpfile : {true, false}) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      NvmeStoreOptions opt;
      opt.dir = dir.path();
      opt.use_tmpfile = tmpfile;
      NvmeStore store(opt);
      const Extent e = store.allocate(1 << 20);
      std::vector<uint8_t> data(1 << 20, 7);
      store.write(e, data.data(), data.size());
      char c = 1;
      if (::write(pipefd[1], &c, 1) != 1) ::_exit(1);
      ::pause();
      ::_exit(0);
    }
    char c = 0;
    REQUIRE(::read(pipefd[0], &c, 1) == 1);
    CHECK(list_dir(dir.path()).empty());
    ::kill(pid, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status));
    CHECK(list_dir(dir.path()).empty());
  }
  ::close(pipefd[0]);
  ::close(pipefd[1]);
}

TEST_CASE("a real full filesystem (RLIMIT_FSIZE) is a kResource error, nothing left", "[nvme]") {
  TempDir dir;
  for (bool preallocate : {true, false}) {
    auto [rc, err] = run_in_child(dir.path(), [&] {
      ::signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of the signal
      const rlimit lim{1 << 20, 1 << 20};
      if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return 4;
      NvmeStoreOptions opt;
      opt.dir = dir.path();
      opt.preallocate = preallocate;
      NvmeStore store(opt);
      const Extent ok = store.allocate(512 << 10);
      std::vector<uint8_t> data(512 << 10, 9);
      store.write(ok, data.data(), data.size());
      try {
        store.allocate(2 << 20);
        return 1;
      } catch (const Error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        const std::string msg = e.what();
        if (e.category() != ErrorCategory::kResource) return 2;
        if (msg.find(store.path()) == std::string::npos) return 5;
        if (msg.find("offset 524288") == std::string::npos) return 6;
        if (msg.find("--disk-mem") == std::string::npos) return 7;
      }
      std::vector<uint8_t> back(data.size());
      store.read(ok, back.data(), back.size());
      return back == data ? 0 : 8;
    });
    INFO(err);
    CHECK(rc == 0);
    CHECK(list_dir(dir.path()).empty());
  }
}

namespace {
// Refuses its `bad`-th submit() call with an exception (like a broken io_uring_enter).
class RefusingEngine final : public IoEngine {
 public:
  RefusingEngine(const IoEngineConfig& cfg, int bad) : inner_(cfg), bad_(bad) {}
  const char* name() const override { return "refusing"; }
  uint32_t capacity() const override { return inner_.capacity(); }
  void submit(std::span<const EngineOp> ops) override {
    if (++calls_ == bad_) OFFGEN_THROW(kIo, "engine refused the batch");
    inner_.submit(ops);
  }
  size_t reap(std::span<EngineCompletion> out, size_t min_complete) override {
    return inner_.reap(out, min_complete);
  }

 private:
  SyncIoEngine inner_;
  int calls_ = 0, bad_;
};

// A store whose engine refuses its 3rd submit() call, 64 KiB written to it (call 1), and two reads
// of them: into `a`, and into `b`, filled with 0xee, which a refused read leaves as it is.
struct RefusalCase {
  TempDir dir;
  NvmeStore store;
  Extent e;
  std::vector<uint8_t> data = random_bytes(64 << 10, 1);
  AlignedHostBuffer a{64 << 10}, b{64 << 10};
  IoOp ra, rb;

  explicit RefusalCase(uint32_t queue_depth) : store(options(dir.path(), queue_depth)) {
    e = store.allocate(data.size());
    store.write(e, data.data(), data.size());
    std::memset(b.data(), 0xee, b.capacity());
    ra = IoOp{IoKind::kRead, e, a.data(), a.capacity(), 0};
    rb = IoOp{IoKind::kRead, e, b.data(), b.capacity(), 0};
  }
  static NvmeStoreOptions options(const std::string& dir, uint32_t queue_depth) {
    NvmeStoreOptions opt = store_options(dir, EngineKind::kSync);
    opt.queue_depth = queue_depth;
    opt.engine_factory = [](const IoEngineConfig& cfg) {
      return std::make_unique<RefusingEngine>(cfg, 3);
    };
    return opt;
  }
  bool a_read() const { return std::memcmp(a.data(), data.data(), data.size()) == 0; }
  bool b_untouched() const {
    return std::all_of(b.data(), b.data() + b.capacity(),
                       [](std::byte x) { return x == std::byte{0xee}; });
  }
};
}  // namespace

TEST_CASE("a batch the engine refuses is never performed", "[nvme]") {
  RefusalCase c(64);
  const Ticket ta = c.store.submit(std::span(&c.ra, 1));        // call 2
  CHECK_THROWS_AS(c.store.submit(std::span(&c.rb, 1)), Error);  // call 3: refused
  c.store.wait(ta);                                             // call 4
  CHECK(c.a_read());
  CHECK(c.b_untouched());
}

namespace {
// A sync engine whose blocking reap() waits until the test opens a gate, and which records any
// call that overlaps another (the store must drive an engine from one thread at a time).
class GatedEngine final : public IoEngine {
 public:
  explicit GatedEngine(const IoEngineConfig& cfg) : inner_(cfg) {}
  const char* name() const override { return "gated"; }
  uint32_t capacity() const override { return inner_.capacity(); }
  void submit(std::span<const EngineOp> ops) override {
    Busy busy(*this);
    inner_.submit(ops);
  }
  size_t reap(std::span<EngineCompletion> out, size_t min_complete) override {
    Busy busy(*this);
    if (min_complete > 0) {
      std::unique_lock lock(mu_);
      blocked_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
      blocked_ = false;
    } else if (!is_open()) {
      return 0;
    }
    return inner_.reap(out, min_complete);
  }
  void set_open(bool open) {
    std::lock_guard lock(mu_);
    open_ = open;
    cv_.notify_all();
  }
  bool is_open() {
    std::lock_guard lock(mu_);
    return open_;
  }
  // True once a reap() blocks at the gate (false after a minute: a regression, not a hang).
  bool wait_blocked() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return blocked_; });
  }
  int overlaps() const { return overlaps_.load(); }

 private:
  struct Busy {
    GatedEngine& e;
    explicit Busy(GatedEngine& engine) : e(engine) {
      if (e.active_.fetch_add(1) != 0) ++e.overlaps_;
    }
    ~Busy() { e.active_.fetch_sub(1); }
  };
  SyncIoEngine inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true, blocked_ = false;
  std::atomic<int> active_{0}, overlaps_{0};
};
}  // namespace

TEST_CASE("a thread blocked waiting for its reads does not hold up another's submit", "[nvme]") {
  TempDir dir;
  NvmeStoreOptions opt = store_options(dir.path(), EngineKind::kSync);
  GatedEngine* engine = nullptr;
  opt.engine_factory = [&](const IoEngineConfig& cfg) {
    auto e = std::make_unique<GatedEngine>(cfg);
    engine = e.get();
    return e;
  };
  NvmeStore store(opt);
  const Extent e = store.allocate(256 << 10);
  const auto data = random_bytes(256 << 10, 7);
  store.write(e, data.data(), data.size());
  AlignedHostBuffer a(128 << 10), b(128 << 10);
  const IoOp ra{IoKind::kRead, e, a.data(), a.capacity(), 0};
  const IoOp rb{IoKind::kRead, e, b.data(), b.capacity(), 128 << 10};

  engine->set_open(false);
  std::thread waiter_a, waiter_b;
  struct Unwind {  // however the checks below end: open the gate, then join
    GatedEngine* engine;
    std::thread &a, &b;
    ~Unwind() {
      engine->set_open(true);
      if (a.joinable()) a.join();
      if (b.joinable()) b.join();
    }
  } unwind{engine, waiter_a, waiter_b};
  const Ticket ta = store.submit(std::span(&ra, 1));
  waiter_a = std::thread([&] { store.wait(ta); });
  REQUIRE(engine->wait_blocked());  // A drives the device, blocked until the gate opens
  // Submitting and polling return while A is blocked (before, submit waited for A's reads).
  auto submitted = std::async(std::launch::async, [&] { return store.submit(std::span(&rb, 1)); });
  const bool returned = submitted.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  CHECK(returned);
  if (!returned) engine->set_open(true);  // let the old behaviour unwind instead of hanging
  const Ticket tb = submitted.get();
  CHECK_FALSE(store.poll(tb));  // queued behind A's blocked round
  waiter_b = std::thread([&] { store.wait(tb); });  // sleeps until A's round ends
  engine->set_open(true);
  waiter_a.join();
  waiter_b.join();
  CHECK(std::memcmp(a.data(), data.data(), a.capacity()) == 0);
  CHECK(std::memcmp(b.data(), data.data() + (128 << 10), b.capacity()) == 0);
  CHECK(engine->overlaps() == 0);
  CHECK(store.stats().errors == 0);
}

TEST_CASE("a batch refused while another ticket's wait drives the device fails its own ticket",
          "[nvme]") {
  RefusalCase c(1);  // depth 1: B waits in the queue until A's read completes
  const Ticket ta = c.store.submit(std::span(&c.ra, 1));  // call 2
  const Ticket tb = c.store.submit(std::span(&c.rb, 1));  // queued: the depth is taken
  c.store.wait(ta);  // issues B after A's completion (call 3: refused) and returns A's data
  CHECK(c.a_read());
  CHECK_THROWS_WITH(c.store.wait(tb), Catch::Contains("engine refused the batch"));
  CHECK(c.b_untouched());
  CHECK_THROWS_WITH(c.store.wait(tb), Catch::Contains("already waited"));
}

TEST_CASE("released extents are reused: best fit, split, merged, the end grown in place",
          "[nvme]") {
  // A job whose requests grow one after another must need the largest one's space, not the sum
  // (a --disk-mem set to the reported peak once failed mid-job).
  TempDir dir;
  NvmeStoreOptions opt = store_options(dir.path(), EngineKind::kSync);
  opt.capacity_bytes = 6 * 4096;
  NvmeStore store(opt);
  const Extent a = store.allocate(4096), b = store.allocate(8192), c = store.allocate(4096);
  CHECK((a.offset == 0 && b.offset == 4096 && c.offset == 12288));
  store.release(b);
  const Extent d = store.allocate(4096);  // best fit: the front of b, its rest stays free
  CHECK(d.offset == 4096);
  CHECK(store.free_bytes() == 4096);
  store.release(d);
  CHECK(store.free_bytes() == 8192);  // merged back into one extent
  CHECK(store.allocate(8192).offset == 4096);
  store.release(Extent{4096, 8192});
  store.release(c);  // merges with b's space; it ends at the file's end
  const Extent grown = store.allocate(5 * 4096);  // 12 KiB free at the end grows by 8 KiB
  CHECK(grown.offset == 4096);
  CHECK(store.allocated_bytes() == 6 * 4096);  // within the 24 KiB cap: no new space
  CHECK(store.free_bytes() == 0);
  store.release(grown);
  CHECK_THROWS_MATCHES(store.release(Extent{8192, 4096}), Error,
                       Catch::Predicate<Error>(
                           [](const Error& e) { return e.category() == ErrorCategory::kInternal; }));
  CHECK(store.free_bytes() == 5 * 4096);  // a refused release changes nothing
  store.release(a);
  CHECK(store.free_bytes() == 6 * 4096);
  CHECK(store.allocate(6 * 4096).offset == 0);
}

TEST_CASE("capacity, validation and misuse errors", "[nvme]") {
  TempDir dir;
  NvmeStoreOptions opt = store_options(dir.path(), EngineKind::kSync);
  opt.capacity_bytes = 1 << 20;
  NvmeStore store(opt);
  const Extent a = store.allocate(1000);
  CHECK(a.offset == 0);
  CHECK(a.bytes == 4096);
  const Extent b = store.allocate((1 << 20) - 4096);
  CHECK(b.offset == 4096);
  CHECK(store.allocated_bytes() == 1 << 20);
  try {
    store.allocate(1);
    FAIL("expected capacity error");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kResource);
    CHECK_THAT(e.what(), Catch::Contains("--disk-mem") && Catch::Contains(store.path()));
  }

  AlignedHostBuffer buf(8192);
  IoOp misaligned{IoKind::kRead, a, buf.data() + 1, 4096, 0};
  CHECK_THROWS_MATCHES(store.submit(std::span(&misaligned, 1)), Error,
                       Catch::Predicate<Error>(
                           [](const Error& e) { return e.category() == ErrorCategory::kInput; }));
  IoOp too_long{IoKind::kRead, a, buf.data(), 8192, 0};
  CHECK_THROWS_AS(store.submit(std::span(&too_long, 1)), Error);
  IoOp foreign{IoKind::kRead, Extent{1 << 30, 4096}, buf.data(), 4096, 0};
  CHECK_THROWS_AS(store.submit(std::span(&foreign, 1)), Error);
  CHECK_THROWS_AS(store.write(a, buf.data(), 4097), Error);
  CHECK_THROWS_AS(store.wait(12345), Error);

  auto config_error = [](NvmeStoreOptions o, const std::string& needle) {
    try {
      NvmeStore s(o);
      FAIL("expected a config error");
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::kConfig);
      CHECK_THAT(e.what(), Catch::Contains(needle));
    }
  };
  NvmeStoreOptions bad;
  config_error(bad, "--offload-dir");
  bad.dir = dir.path() + "/does-not-exist";
  config_error(bad, bad.dir);
  bad.dir = dir.path();
  bad.queue_depth = 0;
  config_error(bad, "queue_depth");
  bad.queue_depth = 8;
  bad.max_op_bytes = 1000;
  config_error(bad, "max_op_bytes");
}
