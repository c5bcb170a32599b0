// Helpers shared by the learner tests: temp dirs and a cached tiny model.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "learner/make_model.h"

namespace smolvm::learner::testing {

// A fresh directory under TMPDIR, removed at exit of the test binary is not
// attempted: ctest runs in a scratch tree.
inline std::string TempDir(const std::string& tag) {
  const char* base = getenv("TMPDIR");
  std::string t = std::string(base ? base : "/tmp") + "/learner_" + tag + "_XXXXXX";
  char* p = mkdtemp(t.data());
  EXPECT_NE(p, nullptr);
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
