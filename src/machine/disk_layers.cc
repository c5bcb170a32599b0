#include "machine/disk_layers.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "machine/errors.h"
#include "machine/owned_dir.h"

namespace smolvm::machine {
namespace {

Status MountAt(const char* src, const std::string& dst, const char* type, unsigned long flags, const std::string& data) {
  if (::mount(src, dst.c_str(), type, flags, data.empty() ? nullptr : data.c_str()) < 0)
    return ErrnoStatus(std::string("mount ") + (type ? type : src) + " on " + dst, errno);
  return Status::Ok();
}

// The kernel's own words for a failed fsconfig/fsmount.
std::string FsLog(int fsfd) {
  std::string out;
  char buf[512];
  for (int i = 0; i < 8; ++i) {
    ssize_t n = ::read(fsfd, buf, sizeof buf - 1);
    if (n <= 0) break;
    out += (out.empty() ? "" : "; ") + std::string(buf, static_cast<size_t>(n));
  }
  return out.empty() ? "" : " (" + out + ")";
}

Status FsConfig(int fsfd, const char* key, const std::string& value) {
  if (::syscall(SYS_fsconfig, fsfd, FSCONFIG_SET_STRING, key, value.c_str(), 0) < 0) {
    int e = errno;
    return ErrnoStatus(std::string("overlay option ") + key + "=" + value + FsLog(fsfd), e);
  }
  return Status::Ok();
}

}  // namespace

Status EnterPrivateMountNamespace(UniqueFd* host) {
  host->Reset(::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC));
  if (!host->valid()) return ErrnoStatus("open /proc/self/ns/mnt", errno);
  if (::unshare(CLONE_NEWNS) < 0) return ErrnoStatus("unshare(CLONE_NEWNS)", errno);
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) < 0) return ErrnoStatus("make / private", errno);
  return Status::Ok();
}

Status SetnsMount(int ns_fd) {
  if (::setns(ns_fd, CLONE_NEWNS) < 0) return ErrnoStatus("setns (host mount namespace)", errno);
  return Status::Ok();
}

