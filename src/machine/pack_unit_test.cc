// The pack format: manifest round trip, what older and newer readers accept,
// and digests, on packs made with mkfs.erofs (the default: a private mount
// namespace, so root or user namespaces) and mksquashfs.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "machine/pack.h"
#include "machine/pack_mount.h"

namespace smolvm::machine {
namespace {

namespace fs = std::filesystem;

class PackFormatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/smolvm-pack-XXXXXX";
    dir_ = mkdtemp(tmpl);
    fs::create_directories(dir_ + "/tree/app");
    std::ofstream(dir_ + "/tree/app/hello.txt") << "hello";
    PackCreateOptions o;
    o.from = dir_ + "/tree";
    o.out = dir_ + "/t.smolmachine";
    o.command = {"cat", "/app/hello.txt"};
    o.env = {"A=1"};
    o.created_by = "smolvm test";
    auto m = CreatePack(o);
    if (!m.ok() && m.status().code() == static_cast<int32_t>(Code::kNotFound))
      GTEST_SKIP() << m.status().message();
    ASSERT_TRUE(m.ok()) << m.status().message();
    pack_ = o.out;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Rewrites the manifest (and the header's digest of it) as `edit` says.
  void EditManifest(const std::function<void(nlohmann::json&)>& edit) {
    auto m = ReadPack(pack_);
    ASSERT_TRUE(m.ok());
    auto j = nlohmann::json::parse(ManifestToJson(*m));
    edit(j);
    std::string text = j.dump();
    std::string bytes;
    {
      std::ifstream in(pack_, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    ASSERT_LE(text.size(), kPackManifestMax);
    std::fill(bytes.begin() + kPackHeaderSize, bytes.begin() + kPackImageOffset, '\0');
    std::copy(text.begin(), text.end(), bytes.begin() + kPackHeaderSize);
    for (int i = 0; i < 4; ++i) bytes[12 + i] = static_cast<char>(text.size() >> (8 * i));
    // The header's digest of the manifest, through the library's own hash.
    std::string mf = dir_ + "/manifest";
    std::ofstream(mf, std::ios::binary) << text;
    int fd = ::open(mf.c_str(), O_RDONLY);
    auto hex = Sha256Range(fd, 0, text.size());
    ::close(fd);
    ASSERT_TRUE(hex.ok());
    for (int i = 0; i < 32; ++i) bytes[16 + i] = static_cast<char>(std::stoi(hex->substr(2 * i, 2), nullptr, 16));
    std::ofstream(pack_, std::ios::binary | std::ios::trunc) << bytes;
  }

  std::string dir_, pack_;
};

// An erofs superblock (magic E0F5E1E2 at byte 1024 of the image).
bool HasErofsMagic(const std::string& pack, uint64_t offset) {
  std::ifstream in(pack, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset + 1024));
  unsigned char b[4] = {};
  in.read(reinterpret_cast<char*>(b), 4);
  return b[0] == 0xe2 && b[1] == 0xe1 && b[2] == 0xf5 && b[3] == 0xe0;
}

std::vector<std::string> Leftovers(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.find(".tmp.") != std::string::npos || n.find(".stage.") != std::string::npos ||
        n.find(".shift") != std::string::npos || n.find(".copy.") != std::string::npos)
      out.push_back(n);
  }
  return out;
}

TEST_F(PackFormatTest, ManifestRoundTripsAndTheImageVerifies) {
  auto m = VerifyPack(pack_);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->format_version, 2) << "erofs packs are format 2";
  EXPECT_EQ(m->image_type, "erofs");
  EXPECT_TRUE(HasErofsMagic(pack_, m->image_offset));
  EXPECT_EQ(m->image_offset, kPackImageOffset);
  EXPECT_EQ(m->image_offset % kPackAlign, 0u);
  EXPECT_EQ(m->image_offset + m->image_size, fs::file_size(pack_));
  EXPECT_EQ(m->command, (std::vector<std::string>{"cat", "/app/hello.txt"}));
  EXPECT_EQ(m->env, std::vector<std::string>{"A=1"});
  EXPECT_EQ(m->workdir, "/workspace");
  EXPECT_EQ(m->created_by, "smolvm test");
  EXPECT_TRUE(m->model.empty());
  auto again = ManifestFromJson(ManifestToJson(*m));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(ManifestToJson(*again), ManifestToJson(*m));
}

