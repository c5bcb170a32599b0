#include "worker/nvml_text.h"

#include <gtest/gtest.h>

namespace smolvm {
namespace {

TEST(NvmlText, DriverVersionOfTheProprietaryModule) {
  EXPECT_EQ(DriverVersionOfLine("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 09:55:41 UTC 2025"),
            "580.95.05");
}

// The H200's open module (2026-12-04): the word after "Kernel Module" is
// "for", which the first parser returned as the driver version.
TEST(NvmlText, DriverVersionOfTheOpenModule) {
  EXPECT_EQ(DriverVersionOfLine("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
                                "(dvs-builder@U22-I3-AF03-09-1)  Sun Nov 23 09:56:05 UTC 2025"),
            "580.159.04");
}

TEST(NvmlText, NoVersionGivesEmpty) {
  EXPECT_EQ(DriverVersionOfLine(""), "");
  EXPECT_EQ(DriverVersionOfLine("NVRM version: something else 580.1"), "");
  EXPECT_EQ(DriverVersionOfLine("NVIDIA UNIX Open Kernel Module for x86_64"), "");
  EXPECT_EQ(DriverVersionOfLine("Kernel Module"), "");
  EXPECT_EQ(DriverVersionOfLine("Kernel Module   "), "");
}

TEST(NvmlText, UuidText) {
  std::string raw = {'\x3d', '\x02', '\xab', '\x42', '\x8e', '\xcc', '\x4e', '\xcf',
                     '\x97', '\xa1', '\x9a', '\x47', '\x36', '\x1b', '\x5b', '\x75'};
  EXPECT_EQ(NvmlUuidText(raw), "GPU-3d02ab42-8ecc-4ecf-97a1-9a47361b5b75");
}

}  // namespace
}  // namespace smolvm