Result<std::unique_ptr<DiskLayers>> DiskLayers::Create(const Config& c) {
  if (c.disk_bytes < (1 << 20)) return InvalidArgument("--disk must be at least 1 MiB");
  std::unique_ptr<DiskLayers> d(new DiskLayers(c));
  if (::mkdir(c.dir.c_str(), 0700) < 0 && errno != EEXIST) return ErrnoStatus("mkdir " + c.dir, errno);
  RETURN_IF_ERROR(MountAt("smolvm-layers", c.dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=1m,mode=0700"));
  d->dir_fd_.Reset(::open(c.dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!d->dir_fd_.valid()) return ErrnoStatus("open " + c.dir, errno);
  RETURN_IF_ERROR(MkDirOwned(c.dir + "/e", 0755, -1));
  if (!c.workspace_base.empty()) {
    RETURN_IF_ERROR(MkDirOwned(c.dir + "/pw", 0755, -1));
    RETURN_IF_ERROR(MountAt(c.workspace_base.c_str(), c.dir + "/pw", nullptr, MS_BIND | MS_REC, ""));
  }
  d->upper_ = "g0";
  RETURN_IF_ERROR(d->NewUpper(d->upper_, c.disk_bytes));
  return d;
}

Status DiskLayers::NewUpper(const std::string& name, int64_t bytes) {
  std::string at = c_.dir + "/" + name;
  RETURN_IF_ERROR(MkDirOwned(at, 0755, -1));
  RETURN_IF_ERROR(MountAt("smolvm-disk", at, "tmpfs", MS_NOSUID | MS_NODEV,
                          "size=" + std::to_string(bytes) + ",mode=0755"));
  RETURN_IF_ERROR(MkDirOwned(at + "/tmp", 01777, c_.uid));
  RETURN_IF_ERROR(MkDirOwned(at + "/workspace", 0755, c_.uid));
  RETURN_IF_ERROR(MkDirOwned(at + "/w", 0700, -1));
  RETURN_IF_ERROR(MkDirOwned(at + "/w/tmp", 0700, -1));
  RETURN_IF_ERROR(MkDirOwned(at + "/w/workspace", 0700, -1));
  return Status::Ok();
}

Result<UniqueFd> DiskLayers::Overlay(const std::string& sub, const std::string& upper) {
  // Layers are named relative to dir_ (fsconfig values are short that way);
  // the paths resolve against the cwd while the options are given.
  std::string lower;
  for (auto it = frozen_.rbegin(); it != frozen_.rend(); ++it) lower += *it + "/" + sub + ":";
  lower += (sub == "workspace" && !c_.workspace_base.empty()) ? "pw" : "e";
  UniqueFd cwd(::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!cwd.valid()) return ErrnoStatus("open .", errno);
  if (::fchdir(dir_fd_.get()) < 0) return ErrnoStatus("chdir " + c_.dir, errno);
  auto made = [&]() -> Result<UniqueFd> {
    UniqueFd fs(static_cast<int>(::syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC)));
    if (!fs.valid()) return ErrnoStatus("fsopen overlay", errno);
    RETURN_IF_ERROR(FsConfig(fs.get(), "source", "smolvm"));
    RETURN_IF_ERROR(FsConfig(fs.get(), "lowerdir", lower));
    RETURN_IF_ERROR(FsConfig(fs.get(), "upperdir", upper + "/" + sub));
    RETURN_IF_ERROR(FsConfig(fs.get(), "workdir", upper + "/w/" + sub));
    if (::syscall(SYS_fsconfig, fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) < 0) {
      int e = errno;
      return ErrnoStatus("creating the overlay for /" + sub + FsLog(fs.get()), e);
    }
    int m = static_cast<int>(
        ::syscall(SYS_fsmount, fs.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
    if (m < 0) return ErrnoStatus("fsmount overlay /" + sub, errno);
    return UniqueFd(m);
  }();
  if (::fchdir(cwd.get()) < 0 && made.ok()) return ErrnoStatus("chdir back", errno);
  return made;
}

Result<WritableMounts> DiskLayers::Overlays(const std::string& upper) {
  WritableMounts m;
  ASSIGN_OR_RETURN(m.tmp, Overlay("tmp", upper));
  ASSIGN_OR_RETURN(m.workspace, Overlay("workspace", upper));
  return m;
}

Result<std::pair<int64_t, int64_t>> DiskLayers::Used(const std::string& layer) {
  struct statfs s;
  std::string at = c_.dir + "/" + layer;
  if (::statfs(at.c_str(), &s) < 0) return ErrnoStatus("statfs " + at, errno);
  return std::pair<int64_t, int64_t>{static_cast<int64_t>((s.f_blocks - s.f_bfree) * s.f_bsize),
                                     static_cast<int64_t>(s.f_files - s.f_ffree)};
}

Result<WritableMounts> DiskLayers::Golden() {
  ASSIGN_OR_RETURN(WritableMounts m, Overlays(upper_));
  ASSIGN_OR_RETURN(baseline_, Used(upper_));
  return m;
}

Result<std::optional<WritableMounts>> DiskLayers::FreezeIfDirty() {
  ASSIGN_OR_RETURN(auto used, Used(upper_));
  if (used == baseline_) return std::optional<WritableMounts>();
  std::string at = c_.dir + "/" + upper_;
  // The superblock itself goes read-only: every mount of it, the golden's
  // overlay's included, stops writing. EBUSY: a file is open for writing.
  if (::mount(nullptr, at.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) < 0) {
    if (errno == EBUSY)
      return WrongState("the golden has a file open for writing in /tmp or /workspace; close it before "
                        "smolvmForkpoint() (its writable layer becomes the clones' read-only base)");
    return ErrnoStatus("freezing the golden's writable layer", errno);
  }
  frozen_.push_back(upper_);
  frozen_bytes_ += used.first;
  std::string next(1, 'g');  // built, then moved: GCC 12's -Wrestrict misfires on "g" + to_string
  next += std::to_string(frozen_.size());
  upper_ = std::move(next);
  RETURN_IF_ERROR(NewUpper(upper_, std::max<int64_t>(c_.disk_bytes - frozen_bytes_, 1 << 20)));
  ASSIGN_OR_RETURN(WritableMounts m, Golden());
  return std::optional<WritableMounts>(std::move(m));
}

Result<WritableMounts> DiskLayers::ForClone() {
  std::string name(1, 'c');
  name += std::to_string(next_++);
  RETURN_IF_ERROR(NewUpper(name, c_.disk_bytes));
  auto m = Overlays(name);
  // The overlays hold the upper; its mount point here is no longer needed.
  std::string at = c_.dir + "/" + name;
  ::umount2(at.c_str(), MNT_DETACH);
  ::rmdir(at.c_str());
  return m;
}

}  // namespace smolvm::machine
