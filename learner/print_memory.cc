#include "learner/print_memory.h"

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>

#include "learner/data.h"
#include "learner/memory_plan.h"
#include "learner/model_config.h"

namespace smolvm::learner {

Status PrintMemory(const MemoryOptions& o, FILE* out) {
  if (o.steps < 1 || o.batch < 1 || o.lora_r < 1) return InvalidArgument("--steps, --batch and --lora-r must be at least 1");
  if (o.maxseq < MinSeqLen())
    return InvalidArgument("--maxseq " + std::to_string(o.maxseq) + " is below the shortest example (" +
                           std::to_string(MinSeqLen()) + ")");
  ASSIGN_OR_RETURN(ModelConfig cfg, o.model.empty() ? Preset(o.preset) : ReadConfig(o.model));
  LoraLayout layout = MakeLoraLayout(cfg, o.lora_r, o.lora_alpha);
  StepShape most;
  auto see = [&](PreferenceData& data) -> Status {
    Result<Batch> b = o.method == Method::kDpo ? MakeDpoBatch(data, o.batch, o.maxseq, o.prefix_sharing)
                                               : MakeSftBatch(data, o.batch, o.maxseq);
    if (!b.ok()) return b.status();
    most.rows = std::max(most.rows, b->rows);
    most.seq = std::max(most.seq, b->seq);
    most.scored = std::max(most.scored, b->CompletionTokens());
    return Status::Ok();
  };
  PreferenceData warm(o.seed, -2), data(o.seed, o.lid);
  RETURN_IF_ERROR(see(warm));
  for (int s = 0; s < o.steps; ++s) RETURN_IF_ERROR(see(data));
  MemoryPlan plan = PlanLearnerMemory(cfg, layout, o.load_in_4bit, most, !o.separate);
  std::string text;
  if (o.json) {
    nlohmann::json buffers = nlohmann::json::array();
    for (const auto* list : {&plan.fixed, &plan.activations})
      for (const PlannedBuffer& b : *list)
        buffers.push_back({{"name", b.name}, {"bytes", b.bytes()}, {"arena", b.group != ArenaGroup::kNone}});
    nlohmann::json j = {{"rows", most.rows},          {"seq", most.seq},
                        {"scored", most.scored},      {"lora_params", layout.total},
                        {"arena_bytes", plan.arena_bytes}, {"arena_buffers_apart_bytes", plan.separate_arena_bytes()},
                        {"private_bytes", plan.private_bytes()}, {"frozen_bytes", plan.frozen_bytes},
                        {"compact", plan.compact}, {"buffers", buffers}};
    text = j.dump() + "\n";
  } else {
    char head[256];
    std::snprintf(head, sizeof head, "batch shape: %d rows x %d tokens, %d scored positions; LoRA %zu params (r %d)\n",
                  most.rows, most.seq, most.scored, layout.total, o.lora_r);
    text = head + FormatMemoryPlan(plan);
  }
  if (std::fputs(text.c_str(), out) < 0) return ErrnoStatus("cannot write the memory plan", errno);
  return Status::Ok();
}

}  // namespace smolvm::learner
