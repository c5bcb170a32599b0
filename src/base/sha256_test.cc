#include "base/sha256.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace smolvm {
namespace {

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(Sha256("abc").size(), kSha256Bytes);
}

TEST(Sha256, FileDigestEqualsDataDigest) {
  char path[] = "/tmp/smolvm-sha-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::string data(3 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  std::ofstream(path, std::ios::binary) << data;
  auto got = Sha256File(path);
  ::unlink(path);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, Sha256Hex(data));
  EXPECT_FALSE(Sha256File("/nonexistent/file").ok());
}

}  // namespace
}  // namespace smolvm

namespace smolvm {
namespace {

TEST(Hex, RoundTripsEveryByteAndNeverThrows) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string hex = HexOfBytes(all);
  EXPECT_EQ(hex.substr(0, 6), "000102");
  EXPECT_EQ(hex.substr(hex.size() - 4), "feff");
  EXPECT_EQ(BytesOfHex(hex), all);
  EXPECT_EQ(BytesOfHex("zz1"), std::string(1, '\0'));  // not hex: 0; odd tail ignored
}

}  // namespace
}  // namespace smolvm
