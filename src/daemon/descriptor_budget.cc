#include "daemon/descriptor_budget.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace smolvm {
namespace {

constexpr rlim_t kMostNoFile = 1u << 20;

}  // namespace

uint64_t RaiseNoFileLimit() {
  struct rlimit lim = {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) < 0) return 1024;
  rlim_t want = kMostNoFile;
  if (FILE* f = std::fopen("/proc/sys/fs/nr_open", "r")) {
    unsigned long long nr_open = 0;
    if (std::fscanf(f, "%llu", &nr_open) == 1 && nr_open > 0) want = std::min<rlim_t>(want, nr_open);
    std::fclose(f);
  }
  if (lim.rlim_cur >= want) return lim.rlim_cur;
  struct rlimit up = {want, std::max(want, lim.rlim_max)};
  if (::setrlimit(RLIMIT_NOFILE, &up) == 0) return want;
  up = {std::min(want, lim.rlim_max), lim.rlim_max};  // not root: up to the hard limit
  if (::setrlimit(RLIMIT_NOFILE, &up) == 0) return up.rlim_cur;
  return lim.rlim_cur;
}

std::unique_ptr<DescriptorBudget> DescriptorBudget::ForDaemon(uint64_t nofile, size_t reserve, size_t per_tenant,
                                                              size_t max_fds) {
  if (max_fds == 0) max_fds = nofile > reserve + 1024 ? static_cast<size_t>(nofile) - reserve : 1024;
  return std::make_unique<DescriptorBudget>(std::min(per_tenant, max_fds), max_fds);
}

DescriptorBudget::Charge& DescriptorBudget::Charge::operator=(Charge&& o) noexcept {
  if (this != &o) {
    Return();
    budget_ = o.budget_;
    tenant_ = std::move(o.tenant_);
    n_ = o.n_;
    o.budget_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

void DescriptorBudget::Charge::Return() {
  if (budget_ != nullptr && n_ > 0) budget_->Give(tenant_, n_);
  budget_ = nullptr;
  n_ = 0;
}

Result<DescriptorBudget::Charge> DescriptorBudget::Take(const std::string& tenant, size_t n) {
  const size_t mine = Held(tenant);
  if (mine + n > per_tenant_)
    return Unavailable(tenant + " would hold " + std::to_string(mine + n) +
                       " chunk descriptors in the smolvm daemon (cap " + std::to_string(per_tenant_) +
                       ", --max-fds-per-machine)");
  if (held_ + n > total_)
    return Unavailable("the smolvm daemon would hold " + std::to_string(held_ + n) + " chunk descriptors (cap " +
                       std::to_string(total_) + ", --max-fds), " + std::to_string(n) + " of them for " + tenant);
  Charge c;
  if (n == 0) return c;
  c.budget_ = this;
  c.tenant_ = tenant;
  c.n_ = n;
  by_tenant_[tenant] += n;
  held_ += n;
  return c;
}

size_t DescriptorBudget::Held(const std::string& tenant) const {
  auto it = by_tenant_.find(tenant);
  return it == by_tenant_.end() ? 0 : it->second;
}

void DescriptorBudget::Give(const std::string& tenant, size_t n) {
  auto it = by_tenant_.find(tenant);
  if (it == by_tenant_.end()) return;
  it->second -= std::min(n, it->second);
  held_ -= std::min(n, held_);
  if (it->second == 0) by_tenant_.erase(it);
}

}  // namespace smolvm
