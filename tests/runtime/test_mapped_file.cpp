// MappedFile::read_into: the mapping's bytes read from the file (O_DIRECT for large ranges where
// the filesystem allows it, buffered otherwise), for any offset and length; false outside the
// mapping; a clear error when the file shrank under the mapping.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/mapped_file.h"
#include "tests/temp_dir.h"

using namespace offgen;

namespace {

std::string write_pattern(const std::string& path, size_t n) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fwrite(b.data(), 1, n, f) == n);
  std::fclose(f);
  return path;
}

}  // namespace

TEST_CASE("MappedFile::read_into reads any range of the mapping", "[mapped_file]") {
  const test::TempDir dir;
  const size_t n = (40u << 20) + 12345;  // past several 16 MiB direct-read chunks, unaligned end
  const MappedFile m = MappedFile::open(write_pattern(dir.path() + "/f.bin", n), "test file");
  const uint8_t* base = m.bytes().data();
  const struct {
    size_t off, len;
  } ranges[] = {{0, 10},          {4095, 3},        {1, 20u << 20},     {4096, 16u << 20},
                {12345, n - 12345}, {n - 5, 5},     {0, n},             {(16u << 20) - 7, 9u << 20},
                {n, 0}};
  for (const auto& r : ranges) {
    INFO("offset " << r.off << ", " << r.len << " bytes");
    std::vector<uint8_t> got(r.len + 1, 0xee);
    REQUIRE(m.read_into(base + r.off, r.len, got.data()));
    CHECK(std::equal(got.begin(), got.begin() + r.len, base + r.off));
    CHECK(got[r.len] == 0xee);  // nothing written past the range
  }
  uint8_t x = 0;
  CHECK_FALSE(m.read_into(&x, 1, &x));            // not in the mapping
  CHECK_FALSE(m.read_into(base + n - 1, 2, &x));  // runs past its end
  const MappedFile empty;
  CHECK_FALSE(empty.read_into(base, 1, &x));
}

TEST_CASE("MappedFile::read_into names the file when it shrank under the mapping",
          "[mapped_file]") {
  const test::TempDir dir;
  const size_t n = 8u << 20;
  const std::string path = write_pattern(dir.path() + "/f.bin", n);
  const MappedFile m = MappedFile::open(path, "test file");
  REQUIRE(::truncate(path.c_str(), n / 2) == 0);
  std::vector<uint8_t> got(n / 2);
  try {
    m.read_into(m.bytes().data() + n / 2, n / 2, got.data());
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kIo);
    CHECK_THAT(e.what(), Catch::Contains(path) && Catch::Contains("ended early"));
  }
}
