#include "bench/census.h"

#include <filesystem>

#include "bench/table.h"

namespace smolvm::bench {

std::string FormatCensus(const std::vector<LoadedResult>& runs) {
  std::vector<TableRow> rows;
  int total = 0;
  for (const auto& lr : runs) {
    const RunResult& r = lr.result;
    std::string lids;
    for (const auto& l : r.learners)
      if (l.loss_nan) lids += (lids.empty() ? "" : ",") + l.lid;
    int k = NanLearners(r);
    total += k;
    rows.push_back({std::filesystem::path(lr.path).filename().string(), r.arm,
                    r.arm == "native" ? "-" : r.share_mode, std::to_string(r.n),
                    std::to_string(r.learners_done) + "/" + std::to_string(r.learners_expected), std::to_string(k),
                    lids.empty() ? "-" : lids});
  }
  std::string out = RenderTable({"run", "arm", "share", "N", "done", "nan", "nan lids"}, rows, false, 3);
  return out + "total nan learners: " + std::to_string(total) + "\n";
}

}  // namespace smolvm::bench
