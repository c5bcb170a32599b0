// Descriptors as a budgeted resource, like device memory (issue 29). The
// daemon holds one descriptor per chunk of a golden it exported ahead of
// forks (fork_ahead.cc), and one more per chunk for each fork in flight (the
// manifest's, or the ahead export's duplicated; sent on with every
// CloneBuild). Uncapped, one tenant's goldens took every descriptor of the
// daemon: another machine's Hello hung and `cuda status` timed out.
//
// So each such set is charged to its tenant before the daemon takes it, and
// refused past a cap per tenant (--max-fds-per-machine) and a cap over the
// daemon (--max-fds, below RLIMIT_NOFILE with room for its sockets, links
// and pidfds). A tenant is a machine ("machine 'a'", clones charged to their
// golden's), or on the daemon's own socket a peer uid ("uid 1000").
//
// Daemon loop thread only. A Charge returns its descriptors when it goes; it
// must not outlive its budget (the daemon declares the budget before the
// aheads and fork jobs that hold charges).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "base/status.h"

namespace smolvm {

// --max-fds-per-machine's default. A real golden holds a few hundred chunks
// (64 MiB each: a 7B bf16 golden exported 260 on the H200, a torch 7B golden
// 271 = 228 shared + 43 private); one that fills a 141 GB H200 in 64 MiB
// chunks holds ~2,260, and during its fork the daemon holds its chunks
// twice (the export ahead and the fork's set): ~4,520. 8192 covers that,
// with room for a torch golden whose allocator made many smaller chunks.
inline constexpr size_t kDefaultMaxFdsPerMachine = 8192;

// Raises RLIMIT_NOFILE at the daemon's start: the soft limit to the hard
// one, and as root the hard one too (to fs.nr_open), both at most 2^20 (room
// for every tenant's chunk descriptors under their caps; workers inherit
// it). Returns the soft limit in force.
uint64_t RaiseNoFileLimit();

class DescriptorBudget {
 public:
  // The daemon's budget under a soft RLIMIT_NOFILE of `nofile`: `reserve`
  // kept for what is not a chunk descriptor (sockets, links, pidfds), the
  // rest the cap over the daemon unless `max_fds` (--max-fds) names one.
  static std::unique_ptr<DescriptorBudget> ForDaemon(uint64_t nofile, size_t reserve, size_t per_tenant,
                                                     size_t max_fds);

  // REQUIRES: per_tenant <= total.
  DescriptorBudget(size_t per_tenant, size_t total) : per_tenant_(per_tenant), total_(total) {}
  DescriptorBudget(const DescriptorBudget&) = delete;
  DescriptorBudget& operator=(const DescriptorBudget&) = delete;

  class Charge {
   public:
    Charge() = default;
    Charge(Charge&& o) noexcept { *this = std::move(o); }
    Charge& operator=(Charge&& o) noexcept;
    ~Charge() { Return(); }
    size_t count() const { return n_; }
    // Gives the descriptors back now.
    void Return();

   private:
    friend class DescriptorBudget;
    DescriptorBudget* budget_ = nullptr;
    std::string tenant_;
    size_t n_ = 0;
  };

  // Charges n descriptors to `tenant`, or refuses (kUnavailable) with a
  // message naming the tenant, what it would hold, the cap and its flag.
  Result<Charge> Take(const std::string& tenant, size_t n);

  size_t Held(const std::string& tenant) const;
  size_t held() const { return held_; }
  const std::map<std::string, size_t>& by_tenant() const { return by_tenant_; }
  size_t per_tenant() const { return per_tenant_; }
  size_t total() const { return total_; }

 private:
  void Give(const std::string& tenant, size_t n);

  size_t per_tenant_, total_;
  size_t held_ = 0;
  std::map<std::string, size_t> by_tenant_;  // tenants holding any
};

}  // namespace smolvm
