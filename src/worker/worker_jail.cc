#include "worker/worker_jail.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <utility>

#include "base/unique_fd.h"

namespace smolvm {
namespace {

std::string WorkerLink(const std::string& jail_dir, pid_t pid) { return jail_dir + "/w" + std::to_string(pid); }

// A directory `name` in `parent` (a descriptor), owned by uid, mode 0700:
// made if absent, else it must already be exactly that. Never follows a
// link: `parent` may be writable by uid.
Result<UniqueFd> OwnedDirAt(int parent, const std::string& name, uid_t uid) {
  bool made = ::mkdirat(parent, name.c_str(), 0700) == 0;
  if (!made && errno != EEXIST) return ErrnoStatus("mkdir " + name, errno);
  UniqueFd fd(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + name, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) < 0) return ErrnoStatus("stat " + name, errno);
  if (made || st.st_uid == ::geteuid()) {
    if (::fchown(fd.get(), uid, uid) < 0 || ::fchmod(fd.get(), 0700) < 0) return ErrnoStatus("chown " + name, errno);
  } else if (st.st_uid != uid || (st.st_mode & 077)) {
    return Internal(name + " exists and is not a private directory of uid " + std::to_string(uid));
  }
  return fd;
}

// Best effort: raising the hard limit needs CAP_SYS_RESOURCE, which a
// container's root may lack; then the soft limit goes up to the hard one.
void RaiseMemlock(uint64_t memlock_bytes) {
  struct rlimit lim;
  if (::getrlimit(RLIMIT_MEMLOCK, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < memlock_bytes) {
    struct rlimit want = {memlock_bytes, std::max<rlim_t>(lim.rlim_max, memlock_bytes)};
    if (::setrlimit(RLIMIT_MEMLOCK, &want) < 0 && lim.rlim_max > lim.rlim_cur) {
      want = {lim.rlim_max, lim.rlim_max};
      (void)::setrlimit(RLIMIT_MEMLOCK, &want);
    }
  }
}

// Removes a link, a file or an (usually empty) directory in one call, a
// tree only when there is one.
void RemovePath(const std::string& path) {
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return;
  if (::rmdir(path.c_str()) == 0 || errno == ENOENT) return;
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

}  // namespace

void SetWorkerCachePath(const std::string& jail_dir) {
  if (!jail_dir.empty()) ::setenv("CUDA_CACHE_PATH", WorkerLink(jail_dir, ::getpid()).c_str(), 1);
}

Result<std::string> DropWorkerPrivileges(const std::string& jail_dir, uint32_t uid) {
  if (jail_dir.empty()) {
    if (uid == 0) return std::string();
    return InvalidArgument("a worker drops its uid only with a jail directory");
  }
  const std::string link = WorkerLink(jail_dir, ::getpid());
  // A stale link of an earlier worker with this pid, or a directory the
  // driver made there itself while still root: both only root can have
  // written (the jail directory is root's), so they go.
  RemovePath(link);
  if (uid == 0) {
    if (::mkdir(link.c_str(), 0700) < 0) return ErrnoStatus("mkdir " + link, errno);
    return std::string();
  }
  const pid_t parent = ::getppid();
  UniqueFd jail(::open(jail_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!jail.valid()) return ErrnoStatus("open " + jail_dir, errno);
  std::string tenant = std::to_string(uid);
  tenant.insert(tenant.begin(), 'u');  // "u<uid>" (GCC 12 warns falsely on "u" + to_string)
  ASSIGN_OR_RETURN(UniqueFd tenant_fd, OwnedDirAt(jail.get(), tenant, uid));
  ASSIGN_OR_RETURN(UniqueFd modules_fd, OwnedDirAt(tenant_fd.get(), "modules", uid));
  std::string cache;
  for (int attempt = 0; attempt < 16 && cache.empty(); ++attempt) {
    std::string name = "cache." + std::to_string(::getpid()) + "." + std::to_string(std::rand());
    if (::mkdirat(tenant_fd.get(), name.c_str(), 0700) == 0) cache = name;
    else if (errno != EEXIST) return ErrnoStatus("mkdir " + name, errno);
  }
  if (cache.empty()) return Internal("cannot make a CUDA cache directory");
  {
    UniqueFd fd(::openat(tenant_fd.get(), cache.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid() || ::fchown(fd.get(), uid, uid) < 0) return ErrnoStatus("chown " + cache, errno);
  }
  const std::string target = jail_dir + "/" + tenant + "/" + cache;
  if (::symlink(target.c_str(), link.c_str()) < 0) return ErrnoStatus("symlink " + link, errno);
  // glibc applies these to every thread of the process (the driver's too),
  // each a signal to every thread and a wait for all of them. The groups
  // were normally cleared already while the worker had one thread
  // (WorkerJail::Prepare).
  if (::getgroups(0, nullptr) != 0 && ::setgroups(0, nullptr) < 0) return ErrnoStatus("setgroups", errno);
  if (::setresgid(uid, uid, uid) < 0) return ErrnoStatus("setresgid " + std::to_string(uid), errno);
  if (::setresuid(uid, uid, uid) < 0) return ErrnoStatus("setresuid " + std::to_string(uid), errno);
  uid_t r, e, s;
  if (::getresuid(&r, &e, &s) < 0 || r != uid || e != uid || s != uid)
    return Internal("the uid did not change to " + std::to_string(uid));
  if (::getgroups(0, nullptr) != 0) return Internal("supplementary groups are left after the drop");
  if (::setuid(0) == 0) return Internal("root could be regained after the drop");
  // Not even the tenant's other workers may trace or read this one (the
  // seccomp filter keeps it so).
  if (::prctl(PR_SET_DUMPABLE, 0) < 0) return ErrnoStatus("prctl(PR_SET_DUMPABLE)", errno);
  // The uid change cleared the parent-death signal: the daemon supervises us.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) return ErrnoStatus("prctl(PR_SET_PDEATHSIG)", errno);
  if (::getppid() != parent) return Unavailable("the daemon went away during the drop");
  return jail_dir + "/" + tenant + "/modules";
}

Result<WorkerJail> WorkerJail::Prepare(std::string jail_dir, SeccompMode mode, int learn_fd, uint64_t memlock_bytes) {
  WorkerJail j;
  j.jail_dir_ = std::move(jail_dir);
  j.learn_fd_ = learn_fd;
  SetWorkerCachePath(j.jail_dir_);
  RaiseMemlock(memlock_bytes);
  // Root needs no supplementary groups; cleared now, while the worker has
  // one thread, they cost nothing when it is drawn (DropWorkerPrivileges).
  if (::geteuid() == 0 && !j.jail_dir_.empty()) (void)::setgroups(0, nullptr);
  ASSIGN_OR_RETURN(j.filter_, WorkerSeccompFilter::Compile(mode, learn_fd));
  return j;
}

WorkerJail::WorkerJail(WorkerJail&& o) noexcept
    : jail_dir_(std::move(o.jail_dir_)), filter_(std::move(o.filter_)), learn_fd_(std::exchange(o.learn_fd_, -1)),
      entered_(o.entered_) {}

WorkerJail& WorkerJail::operator=(WorkerJail&& o) noexcept {
  if (this != &o) {
    if (learn_fd_ >= 0) ::close(learn_fd_);
    jail_dir_ = std::move(o.jail_dir_);
    filter_ = std::move(o.filter_);
    learn_fd_ = std::exchange(o.learn_fd_, -1);
    entered_ = o.entered_;
  }
  return *this;
}

WorkerJail::~WorkerJail() {
  if (learn_fd_ >= 0) ::close(learn_fd_);
}

Result<std::string> WorkerJail::Enter(uint32_t uid) {
  if (entered_) return Internal("the worker is in its jail already");
  entered_ = true;
  ASSIGN_OR_RETURN(std::string modules, DropWorkerPrivileges(jail_dir_, uid));
  RETURN_IF_ERROR(filter_.Load());
  if (learn_fd_ >= 0) ::close(std::exchange(learn_fd_, -1));  // the supervisor has its own
  return modules;
}

Result<std::string> MakeJailDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/smolvm-jail.XXXXXX";
  if (!::mkdtemp(path.data())) return ErrnoStatus("mkdtemp " + path, errno);
  if (::chmod(path.c_str(), 0711) < 0) return ErrnoStatus("chmod " + path, errno);
  return path;
}

void RemoveWorkerJail(const std::string& jail_dir, pid_t pid, uint32_t uid, bool last_of_uid) {
  if (jail_dir.empty()) return;
  std::error_code ec;
  // The link (or, for a worker that kept the daemon's uid, its directory).
  std::filesystem::remove_all(WorkerLink(jail_dir, pid), ec);
  if (uid != 0 && last_of_uid) std::filesystem::remove_all(jail_dir + "/u" + std::to_string(uid), ec);
}

}  // namespace smolvm
