#include "learner/print_batches.h"

#include <nlohmann/json.hpp>
#include <string>

#include "learner/data.h"

namespace smolvm::learner {

Status PrintBatches(const BatchesOptions& o, FILE* out) {
  if (o.steps < 1 || o.batch < 1) return InvalidArgument("--steps and --batch must be at least 1");
  PreferenceData data(o.seed, o.lid);
  for (int step = 0; step < o.steps; ++step) {
    Result<Batch> b = o.method == Method::kDpo ? MakeDpoBatch(data, o.batch, o.maxseq, o.packed)
                                               : MakeSftBatch(data, o.batch, o.maxseq);
    if (!b.ok()) return b.status();
    nlohmann::json j = {{"lid", o.lid},
                        {"step", step},
                        {"rows", b->rows},
                        {"seq", b->seq},
                        {"prefix", b->prefix},
                        {"segment", b->segment},
                        {"positions", b->positions},
                        {"tokens", b->tokens},
                        {"score_pos", b->score_pos},
                        {"score_target", b->score_target},
                        {"score_example", b->score_example}};
    std::string line = j.dump() + "\n";
    if (std::fputs(line.c_str(), out) < 0) return ErrnoStatus("cannot write the batches", errno);
  }
  return Status::Ok();
}

}  // namespace smolvm::learner