TEST_F(PackFormatTest, UnknownKeysAreIgnoredSoLaterWritersStayReadable) {
  EditManifest([](nlohmann::json& j) {
    j["verity"] = {{"root", "abc"}};
    j["image"]["compression"] = "lz4";
  });
  auto m = VerifyPack(pack_);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->command[0], "cat");
}

TEST_F(PackFormatTest, ANewerMajorFormatIsRefusedByName) {
  EditManifest([](nlohmann::json& j) { j["format_version"] = kPackFormatVersion + 1; });
  auto m = ReadPack(pack_);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("newer than this smolvm reads"), std::string::npos) << m.status().message();
}

TEST_F(PackFormatTest, AManifestEditedWithoutItsDigestIsCorrupt) {
  std::fstream f(pack_, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(kPackHeaderSize + 5);
  f.put('#');
  f.close();
  auto m = ReadPack(pack_);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), static_cast<int32_t>(Code::kMalformed));
  EXPECT_NE(m.status().message().find("digest"), std::string::npos) << m.status().message();
}

TEST_F(PackFormatTest, AFlippedImageByteFailsVerifyButNotInspect) {
  std::fstream f(pack_, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(kPackImageOffset + 100));
  char c = 0;
  f.read(&c, 1);
  f.seekp(static_cast<std::streamoff>(kPackImageOffset + 100));
  f.put(static_cast<char>(c ^ 0x40));
  f.close();
  EXPECT_TRUE(ReadPack(pack_).ok());
  auto m = VerifyPack(pack_);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("is corrupt"), std::string::npos) << m.status().message();
}

TEST_F(PackFormatTest, SquashfsPacksStayFormat1SoOlderReadersReadThem) {
  PackCreateOptions o;
  o.from = dir_ + "/tree";
  o.out = dir_ + "/s.smolmachine";
  o.image_type = "squashfs";
  auto m = CreatePack(o);
  if (!m.ok() && m.status().code() == static_cast<int32_t>(Code::kNotFound)) GTEST_SKIP() << m.status().message();
  ASSERT_TRUE(m.ok()) << m.status().message();
  auto v = VerifyPack(o.out);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->format_version, 1);
  EXPECT_EQ(v->image_type, "squashfs");
  std::ifstream in(o.out, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(v->image_offset));
  char magic[4] = {};
  in.read(magic, 4);
  EXPECT_EQ(std::string(magic, 4), "hsqs");
}

// mkfs.erofs writes at offset 0; the image is moved to the offset by
// FALLOC_FL_INSERT_RANGE where the filesystem has it (ext4 under /tmp) and
// copied where it does not (tmpfs): both verify, and nothing is left.
TEST_F(PackFormatTest, AnErofsImageLandsAtItsOffsetOnEveryFilesystem) {
  for (std::string where : {dir_, std::string("/dev/shm")}) {
    if (!fs::is_directory(where)) continue;
    char tmpl[] = "/smolvm-pack-XXXXXX";
    std::string out_dir = where + tmpl;
    ASSERT_NE(mkdtemp(out_dir.data()), nullptr) << out_dir;
    PackCreateOptions o;
    o.from = dir_ + "/tree";
    o.extra_sources = {dir_ + "/tree/app/hello.txt"};  // a file at the root, bind-mounted onto its stage
    o.out = out_dir + "/e.smolmachine";
    auto m = CreatePack(o);
    ASSERT_TRUE(m.ok()) << where << ": " << m.status().message();
    auto v = VerifyPack(o.out);
    ASSERT_TRUE(v.ok()) << where << ": " << v.status().message();
    EXPECT_EQ(v->image_offset, kPackImageOffset);
    EXPECT_TRUE(HasErofsMagic(o.out, v->image_offset)) << where;
    EXPECT_EQ(v->image_size % 4096, 0u);
    EXPECT_EQ(Leftovers(out_dir), std::vector<std::string>{}) << where;
    fs::remove_all(out_dir);
  }
}

