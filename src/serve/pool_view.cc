#include "serve/pool_view.h"

namespace smolvm::serve {

nlohmann::json PoolView(const Pool& p, const PoolCounts& counts, const nlohmann::json& refill) {
  return {{"name", p.name},
          {"tenant", p.tenant},
          {"golden", ToJson(p.spec)},
          {"golden_machine", p.golden},
          {"generation", p.generation},
          {"min_ready", p.min_ready},
          {"max", p.max},
          {"share", p.share},
          {"cpus", p.cpus},
          {"mem_mib", p.mem_mib},
          {"gpu_mem_mib", p.gpu_mem_mib},
          {"ttl_s", p.ttl_s},
          {"draining", p.draining},
          {"ready", counts.parked},
          {"forking", counts.forking},
          {"leased", counts.leased},
          {"detail", p.detail},
          {"refill", refill},
          {"created_at", p.created_at}};
}

}  // namespace smolvm::serve
