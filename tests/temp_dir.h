// A unique scratch directory per test (mkdtemp), removed with its contents at scope exit, so that
// two test runs (or two CTest jobs) never share or delete each other's files.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace offgen::test {

class TempDir {
 public:
  // Creates PARENT/offgen-test-XXXXXX. PARENT is `parent`; else $OFFGEN_TEST_OFFLOAD_DIR (point
  // it at the file system the offload tests should use); else the system temp dir ($TMPDIR or
  // /tmp). Throws std::runtime_error naming the template when the directory cannot be made.
  explicit TempDir(const std::string& parent = "") {
    std::string base = parent;
    if (base.empty()) {
      const char* env = std::getenv("OFFGEN_TEST_OFFLOAD_DIR");
      base = env && *env ? env : std::filesystem::temp_directory_path().string();
    }
    std::string tmpl = base + "/offgen-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error("mkdtemp " + tmpl + ": " + std::strerror(errno));
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // The path of `name` inside the directory (nothing is created).
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

}  // namespace offgen::test
