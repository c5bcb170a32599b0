// DPO and SFT losses on per-row completion log-probabilities, with their
// gradients with respect to those log-probabilities.
#pragma once

#include <vector>

#include "learner/data.h"

namespace smolvm::learner {

struct LossGrad {
  float loss = 0;
  std::vector<float> dlogp;  // per row of the batch
};

// Rows [0, n) chosen, [n, 2n) rejected. loss = mean_i -log sigmoid(beta *
// ((pc - rc) - (pr - rr))); at policy == reference it is ln 2.
LossGrad DpoLoss(const std::vector<float>& policy, const std::vector<float>& ref, float beta);
// Mean negative log-likelihood per completion token.
LossGrad SftLoss(const std::vector<float>& policy, const Batch& b);

}  // namespace smolvm::learner
