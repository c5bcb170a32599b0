#include "serve/admission.h"

#include <algorithm>

#include "serve/errors.h"

namespace smolvm::serve {

namespace {
std::string Mib(int64_t v) { return std::to_string(v) + " MiB"; }
}  // namespace

Status Admission::AdmitPool(const Tenant& t, const TenantUsage& u, const Pool& p, int64_t free_gpu_mib) {
  int64_t machines = 1 + p.min_ready;
  int64_t need = p.spec.cuda ? machines * p.gpu_mem_mib : 0;
  if (t.max_gpu_mib > 0 && u.gpu_mib + need > t.max_gpu_mib)
    return QuotaExceeded("pool '" + p.name + "' needs " + Mib(need) + " (golden + " + std::to_string(p.min_ready) +
                         " ready clones at " + Mib(p.gpu_mem_mib) + "); tenant '" + t.name + "' holds " + Mib(u.gpu_mib) +
                         " of its " + Mib(t.max_gpu_mib));
  if (need > 0 && free_gpu_mib >= 0 && need > free_gpu_mib)
    return Unavailable("pool '" + p.name + "' needs " + Mib(need) + " (golden + " + std::to_string(p.min_ready) +
                       " ready clones at " + Mib(p.gpu_mem_mib) + "), " + Mib(free_gpu_mib) + " free on the device");
  return Status::Ok();
}

Status Admission::AdmitLease(const Tenant& t, const TenantUsage& u, int64_t k) {
  if (t.max_leases > 0 && u.leased_clones + k > t.max_leases)
    return QuotaExceeded("tenant '" + t.name + "' holds " + std::to_string(u.leased_clones) + " leased clones of its " +
                         std::to_string(t.max_leases) + "; " + std::to_string(k) + " more do not fit");
  return Status::Ok();
}

int64_t Admission::RefillAllowance(const Tenant& t, const TenantUsage& u, const Pool& p, const PoolCounts& c,
                                   int64_t free_gpu_mib, std::string* why) {
  if (p.draining) return 0;
  int64_t lack = std::max<int64_t>(0, p.min_ready - c.parked - c.forking);
  int64_t n = lack;
  std::string reason;
  if (p.max > 0) {
    int64_t room = std::max<int64_t>(0, p.max - c.parked - c.forking - c.leased);
    if (room < n) {
      n = room;
      reason = "the pool is at its max of " + std::to_string(p.max) + " (" + std::to_string(c.leased) + " leased)";
    }
  }
  if (p.spec.cuda && p.gpu_mem_mib > 0) {
    if (t.max_gpu_mib > 0) {
      int64_t fit = std::max<int64_t>(0, (t.max_gpu_mib - u.gpu_mib) / p.gpu_mem_mib);
      if (fit < n) {
        n = fit;
        reason = "tenant '" + t.name + "' holds " + Mib(u.gpu_mib) + " of its " + Mib(t.max_gpu_mib) + " GPU quota";
      }
    }
    if (free_gpu_mib >= 0) {
      int64_t fit = free_gpu_mib / p.gpu_mem_mib;
      if (fit < n) {
        n = fit;
        reason = "a clone needs " + Mib(p.gpu_mem_mib) + ", " + Mib(free_gpu_mib) + " free on the device";
      }
    }
  }
  if (why != nullptr) *why = n < lack ? reason : "";
  return n;
}

}  // namespace smolvm::serve
