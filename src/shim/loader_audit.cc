// libsmolvm-audit.so: an rtld-audit module (rtld-audit(7)) that makes every
// load of a library the shims replace, asked for by path or by a renamed
// soname, a load of the shim beside this module.
//
// Why: a --cuda machine covers each guest copy of a replaced library with a
// read-only bind of our shim (machine/cuda_libs.h), and glibc's loader, asked
// by torch to dlopen nvidia/cu13/lib/libcudart.so.13 by absolute path, finds
// the preloaded shim by its (st_dev, st_ino) and maps nothing new. Under
// gVisor each bind of the bundle is a file system of its own, with its own
// device number and inode numbers, and binds inside the sandbox are refused
// (Debian's runsc 0.0~20221219: "mount point is not a directory"), so no
// arrangement of mounts gives a covered copy the preloaded shim's identity:
// the loader mapped a second instance of the shim (its own globals, its
// constructor run again). The loader's other matches are by name and by the
// identity of the file it opens, and la_objsearch may rename either:
// * a copy asked for by path becomes the shim's path, which is the preloaded
//   object's name (LA_SER_ORIG);
// * a renamed soname asked for bare (torchvision's DT_NEEDED
//   libcudart.faf08d9a.so.13) is left alone as asked, and each path the
//   search tries for it becomes the shim's path: the loader opens the
//   preloaded shim's own file, takes the loaded object by its identity and
//   adds the asked name to it. Renaming the bare name itself would hand back
//   the shim without that name, and the version check of the object that
//   needs it (its verneed names libcudart.faf08d9a.so.13) then finds no such
//   object: glibc stops with "dl-version.c: ... Assertion `needed != NULL'
//   failed" (the torch suite on the H100 of 2026-12-07, 19:36).
// Machines under gVisor set LD_AUDIT to this module (machine/sandbox.cc,
// GuestEnvironment).
//
// Runs inside the loader, in a link namespace of its own, the loader's lock
// held: it needs libc only (its C++ runtime linked in, hidden) and allocates
// nothing. A name it does not know, and every name where a shim is absent
// from its directory, goes on unchanged.
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <unistd.h>

#include <cstring>

#include "shim/preload.h"

namespace {

using smolvm::shim::kPreloadSonames;

// <this module's directory>/<soname>, or "" where that shim is absent.
char g_shim_path[kPreloadSonames.size()][PATH_MAX];

void FindShims() {
  Dl_info self;
  if (::dladdr(reinterpret_cast<void*>(&FindShims), &self) == 0 || self.dli_fname == nullptr)
    return;
  const char* slash = std::strrchr(self.dli_fname, '/');
  if (slash == nullptr) return;
  size_t dir = static_cast<size_t>(slash - self.dli_fname) + 1;
  for (size_t i = 0; i < kPreloadSonames.size(); ++i) {
    size_t len = std::strlen(kPreloadSonames[i]);
    if (dir + len >= PATH_MAX) continue;
    char* out = g_shim_path[i];
    std::memcpy(out, self.dli_fname, dir);
    std::memcpy(out + dir, kPreloadSonames[i], len + 1);
    if (::access(out, R_OK) != 0) out[0] = '\0';
  }
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) unsigned int la_version(unsigned int version) {
  FindShims();
  return version < LAV_CURRENT ? version : LAV_CURRENT;
}

// Called with LA_SER_ORIG for each object the loader is asked for and did not
// find among those loaded by name, then with each path its search tries
// (LA_SER_RUNPATH, _LIBPATH, _CONFIG, _DEFAULT, ...). A path asked for is
// renamed at once; a bare name only in the paths tried (the header says why).
__attribute__((visibility("default"))) char* la_objsearch(const char* name, uintptr_t* /*cookie*/,
                                                          unsigned int flag) {
  if (name == nullptr) return nullptr;
  const char* slash = std::strrchr(name, '/');
  if (flag == LA_SER_ORIG && slash == nullptr) return const_cast<char*>(name);
  std::string_view soname = smolvm::shim::ReplacedSoname(slash == nullptr ? name : slash + 1);
  if (soname.empty()) return const_cast<char*>(name);
  for (size_t i = 0; i < kPreloadSonames.size(); ++i)
    if (soname == kPreloadSonames[i] && g_shim_path[i][0] != '\0') return g_shim_path[i];
  return const_cast<char*>(name);
}

}  // extern "C"
