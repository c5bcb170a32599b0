#include "worker/worker_uids.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace smolvm {
namespace {

std::string ReadAll(const char* path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

bool UidRunsAnyProcess(uint32_t uid) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "status");
    for (std::string line; std::getline(f, line);) {
      if (line.rfind("Uid:", 0) != 0) continue;
      std::istringstream ids(line.substr(4));
      for (uint64_t id; ids >> id;)
        if (id == uid) return true;
      break;
    }
  }
  return false;
}

bool IdRangeMapped(const std::string& map, uint32_t first, uint32_t count) {
  std::istringstream lines(map);
  uint64_t inside = 0, outside = 0, n = 0;
  while (lines >> inside >> outside >> n)
    if (first >= inside && uint64_t{first} + count <= inside + n) return true;
  return false;
}

Status WorkerUids::Check(const std::string& uid_map, const std::string& gid_map) const {
  if (!enabled()) return Status::Ok();
  if (count_ == 0 || uint64_t{base_} + count_ > 0xffffffffull)
    return InvalidArgument("--worker-uid-base/--worker-uids: the range leaves the 32-bit uid space");
  if (::geteuid() != 0)
    return InvalidArgument("workers drop to their own uids only when the daemon runs as root "
                           "(pass --worker-uid-base 0 to keep them as the daemon's user)");
  const std::string u = uid_map.empty() ? ReadAll("/proc/self/uid_map") : uid_map;
  const std::string g = gid_map.empty() ? ReadAll("/proc/self/gid_map") : gid_map;
  if (!IdRangeMapped(u, base_, count_) || !IdRangeMapped(g, base_, count_))
    return InvalidArgument("worker uids " + std::to_string(base_) + "+" + std::to_string(count_) +
                           " are not mapped in this user namespace (see /proc/self/uid_map); "
                           "pick a mapped range with --worker-uid-base");
  return Status::Ok();
}

Result<uint32_t> WorkerUids::Acquire(const std::string& tenant) {
  if (!enabled()) return uint32_t{0};
  auto it = by_tenant_.find(tenant);
  if (it != by_tenant_.end()) {
    ++by_uid_[it->second].refs;
    return it->second;
  }
  uint32_t uid = 0;
  while (uid == 0) {
    uint32_t offset;
    if (!free_.empty()) {
      offset = *free_.begin();
      free_.erase(free_.begin());
    } else if (next_ < count_) {
      offset = next_++;
    } else {
      return Unavailable("all " + std::to_string(count_) + " worker uids are in use (--worker-uids)");
    }
    // Taken by someone else (another daemon's worker, a host user): never
    // ours, and not offered again.
    if (!in_use_(base_ + offset)) uid = base_ + offset;
  }
  by_tenant_[tenant] = uid;
  by_uid_[uid] = Entry{tenant, 1};
  return uid;
}

bool WorkerUids::Release(uint32_t uid) {
  auto it = by_uid_.find(uid);
  if (uid == 0 || it == by_uid_.end()) return false;
  if (--it->second.refs > 0) return false;
  by_tenant_.erase(it->second.tenant);
  by_uid_.erase(it);
  free_.insert(uid - base_);
  return true;
}

uint32_t WorkerUids::Find(const std::string& tenant) const {
  auto it = by_tenant_.find(tenant);
  return it == by_tenant_.end() ? 0 : it->second;
}

}  // namespace smolvm
