#include "shim/foreign_libs.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "shim/preload.h"

namespace smolvm::shim {

std::vector<std::string> ForeignCudaLibraries(const std::string& shim_dir) {
  std::vector<std::string> paths;
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0')
          static_cast<std::vector<std::string>*>(data)->push_back(info->dlpi_name);
        return 0;
      },
      &paths);
  std::vector<std::string> foreign;
  for (const auto& p : paths) {
    std::string_view base = p;
    base = base.substr(base.rfind('/') + 1);
    std::string_view soname = ReplacedSoname(base);
    if (soname.empty()) continue;
    struct stat mine, theirs;
    std::string own = shim_dir + "/" + std::string(soname);
    if (::stat(p.c_str(), &theirs) == 0 && ::stat(own.c_str(), &mine) == 0 && mine.st_dev == theirs.st_dev &&
        mine.st_ino == theirs.st_ino)
      continue;
    foreign.push_back(p);
  }
  return foreign;
}

void WarnForeignCudaLibraries() {
  static bool done = false;
  if (done) return;
  done = true;
  const char* quiet = std::getenv("SMOLVM_QUIET_FOREIGN");
  if (quiet != nullptr && std::strcmp(quiet, "1") == 0) return;
  Dl_info self;
  if (::dladdr(reinterpret_cast<void*>(&WarnForeignCudaLibraries), &self) == 0 || self.dli_fname == nullptr) return;
  std::string dir = self.dli_fname;
  dir = dir.substr(0, dir.rfind('/'));
  for (const auto& p : ForeignCudaLibraries(dir))
    std::fprintf(stderr,
                 "smolvm cuda: %s is mapped beside the shims (loaded by path or under a renamed soname); calls "
                 "resolve to the shims, but run in a --cuda machine to keep it out (docs/torch.md)\n",
                 p.c_str());
}

}  // namespace smolvm::shim
