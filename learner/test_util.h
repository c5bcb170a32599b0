// Helpers shared by the learner tests: temp dirs and a cached tiny model.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "learner/make_model.h"

namespace smolvm::learner::testing {

// Directories TempDir made, removed when the test process exits (only by the
// process that made them: a forked child exiting leaves them to its parent).
struct TempDirs {
  pid_t owner = getpid();
  std::vector<std::string> dirs;
  ~TempDirs() {
    if (getpid() != owner) return;
    std::error_code ec;
    for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
  }
};
inline TempDirs& MadeTempDirs() {
  static TempDirs made;
  return made;
}

// A fresh directory under TMPDIR, removed when the test process exits.
inline std::string TempDir(const std::string& tag) {
  const char* base = getenv("TMPDIR");
  std::string t = std::string(base ? base : "/tmp") + "/learner_" + tag + "_XXXXXX";
  char* p = mkdtemp(t.data());
  EXPECT_NE(p, nullptr);
  if (p != nullptr) MadeTempDirs().dirs.push_back(t);
  return t;
}

// The tiny preset at seed 1, made once per test binary.
inline const std::string& TinyModel() {
  static std::string dir = [] {
    std::string d = TempDir("tiny");
    Status s = MakeModel("tiny", 1, d);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return d;
  }();
  return dir;
}

}  // namespace smolvm::learner::testing
