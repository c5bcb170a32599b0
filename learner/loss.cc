#include "learner/loss.h"

#include <cmath>

namespace smolvm::learner {

LossGrad DpoLoss(const std::vector<float>& policy, const std::vector<float>& ref, float beta) {
  int n = static_cast<int>(policy.size()) / 2;
  LossGrad r;
  r.dlogp.assign(policy.size(), 0.0f);
  double total = 0;
  for (int i = 0; i < n; ++i) {
    float z = beta * ((policy[i] - ref[i]) - (policy[n + i] - ref[n + i]));
    // -log sigmoid(z) = softplus(-z), computed stably.
    total += std::log1p(std::exp(-std::fabs(z))) + std::fmax(-z, 0.0f);
    float sig_neg = 1.0f / (1.0f + std::exp(z));  // sigmoid(-z)
    r.dlogp[i] = -beta * sig_neg / n;
    r.dlogp[n + i] = beta * sig_neg / n;
  }
  r.loss = static_cast<float>(total / n);
  return r;
}

LossGrad SftLoss(const std::vector<float>& policy, const Batch& b) {
  LossGrad r;
  int tokens = b.CompletionTokens();
  r.dlogp.assign(policy.size(), -1.0f / tokens);
  double total = 0;
  for (float p : policy) total -= p;
  r.loss = static_cast<float>(total / tokens);
  return r;
}

}  // namespace smolvm::learner
