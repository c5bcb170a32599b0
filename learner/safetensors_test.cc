#include "learner/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "learner/model_config.h"
#include "learner/test_util.h"
#include "learner/weights.h"

namespace smolvm::learner {
namespace {

TEST(SafetensorsTest, WriteThenReadBack) {
  std::string d = testing::TempDir("st");
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<TensorSpec> specs = {
      {"a", "F32", {2, 3}, [&](uint8_t* p) { std::memcpy(p, a.data(), 24); }},
      {"b", "BF16", {5}, [](uint8_t* p) { std::memset(p, 7, 10); }},
  };
  ASSERT_TRUE(WriteSafetensors(d + "/x.safetensors", specs).ok());
  auto f = SafetensorsFile::Open(d + "/x.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const TensorView& t = (*f)->tensors().at("a");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(t.data, a.data(), 24), 0);
  EXPECT_EQ((*f)->tensors().at("b").bytes, 10u);
  // 8-byte aligned data start.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 8, 0u);
}

TEST(SafetensorsTest, WeightsAreMappedForHugePageReadahead) {
  // The loader's reading speed rests on this mapping (safetensors.cc,
  // MapForLoading): 2 MiB aligned and MADV_HUGEPAGE ("hg"), so the kernel
  // reads the file into the page cache in 2 MiB folios.
  std::string d = testing::TempDir("sthuge");
  size_t n = (size_t{5} << 20) + 6;
  ASSERT_TRUE(WriteSafetensors(d + "/w.safetensors", {{"w", "U8", {static_cast<int64_t>(n)}, [n](uint8_t* p) {
                                                         for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(i * 7);
                                                       }}})
                  .ok());
  auto f = SafetensorsFile::Open(d + "/w.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const TensorView& w = (*f)->tensors().at("w");
  EXPECT_EQ(w.data[n - 1], static_cast<uint8_t>((n - 1) * 7));
  uintptr_t at = reinterpret_cast<uintptr_t>(w.data);
  std::ifstream smaps("/proc/self/smaps");
  std::string line, flags;
  uintptr_t start = 0, end = 0;
  bool in = false;
  while (std::getline(smaps, line)) {
    unsigned long a, b;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &a, &b) == 2) {  // a mapping's first line
      in = a <= at && at < b;
      if (in) start = a, end = b;
    } else if (in && line.rfind("VmFlags:", 0) == 0) {
      flags = line + " ";
    }
  }
  ASSERT_NE(start, 0u) << "no mapping holds the tensor";
  EXPECT_EQ(start % (size_t{2} << 20), 0u) << std::hex << start;
  EXPECT_GE(end - start, n);
  EXPECT_LT(end - start, n + 4096) << "the alignment slack is given back";
  EXPECT_NE(flags.find(" hg "), std::string::npos) << flags;
}

TEST(SafetensorsTest, RejectsCorruptFiles) {
  std::string d = testing::TempDir("stbad");
  auto write = [&](const std::string& name, const std::string& header, size_t data_bytes) {
    std::ofstream f(d + "/" + name, std::ios::binary);
    uint64_t n = header.size();
    f.write(reinterpret_cast<char*>(&n), 8);
    f << header << std::string(data_bytes, '\0');
  };
  write("short.st", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
  write("shape.st", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", 16);
  write("dtype.st", R"({"a":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}})", 16);
  write("json.st", R"({"a":{"dtype":)", 16);
  write("overlap.st", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16);
  for (const char* n : {"short.st", "shape.st", "dtype.st", "json.st", "overlap.st"}) {
    auto f = SafetensorsFile::Open(d + "/" + n);
    EXPECT_FALSE(f.ok()) << n;
    if (!f.ok()) {
      EXPECT_NE(f.status().message().find("corrupt"), std::string::npos) << f.status().ToString();
    }
  }
  std::ofstream(d + "/tiny.st") << "abc";
  EXPECT_FALSE(SafetensorsFile::Open(d + "/tiny.st").ok());
  EXPECT_FALSE(SafetensorsFile::Open(d + "/absent.st").ok());
}

TEST(SafetensorsTest, ShardsWithIndex) {
  std::string d = testing::TempDir("shard");
  std::vector<TensorSpec> specs;
  for (int i = 0; i < 5; ++i)
    specs.push_back({"t" + std::to_string(i), "BF16", {100}, [i](uint8_t* p) { std::memset(p, i, 200); }});
  ASSERT_TRUE(WriteModelShards(d, specs, 450).ok());
  EXPECT_EQ(access((d + "/model.safetensors.index.json").c_str(), F_OK), 0);
  EXPECT_EQ(access((d + "/model-00003-of-00003.safetensors").c_str(), F_OK), 0);
  auto m = ModelFiles::Open(d);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto t4 = (*m)->Get("t4", "BF16", {100});
  ASSERT_TRUE(t4.ok());
  EXPECT_EQ(t4->data[0], 4);
  EXPECT_FALSE((*m)->Get("t4", "BF16", {99}).ok());
  EXPECT_FALSE((*m)->Get("t9", "BF16", {100}).ok());
}

TEST(SafetensorsTest, TinyModelHasEveryHfTensor) {
  auto cfg = ReadConfig(testing::TinyModel());
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto m = ModelFiles::Open(testing::TinyModel());
  ASSERT_TRUE(m.ok());
  for (const WeightSpec& w : WeightSpecs(*cfg)) EXPECT_TRUE((*m)->Get(w.name, "BF16", w.shape).ok()) << w.name;
  EXPECT_TRUE((*m)->Has("model.layers.1.self_attn.k_proj.bias"));
  EXPECT_TRUE((*m)->Has("lm_head.weight"));
}

TEST(ModelConfigTest, PresetsRoundTripThroughConfigJson) {
  for (const std::string& p : PresetNames()) {
    auto c = Preset(p);
    ASSERT_TRUE(c.ok());
    std::string d = testing::TempDir("cfg");
    std::ofstream(d + "/config.json") << ConfigJson(*c);
    auto r = ReadConfig(d);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->hidden, c->hidden);
    EXPECT_EQ(r->kv_heads, c->kv_heads);
    EXPECT_EQ(r->tied, c->tied);
    EXPECT_EQ(r->rope_theta, c->rope_theta);
  }
  EXPECT_FALSE(Preset("qwen9").ok());
}

}  // namespace
}  // namespace smolvm::learner
