// Cgroups: one cgroup per machine, on cgroup v2 (the GPU machine) or the v1
// hierarchies (this machine and CI), at <hierarchy>/<parent>/<machine> where
// <parent> is $SMOLVM_CGROUP_PARENT or "smolvm".
//
//   v2: cpu.max = "K*100000 100000", cpuset.cpus, memory.max, pids.max
//   v1: cpu/cpu.cfs_quota_us = K*100000 (period 100000), cpuset/cpuset.cpus,
//       memory/memory.limit_in_bytes, pids/pids.max; created in every hierarchy that holds
//       cpu, cpuacct, cpuset, memory or pids.
//
// Host side only (root). Not thread-safe; each call works on the files.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace smolvm::machine {

struct CgroupHierarchy {
  std::string mount_point;  // e.g. /sys/fs/cgroup/cpu, or /sys/fs/cgroup on v2
  std::string controllers;  // v1 mount option, e.g. "cpu,cpuacct"; "" on v2
};

struct CgroupLayout {
  bool v2 = false;
  std::vector<CgroupHierarchy> hierarchies;  // v2: exactly one
};

// Reads /proc/self/mountinfo. Fails when neither layout is usable.
Result<CgroupLayout> DetectCgroups();

struct CgroupLimits {
  double cpus = 0;       // 0 = no quota
  std::string cpuset;    // "" = inherit
  int64_t mem_bytes = 0; // 0 = no limit
  int64_t pids = 0;      // tasks (processes and threads): 0 = no limit
};

class MachineCgroup {
 public:
  // The cgroup of machine `name` (whether or not it exists yet).
  MachineCgroup(const CgroupLayout& layout, const std::string& name);

  // Creates the directories and writes the limits. On failure removes what
  // it made.
  Status Create(const CgroupLimits& limits);
  // Moves process `pid` (all its threads) in, in every hierarchy.
  Status AddProcess(pid_t pid) const;
  // Host pids inside (from the first hierarchy).
  std::vector<pid_t> Pids() const;
  bool Exists() const;
  // SIGKILLs everything inside until it is empty (cgroup.kill on v2), waits
  // up to timeout_ms, then removes the directories. Idempotent.
  Status Destroy(int timeout_ms = 10000) const;
  // Per-hierarchy directories, in layout order.
  const std::vector<std::string>& dirs() const { return dirs_; }

 private:
  CgroupLayout layout_;
  std::string name_;
  std::vector<std::string> dirs_;
};

// The parent directory name under each hierarchy.
std::string CgroupParentName();
// Chooses `count` cores for a new machine: least used by `in_use` (cpusets of
// live machines, "0,1" lists), lowest index first. "" when count is 0.
std::string PickCpuset(int count, const std::vector<std::string>& in_use);

}  // namespace smolvm::machine
