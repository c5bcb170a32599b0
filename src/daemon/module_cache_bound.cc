#include "daemon/module_cache_bound.h"

#include <dirent.h>
#include <sys/stat.h>

#include "worker/module_cache.h"

namespace smolvm {

std::vector<std::string> ModuleCacheBound::Dirs() const {
  std::vector<std::string> dirs;
  if (!daemon_dir_.empty()) dirs.push_back(daemon_dir_);
  if (jail_dir_.empty()) return dirs;
  DIR* d = ::opendir(jail_dir_.c_str());
  if (!d) return dirs;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] != 'u') continue;  // u<uid>: a tenant's (worker_jail.cc)
    std::string modules = jail_dir_ + "/" + e->d_name + "/modules";
    struct stat st;
    if (::lstat(modules.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) dirs.push_back(modules);
  }
  ::closedir(d);
  return dirs;
}

bool ModuleCacheBound::OnModulesGrew(Clock::time_point now) {
  if (swept_ && now - last_ < kMinInterval) return false;
  swept_ = true;
  last_ = now;
  EvictLeastRecentlyUsed(Dirs(), max_bytes_);
  return true;
}

}  // namespace smolvm
