// Admission: whether a pool, a refill or a lease fits, and if not, the
// refusal naming the figures (as `machine fork` does: "needs X MiB, Y free").
// Pure functions over the figures the managers pass in, so each rule is
// tested alone.
//
//   tenant quota   leases: clones leased at once <= max_leases (429)
//                  GPU MiB: the tenant's goldens and clones x gpu_mem <= max_gpu_mib (429)
//   pool max       ready + forking + leased <= max (refill stops there)
//   device         a CUDA pool's golden + min_ready clones x gpu_mem <= free MiB (503)
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "serve/model.h"

namespace smolvm::serve {

struct TenantUsage {
  int64_t leased_clones = 0;  // clones held by its leases now
  int64_t machines = 0;       // its goldens and clones (parked, forking, leased)
  int64_t gpu_mib = 0;        // their gpu_mem_mib summed
};

struct PoolCounts {
  int64_t parked = 0, forking = 0, leased = 0;
};

class Admission {
 public:
  // A new pool (or a replaced golden): its golden and min_ready clones.
  static Status AdmitPool(const Tenant& t, const TenantUsage& u, const Pool& p, int64_t free_gpu_mib);
  // k more clones leased by tenant t.
  static Status AdmitLease(const Tenant& t, const TenantUsage& u, int64_t k);
  // How many clones a refill of pool p may fork now (>= 0), and why not
  // more when it is fewer than the pool lacks (*why, may be null).
  static int64_t RefillAllowance(const Tenant& t, const TenantUsage& u, const Pool& p, const PoolCounts& c,
                                 int64_t free_gpu_mib, std::string* why);
};

}  // namespace smolvm::serve
