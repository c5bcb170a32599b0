// `bench census`: nan learners per run (a loss that is null or not finite),
// ending with the line "total nan learners: <k>".
#pragma once

#include <string>
#include <vector>

#include "bench/results.h"

namespace smolvm::bench {

std::string FormatCensus(const std::vector<LoadedResult>& runs);

}  // namespace smolvm::bench
