#include "machine/cgroups.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "machine/spec.h"

namespace smolvm::machine {
namespace {

const char* const kV1Controllers[] = {"cpu", "cpuacct", "cpuset", "memory", "pids"};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

Status WriteFile(const std::string& path, const std::string& value) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  ssize_t w = ::write(fd, value.data(), value.size());
  int err = errno;
  ::close(fd);
  if (w < 0) return ErrnoStatus("write '" + value + "' to " + path, err);
  return Status::Ok();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) < 0 && errno != EEXIST) return ErrnoStatus("mkdir " + path, errno);
  return Status::Ok();
}

// v2: controllers must be enabled in every ancestor's subtree_control. A
// cgroup-namespace root that holds processes cannot enable them (no internal
// processes); then its processes move into a leaf "smolvm-host" first, as
// container runtimes do.
Status EnableV2Controllers(const std::string& dir) {
  std::string avail = ReadFile(dir + "/cgroup.controllers");
  std::string want;
  for (const char* c : {"cpu", "cpuset", "memory", "pids"}) {
    auto have = Split(avail, ' ');
    if (std::find(have.begin(), have.end(), c) != have.end()) want += std::string(" +") + c;
  }
  if (want.empty()) return Status::Ok();
  Status s = WriteFile(dir + "/cgroup.subtree_control", want.substr(1));
  if (s.ok() || s.message().find("Device or resource busy") == std::string::npos) return s;
  std::string leaf = dir + "/smolvm-host";
  RETURN_IF_ERROR(MakeDir(leaf));
  for (const auto& pid : Split(ReadFile(dir + "/cgroup.procs"), '\n'))
    if (!pid.empty()) (void)WriteFile(leaf + "/cgroup.procs", pid);
  return WriteFile(dir + "/cgroup.subtree_control", want.substr(1));
}

}  // namespace

std::string CgroupParentName() {
  const char* p = ::getenv("SMOLVM_CGROUP_PARENT");
  return (p != nullptr && p[0] != '\0') ? p : "smolvm";
}

Result<CgroupLayout> DetectCgroups() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  CgroupLayout v1, v2;
  while (std::getline(in, line)) {
    // id parent major:minor root mount_point options [optional...] - fstype source super_options
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    auto left = Split(line.substr(0, dash), ' ');
    auto right = Split(line.substr(dash + 3), ' ');
    if (left.size() < 5 || right.size() < 3) continue;
    const std::string& mount_point = left[4];
    if (right[0] == "cgroup2") {
      if (mount_point == "/sys/fs/cgroup") {
        v2.v2 = true;
        v2.hierarchies = {{mount_point, ""}};
      }
    } else if (right[0] == "cgroup") {
      std::string controllers;
      for (const auto& opt : Split(right[2], ','))
        for (const char* c : kV1Controllers)
          if (opt == c) controllers += (controllers.empty() ? "" : ",") + opt;
      if (controllers.empty()) continue;
      bool dup = false;
      for (const auto& h : v1.hierarchies) dup |= h.controllers == controllers;
      if (!dup) v1.hierarchies.push_back({mount_point, controllers});
    }
  }
  if (v2.v2) return v2;
  if (!v1.hierarchies.empty()) return v1;
  return NotSupported("no usable cgroup hierarchy: mount cgroup2 at /sys/fs/cgroup or the v1 hierarchies");
}

MachineCgroup::MachineCgroup(const CgroupLayout& layout, const std::string& name)
    : layout_(layout), name_(name) {
  for (const auto& h : layout_.hierarchies)
    dirs_.push_back(h.mount_point + "/" + CgroupParentName() + "/" + name);
}