TEST_F(PackFormatTest, AMissingImageToolIsNotFoundAndLeavesNothing) {
  for (std::string type : {"erofs", "squashfs"}) {
    PackCreateOptions o;
    o.from = dir_ + "/tree";
    o.out = dir_ + "/n.smolmachine";
    o.image_type = type;
    o.mkfs_erofs = o.mksquashfs = "/nonexistent/tool";
    auto m = CreatePack(o);
    ASSERT_FALSE(m.ok()) << type;
    EXPECT_EQ(m.status().code(), static_cast<int32_t>(Code::kNotFound)) << m.status().message();
    EXPECT_NE(m.status().message().find(type == "erofs" ? "erofs-utils" : "squashfs-tools"), std::string::npos)
        << m.status().message();
    EXPECT_FALSE(fs::exists(o.out));
    EXPECT_EQ(Leftovers(dir_), std::vector<std::string>{}) << type;
  }
  PackCreateOptions o;
  o.from = dir_ + "/tree";
  o.out = dir_ + "/n.smolmachine";
  o.image_type = "ext4";
  auto m = CreatePack(o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("not one of erofs, squashfs"), std::string::npos) << m.status().message();
}

void FlipImageByte(const std::string& pack) {
  std::fstream f(pack, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(kPackImageOffset + 100));
  char c = 0;
  f.read(&c, 1);
  f.seekp(static_cast<std::streamoff>(kPackImageOffset + 100));
  f.put(static_cast<char>(c ^ 0x40));
}

TEST_F(PackFormatTest, AnUnchangedPackIsHashedOnceAndAnyWriteMeansHashingAgain) {
  if (::geteuid() != 0) GTEST_SKIP() << "a pack in use must be root's";
  std::string home = dir_ + "/home";
  bool rehashed = false;
  auto m = VerifyPackForUse(home, pack_, -1, &rehashed);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(rehashed);
  m = VerifyPackForUse(home, pack_, -1, &rehashed);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_FALSE(rehashed) << "unchanged since it was verified";
  // A byte flipped with the mtime put back: the ctime moved, so it is hashed
  // again and the flip caught.
  struct stat before;
  ASSERT_EQ(::stat(pack_.c_str(), &before), 0);
  FlipImageByte(pack_);
  struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, pack_.c_str(), times, 0), 0);
  m = VerifyPackForUse(home, pack_, -1, &rehashed);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("is corrupt"), std::string::npos) << m.status().message();
  FlipImageByte(pack_);
  m = VerifyPackForUse(home, pack_, -1, &rehashed);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(rehashed);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(home + "/packs/.verified")) entries += e.is_regular_file();
  EXPECT_EQ(entries, 1) << "one entry per file";
  // Writable by someone other than root: refused, hashed or not.
  ASSERT_EQ(::chmod(pack_.c_str(), 0664), 0);
  m = VerifyPackForUse(home, pack_, -1, &rehashed);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), static_cast<int32_t>(Code::kInvalidArgument));
  EXPECT_NE(m.status().message().find("mode 0664"), std::string::npos) << m.status().message();
  ASSERT_EQ(::chmod(pack_.c_str(), 0644), 0);
  ASSERT_EQ(::chown(pack_.c_str(), 4242, 0), 0);
  m = VerifyPackForUse(home, pack_, -1, &rehashed);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("owned by uid 4242"), std::string::npos) << m.status().message();
}

TEST_F(PackFormatTest, BadInputsNameTheProblem) {
  PackCreateOptions o;
  o.from = dir_ + "/missing";
  o.out = dir_ + "/y.smolmachine";
  auto m = CreatePack(o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("is not a directory"), std::string::npos);
  o.from = dir_ + "/tree";
  o.model = dir_ + "/tree/app";  // lands at /app, which --from has
  m = CreatePack(o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("already has"), std::string::npos) << m.status().message();
  EXPECT_FALSE(fs::exists(o.out));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temporary left: " << e.path();
}

}  // namespace
}  // namespace smolvm::machine
