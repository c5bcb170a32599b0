// WorkerUids: the unprivileged uids the daemon's workers drop to, one per
// tenant, so a compromised worker cannot signal or ptrace another tenant's
// (docs/threat-model.md). A tenant is a machine with the clones forked from
// it (its key: the golden machine's name), or the daemon's own socket (key
// ""). Uids come from [base, base + count); gid = uid; a uid goes back to
// the free list when the last worker holding it has exited, and one that
// some process already runs as is skipped.
//
// Owned by the daemon's loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "base/status.h"

namespace smolvm {

// The /proc scan behind WorkerUids' default InUse.
bool UidRunsAnyProcess(uint32_t uid);

inline constexpr uint32_t kDefaultWorkerUidBase = 2100000000u;
inline constexpr uint32_t kDefaultWorkerUidCount = 4096;

class WorkerUids {
 public:
  // True when some process runs as `uid` (real, effective, saved or fs).
  using InUse = std::function<bool(uint32_t uid)>;

  // base 0: workers keep the daemon's uid (Acquire returns 0). A uid some
  // process already runs as (another daemon's tenant, a host user in the
  // range) is never handed out; `in_use` defaults to a scan of /proc.
  WorkerUids(uint32_t base = 0, uint32_t count = kDefaultWorkerUidCount, InUse in_use = nullptr)
      : base_(base), count_(count), in_use_(in_use ? std::move(in_use) : InUse(UidRunsAnyProcess)) {}

  // OK when uids are off, or the daemon is root and [base, base + count) is
  // mapped in its user namespace (uid_map and gid_map are the files'
  // contents; "" reads /proc/self/{uid,gid}_map).
  Status Check(const std::string& uid_map = "", const std::string& gid_map = "") const;
  bool enabled() const { return base_ != 0; }

  // The tenant's uid (taking a reference), or 0 when off. kUnavailable when
  // every uid of the range is held.
  Result<uint32_t> Acquire(const std::string& tenant);
  // Drops one reference taken by Acquire (uid 0 is ignored). True when that
  // was the uid's last: it is free again.
  bool Release(uint32_t uid);
  // The uid a tenant holds now, 0 if none.
  uint32_t Find(const std::string& tenant) const;

 private:
  struct Entry {
    std::string tenant;
    int refs = 0;
  };
  uint32_t base_, count_;
  InUse in_use_;
  std::map<std::string, uint32_t> by_tenant_;
  std::map<uint32_t, Entry> by_uid_;
  uint32_t next_ = 0;  // offsets below it were handed out once
  std::set<uint32_t> free_;
};

// True when every id of [first, first + count) is inside one line of a
// /proc/<pid>/{uid,gid}_map ("inside-first outside-first count" lines).
bool IdRangeMapped(const std::string& map, uint32_t first, uint32_t count);

}  // namespace smolvm