Status MachineCgroup::Create(const CgroupLimits& limits) {
  Status s = [&]() -> Status {
    for (size_t i = 0; i < dirs_.size(); ++i) {
      const auto& h = layout_.hierarchies[i];
      std::string parent = h.mount_point + "/" + CgroupParentName();
      bool has_cpuset = layout_.v2 || h.controllers.find("cpuset") != std::string::npos;
      auto make_parent = [&]() -> Status {
        if (layout_.v2) {
          RETURN_IF_ERROR(EnableV2Controllers(h.mount_point));
          RETURN_IF_ERROR(MakeDir(parent));
          return EnableV2Controllers(parent);
        }
        RETURN_IF_ERROR(MakeDir(parent));
        if (has_cpuset) {
          // v1 cpusets start empty; a task cannot join until both are set.
          for (const char* f : {"cpuset.cpus", "cpuset.mems"})
            if (ReadFile(parent + "/" + f).empty())
              RETURN_IF_ERROR(WriteFile(parent + "/" + f, ReadFile(h.mount_point + "/" + f)));
        }
        return Status::Ok();
      };
      // The last machine's Destroy removes the empty parent; one that does
      // so between our two mkdirs makes the second fail with ENOENT: again.
      for (int attempt = 0;; ++attempt) {
        RETURN_IF_ERROR(make_parent());
        if (::mkdir(dirs_[i].c_str(), 0755) == 0) break;
        if (errno == ENOENT && attempt < 5) continue;
        return errno == EEXIST ? Status(Code::kAlreadyExists, "cgroup " + dirs_[i] +
                                                                  " already exists (a leftover? 'smolvm machine rm --force')")
                               : ErrnoStatus("mkdir " + dirs_[i], errno);
      }
      const std::string& d = dirs_[i];
      bool has = [&](const char* c) {
        return layout_.v2 || ("," + h.controllers + ",").find(std::string(",") + c + ",") != std::string::npos;
      }("cpu");
      if (!layout_.v2 && has_cpuset) {
        RETURN_IF_ERROR(WriteFile(d + "/cpuset.mems", ReadFile(parent + "/cpuset.mems")));
        RETURN_IF_ERROR(WriteFile(d + "/cpuset.cpus",
                                  limits.cpuset.empty() ? ReadFile(parent + "/cpuset.cpus") : limits.cpuset));
      } else if (layout_.v2 && !limits.cpuset.empty() && ::access((d + "/cpuset.cpus").c_str(), F_OK) == 0) {
        RETURN_IF_ERROR(WriteFile(d + "/cpuset.cpus", limits.cpuset));
      }
      int64_t quota = static_cast<int64_t>(std::llround(limits.cpus * 100000));
      if (limits.cpus > 0 && has) {
        if (layout_.v2) {
          RETURN_IF_ERROR(WriteFile(d + "/cpu.max", std::to_string(quota) + " 100000"));
        } else {
          RETURN_IF_ERROR(WriteFile(d + "/cpu.cfs_period_us", "100000"));
          RETURN_IF_ERROR(WriteFile(d + "/cpu.cfs_quota_us", std::to_string(quota)));
        }
      }
      bool has_mem = layout_.v2 || ("," + h.controllers + ",").find(",memory,") != std::string::npos;
      if (limits.mem_bytes > 0 && has_mem)
        RETURN_IF_ERROR(WriteFile(d + (layout_.v2 ? "/memory.max" : "/memory.limit_in_bytes"),
                                  std::to_string(limits.mem_bytes)));
      bool has_pids = ("," + h.controllers + ",").find(",pids,") != std::string::npos ||
                      (layout_.v2 && ::access((d + "/pids.max").c_str(), F_OK) == 0);
      if (limits.pids > 0 && has_pids) RETURN_IF_ERROR(WriteFile(d + "/pids.max", std::to_string(limits.pids)));
    }
    return Status::Ok();
  }();
  if (!s.ok() && s.code() != static_cast<int32_t>(Code::kAlreadyExists)) (void)Destroy(1000);
  return s;
}

Status MachineCgroup::AddProcess(pid_t pid) const {
  for (const auto& d : dirs_) RETURN_IF_ERROR(WriteFile(d + "/cgroup.procs", std::to_string(pid)));
  return Status::Ok();
}

std::vector<pid_t> MachineCgroup::Pids() const {
  std::vector<pid_t> out;
  for (const auto& d : dirs_) {
    for (const auto& p : Split(ReadFile(d + "/cgroup.procs"), '\n'))
      if (!p.empty()) out.push_back(static_cast<pid_t>(std::stoi(p)));
    if (!out.empty()) break;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool MachineCgroup::Exists() const {
  for (const auto& d : dirs_)
    if (::access(d.c_str(), F_OK) == 0) return true;
  return false;
}

Status MachineCgroup::Destroy(int timeout_ms) const {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (const auto& d : dirs_) {
    if (::access(d.c_str(), F_OK) != 0) continue;
    if (layout_.v2 && ::access((d + "/cgroup.kill").c_str(), F_OK) == 0) (void)WriteFile(d + "/cgroup.kill", "1");
    for (;;) {
      std::string procs = ReadFile(d + "/cgroup.procs");
      // errno is read only right after rmdir failed: with processes still
      // listed it holds whatever an earlier call left (an ENOENT there once
      // ended this loop with the directory still in place).
      if (procs.empty()) {
        if (::rmdir(d.c_str()) == 0 || errno == ENOENT) break;
      } else if (::access(d.c_str(), F_OK) != 0 && errno == ENOENT) {
        break;
      }
      for (const auto& p : Split(procs, '\n'))
        if (!p.empty()) ::kill(static_cast<pid_t>(std::stoi(p)), SIGKILL);
      if (std::chrono::steady_clock::now() > deadline)
        return Status(Code::kTimeout, "cgroup " + d + " did not empty in time; processes: " + procs);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // The parent (<hierarchy>/smolvm) goes with its last machine: rmdir
    // removes it only when empty (EBUSY/ENOTEMPTY otherwise, ignored).
    (void)::rmdir(d.substr(0, d.rfind('/')).c_str());
  }
  return Status::Ok();
}

std::string PickCpuset(int count, const std::vector<std::string>& in_use) {
  if (count <= 0) return "";
  std::vector<int> cpus = UsableCpus();
  std::map<int, int> load;
  for (int c : cpus) load[c] = 0;
  for (const auto& set : in_use)
    for (const auto& c : Split(set, ','))
      if (!c.empty() && load.count(std::stoi(c))) load[std::stoi(c)]++;
  std::vector<int> order = cpus;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return load[a] < load[b]; });
  order.resize(std::min<size_t>(order.size(), static_cast<size_t>(count)));
  std::sort(order.begin(), order.end());
  std::string out;
  for (int c : order) {
    if (!out.empty()) out += ',';
    out += std::to_string(c);
  }
  return out;
}

}  // namespace smolvm::machine
