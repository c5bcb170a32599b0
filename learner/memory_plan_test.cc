// The learner's device memory plan (issue 18): what a 7B 4-bit DPO clone
// holds, and the arena's groups laid out without overlap inside a group.
#include "learner/memory_plan.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace smolvm::learner {
namespace {

constexpr double kMiB = 1 << 20;

MemoryPlan Qwen7bDpo(bool compact) {
  ModelConfig cfg = Preset("qwen2.5-7b").value();
  LoraLayout layout = MakeLoraLayout(cfg, 16, 16);
  // DPO 2 pairs x 256, packed: 2 rows of 256 + a completion slot, 16 scored tokens.
  return PlanLearnerMemory(cfg, layout, /*nf4=*/true, StepShape{2, 260, 16}, compact);
}

TEST(MemoryPlan, Qwen7bDpoCloneBreakdown) {
  MemoryPlan before = Qwen7bDpo(false), compact = Qwen7bDpo(true);
  const size_t n = 40370176;  // LoRA r 16 on 7 projections x 28 layers
  EXPECT_EQ(before.Get("lora").count, n);
  EXPECT_EQ(before.Get("grad").bytes(), n * 4);
  EXPECT_EQ(before.Get("lora16").bytes(), n * 2);
  EXPECT_LT(compact.Get("grad").bytes(), n * 4 / 27);  // one layer of 28
  EXPECT_LT(compact.Get("lora16").bytes(), n * 2 / 27);
  EXPECT_EQ(before.Get("ckpt").bytes(), size_t{29} * 2 * 260 * 3584 * 4);
  EXPECT_EQ(before.Get("dequant").bytes(), size_t{18944} * 3584 * 2);
  EXPECT_EQ(before.Get("logits").bytes(), size_t{16} * 152064 * 4);
  EXPECT_EQ(before.arena_bytes, before.separate_arena_bytes());
  EXPECT_LT(compact.arena_bytes, compact.separate_arena_bytes());
  // The layout before: 1258 MiB private; compact: 993 (the 1278 MiB of
  // private chunks measured before is the former plus chunk rounding).
  EXPECT_NEAR(before.private_bytes() / kMiB, 1258.3, 0.1);
  EXPECT_NEAR(compact.private_bytes() / kMiB, 992.7, 0.1);
  EXPECT_NEAR(compact.frozen_bytes / kMiB, 5580.1, 0.1);
}

TEST(MemoryPlan, ArenaGroupsAreDisjointInsideAndShareTheRange) {
  for (bool compact : {true, false}) {
    MemoryPlan p = Qwen7bDpo(compact);
    std::map<ArenaGroup, std::vector<const PlannedBuffer*>> groups;
    for (const auto* list : {&p.fixed, &p.activations})
      for (const PlannedBuffer& b : *list)
        if (b.group != ArenaGroup::kNone) groups[b.group].push_back(&b);
    ASSERT_EQ(groups.size(), 3u);
    size_t lowest_other = ~size_t{0};
    for (const auto& [g, bufs] : groups) {
      for (const PlannedBuffer* b : bufs) {
        EXPECT_EQ(b->offset % 256, 0u) << b->name;
        EXPECT_LE(b->offset + b->bytes(), p.arena_bytes) << b->name;
        for (const PlannedBuffer* o : bufs)
          if (o != b) {
            EXPECT_TRUE(b->offset + b->bytes() <= o->offset || o->offset + o->bytes() <= b->offset)
                << b->name << " overlaps " << o->name;
          }
        if (g != ArenaGroup::kMlp) lowest_other = std::min(lowest_other, b->offset);
      }
    }
    // Shared: every group starts at the arena's start; apart: after the MLP's.
    EXPECT_EQ(lowest_other == 0, compact);
    EXPECT_EQ(p.Get("dequant").offset, 0u);
  }
}

// `smolvm-learner memory` prints the plan for a configuration (no GPU, no
// model files); bad input exits 2 naming it.
TEST(MemoryPlan, TheMemorySubcommandPrintsIt) {
  auto run = [](const std::string& args, int* rc) {
    std::string cmd = std::string(SMOLVM_LEARNER_BIN) + " memory " + args + " 2>&1";
    FILE* f = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (f && std::fgets(buf, sizeof buf, f)) out += buf;
    int st = f ? pclose(f) : -1;
    *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
  };
  int rc = -1;
  auto j = nlohmann::json::parse(run("--preset qwen2.5-7b --load-in-4bit --method dpo --batch 2 --maxseq 256 --json", &rc));
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(j["private_bytes"].get<size_t>(), Qwen7bDpo(true).private_bytes()) << j.dump();
  EXPECT_EQ(j["scored"], 16);
  std::string table = run("--load-in-4bit --separate", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(table.find("private (each clone) 1258.3 MiB"), std::string::npos) << table;
  std::string bad = run("--maxseq 5", &rc);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(bad.find("--maxseq 5 is below the shortest example"), std::string::npos) << bad;
}

}  // namespace
}  // namespace smolvm::learner
