#include "bench/control_check.h"

#include <cstdio>
#include <cstring>
#include <sstream>

namespace smolvm::bench {

std::vector<CloneFork> ParseForkLines(const std::string& log) {
  std::vector<CloneFork> out;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    size_t at = line.find("fork: clone ");
    if (at == std::string::npos) continue;
    CloneFork c;
    unsigned pid = 0;
    long long shared = 0, priv = 0;
    // "clone <idx> of golden pid <pid> (<k> of <n> attached) shared=...";
    // daemons before issue 18 wrote "clone <idx> of <pid> shared=...".
    const char* rest = line.c_str() + at;
    if (std::sscanf(rest, "fork: clone %d of golden pid %u", &c.index, &pid) != 2 &&
        std::sscanf(rest, "fork: clone %d of %u", &c.index, &pid) != 2)
      continue;
    const char* fields = std::strstr(rest, " shared=");
    if (fields == nullptr || std::sscanf(fields, " shared=%lld private=%lld shared_mib=%lf private_mib=%lf ms=%lf",
                                         &shared, &priv, &c.shared_mib, &c.private_mib, &c.ms) != 5)
      continue;
    c.shared_chunks = shared;
    c.private_chunks = priv;
    // Newer daemons add " build_ms=<t> preloaded=<k> waited_ms=<w>".
    if (const char* b = std::strstr(line.c_str() + at, " build_ms=")) std::sscanf(b, " build_ms=%lf", &c.build_ms);
    if (const char* p = std::strstr(line.c_str() + at, " preloaded=")) {
      long long k = -1;
      if (std::sscanf(p, " preloaded=%lld", &k) == 1) c.preloaded = k;
    }
    out.push_back(c);
  }
  return out;
}

std::string ControlVerdict(const std::string& share, const std::vector<CloneFork>& clones, int expected) {
  if (static_cast<int>(clones.size()) < expected)
    return "!! NO FORK LINES: the daemon logged " + std::to_string(clones.size()) + " of " + std::to_string(expected) +
           " clones";
  int64_t shared = 0;
  for (const auto& c : clones) shared += c.shared_chunks;
  if (share == "off" && shared > 0)
    return "!! CONTROL FAILED: asked for copy mode but the daemon shared " + std::to_string(shared) + " chunks";
  if (share != "off" && shared == 0) return "!! SHARING DID NOT ENGAGE: asked to share but the daemon shared 0 chunks";
  return "ok";
}

}  // namespace smolvm::bench
