// What a client sees of a pool (GET /v1/pools/NAME and the pool lists): its
// settings, its clone counts and where its refill stands. Built from values
// the caller read under its own lock; takes no lock itself.
#pragma once

#include <nlohmann/json.hpp>

#include "serve/admission.h"
#include "serve/model.h"

namespace smolvm::serve {

nlohmann::json PoolView(const Pool& p, const PoolCounts& counts, const nlohmann::json& refill);

}  // namespace smolvm::serve
