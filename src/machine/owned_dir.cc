#include "machine/owned_dir.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

namespace smolvm::machine {

Status MkDirOwned(const std::string& path, mode_t mode, int64_t uid) {
  if (::mkdir(path.c_str(), mode) < 0 && errno != EEXIST) return ErrnoStatus("mkdir " + path, errno);
  if (::chmod(path.c_str(), mode) < 0) return ErrnoStatus("chmod " + path, errno);
  if (uid >= 0 && ::chown(path.c_str(), static_cast<uid_t>(uid), static_cast<gid_t>(uid)) < 0)
    return ErrnoStatus("chown " + path, errno);
  return Status::Ok();
}

}  // namespace smolvm::machine
