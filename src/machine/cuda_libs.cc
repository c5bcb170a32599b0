#include "machine/cuda_libs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <set>
#include <utility>

#include "base/unique_fd.h"
#include "machine/sandbox.h"
#include "shim/preload.h"

namespace smolvm::machine {
namespace {

// Opens `rel` below `root`, symbolic links resolved as if `root` were "/".
int OpenInRoot(int root, const std::string& rel, uint64_t flags) {
  struct open_how how = {};
  how.flags = flags | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, root, rel.c_str(), &how, sizeof how));
}

class Coverer {
 public:
  // found: list the copies there instead of binding over them.
  Coverer(int root, std::string shim_dir, std::set<std::string> skip, std::vector<CudaLibraryCopy>* found = nullptr)
      : root_(root), shim_dir_(std::move(shim_dir)), skip_(std::move(skip)), found_(found) {}

  // `rel` itself, and below it `depth` levels (a file is looked at itself).
  Status Tree(const std::string& rel, int depth) {
    if (skip_.count(rel)) return Status::Ok();
    UniqueFd dir(OpenInRoot(root_, rel, O_RDONLY | O_DIRECTORY));
    if (!dir.valid() && errno == ENOTDIR) return File(rel, rel.substr(rel.rfind('/') + 1));
    if (!dir.valid()) return errno == ENOENT || errno == ELOOP || errno == EACCES ? Status::Ok()
                                                                                  : ErrnoStatus("open " + rel, errno);
    DIR* d = ::fdopendir(dir.Release());
    if (d == nullptr) return ErrnoStatus("fdopendir " + rel, errno);
    std::vector<std::string> subdirs;
    Status st = Status::Ok();
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      if (++out_.entries > kMaxCudaCoverEntries) {
        out_.truncated = true;
        break;
      }
      unsigned char type = e->d_type;
      if (type == DT_UNKNOWN) {
        struct stat sb;
        if (::fstatat(::dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0)
          type = S_ISDIR(sb.st_mode) ? DT_DIR : S_ISLNK(sb.st_mode) ? DT_LNK : DT_REG;
      }
      std::string path = rel == "." ? name : rel + "/" + name;
      if (type == DT_DIR) {
        if (depth > 0) subdirs.push_back(path);
      } else if (type == DT_REG || type == DT_LNK) {
        st = File(path, name);
        if (!st.ok()) break;
      }
    }
    ::closedir(d);
    RETURN_IF_ERROR(st);
    for (const auto& s : subdirs) {
      if (out_.truncated) break;
      RETURN_IF_ERROR(Tree(s, depth - 1));
    }
    return Status::Ok();
  }

  CudaCoverage Take() { return std::move(out_); }

 private:
  Status File(const std::string& path, const std::string& name) {
    std::string soname = ShimForLibraryFile(name);
    if (soname.empty()) return Status::Ok();
    // A link is followed (inside the root) to the file it names.
    UniqueFd target(OpenInRoot(root_, path, O_PATH));
    if (!target.valid()) return Status::Ok();  // a dangling link
    struct stat sb;
    if (::fstat(target.get(), &sb) < 0 || !S_ISREG(sb.st_mode)) return Status::Ok();
    if (!seen_.insert({sb.st_dev, sb.st_ino}).second) return Status::Ok();
    if (found_ != nullptr) {
      char real[PATH_MAX];
      std::string at = "/proc/self/fd/" + std::to_string(target.get());
      ssize_t n = ::readlink(at.c_str(), real, sizeof real - 1);
      if (n <= 0) return ErrnoStatus("readlink " + path, errno);
      found_->push_back({std::string(real, static_cast<size_t>(n)), soname});
      out_.covered.push_back(path);
      return Status::Ok();
    }
    std::string src = shim_dir_ + "/" + soname;
    UniqueFd shim(OpenInRoot(root_, src, O_PATH));
    if (!shim.valid()) return ErrnoStatus("open the shim " + src, errno);
    std::string at = "/proc/self/fd/" + std::to_string(target.get());
    std::string from = "/proc/self/fd/" + std::to_string(shim.get());
    if (::mount(from.c_str(), at.c_str(), nullptr, MS_BIND, nullptr) < 0)
      return ErrnoStatus("bind " + src + " over " + path, errno);
    // The new mount is on top now: reach it by path for the remount.
    UniqueFd covered(OpenInRoot(root_, path, O_PATH));
    std::string on = "/proc/self/fd/" + std::to_string(covered.get());
    if (!covered.valid() ||
        ::mount("", on.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) < 0)
      return ErrnoStatus("remount read-only " + path, errno);
    out_.covered.push_back(path);
    return Status::Ok();
  }

  int root_;
  std::string shim_dir_;
  std::set<std::string> skip_;  // paths not entered
  CudaCoverage out_;
  std::set<std::pair<dev_t, ino_t>> seen_;
  std::vector<CudaLibraryCopy>* found_;
};

}  // namespace

std::string ShimForLibraryFile(std::string_view name) { return std::string(shim::ReplacedSoname(name)); }

std::vector<std::string> CudaSystemLibraryDirs() {
  return {"usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/lib", "usr/local/cuda/lib64",
          "usr/local/cuda/targets/x86_64-linux/lib", "usr/local/nvidia/lib64"};
}

Result<CudaCoverage> CoverGuestCudaLibraries(const std::string& root, const std::string& shim_dir,
                                             const std::vector<std::string>& trees,
                                             const std::vector<std::string>& dirs) {
  UniqueFd root_fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd.valid()) return ErrnoStatus("open " + root, errno);
  // Never our own shims, nor what is not a file system of libraries.
  Coverer c(root_fd.get(), shim_dir, {shim_dir, "proc", "sys", "dev", "run", "tmp"});
  for (const auto& t : trees) RETURN_IF_ERROR(c.Tree(t, 64));
  for (const auto& d : dirs) RETURN_IF_ERROR(c.Tree(d, 0));
  return c.Take();
}

Result<std::vector<CudaLibraryCopy>> FindCudaLibraryCopies(const std::string& root, const std::vector<std::string>& trees,
                                                          const std::vector<std::string>& dirs) {
  UniqueFd root_fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd.valid()) return ErrnoStatus("open " + root, errno);
  std::vector<CudaLibraryCopy> found;
  Coverer c(root_fd.get(), "", {"proc", "sys", "dev", "run", "tmp"}, &found);
  for (const auto& t : trees) RETURN_IF_ERROR(c.Tree(t, 64));
  for (const auto& d : dirs) RETURN_IF_ERROR(c.Tree(d, 0));
  return found;
}

Status CoverMachineCudaLibraries(const SandboxConfig& cfg, bool image_root) {
  std::vector<std::string> trees;
  for (const Volume& v : cfg.spec.volumes) trees.push_back(v.guest.substr(1));
  if (image_root) trees.push_back(".");
  ASSIGN_OR_RETURN(CudaCoverage c, CoverGuestCudaLibraries(".", "run/smolvm/lib", trees,
                                                           image_root ? std::vector<std::string>{}
                                                                      : CudaSystemLibraryDirs()));
  (void)c;  // the guest sees each in /proc/self/mountinfo
  return Status::Ok();
}

}  // namespace smolvm::machine
