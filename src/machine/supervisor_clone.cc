// The making of one clone machine (supervisor_internal.h): its pieces on the
// host (directory, disk layers, log, cgroup, CUDA endpoint), the golden's
// fork and the child's way into the clone (guest/forkpoint_wire.h), and
// undoing all of it when the request fails or is cancelled.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "guest/forkpoint_wire.h"
#include "machine/errors.h"
#include "machine/process.h"
#include "machine/sandbox.h"
#include "machine/supervisor_internal.h"
#include "transport/unix_channel.h"

namespace smolvm::machine {
namespace {

// A connection on the forkpoint socket that says "CLONE <index>" from a
// child of the golden; any other is turned away.
std::optional<Conn> AcceptClone(int listen_fd, int index, pid_t golden_pid, SupervisorClock::time_point deadline) {
  int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return std::nullopt;
  Conn c;
  c.kind = Conn::kClone;
  c.fd.Reset(fd);
  c.peer = PeerPid(fd);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
  auto line = ReadLine(c, std::min(deadline, SupervisorClock::now() + std::chrono::seconds(2)));
  int i;
  if (line.ok() && std::sscanf(line->c_str(), "CLONE %d", &i) == 1 && i == index && ParentPid(c.peer) == golden_pid)
    return c;
  (void)SendLine(fd, "ERR 16 a fork is in progress");
  return std::nullopt;
}

}  // namespace

Status Supervisor::PrepareClone(CloneWork& w) {
  RETURN_IF_ERROR(MkDirOwned(w.paths.dir, 0700, -1));
  // No copy: the golden's writable layer (frozen before the request's first
  // clone when it changed) is the clone's read-only lower; the clone writes
  // into a fresh upper.
  ASSIGN_OR_RETURN(w.disk, layers_->ForClone());
  w.log.Reset(::open(w.paths.log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
  if (!w.log.valid()) return ErrnoStatus("open " + w.paths.log, errno);
  CgroupLimits limits;
  limits.cpus = w.rec.spec.cpus;
  limits.cpuset = w.rec.cpuset;
  limits.mem_bytes = w.rec.spec.mem_mib << 20;
  limits.pids = PidsLimit(w.rec.spec);
  RETURN_IF_ERROR(w.cg.Create(limits));
  // Its lease link: the clone connects when its program first asks (0666:
  // the guest's uids; only the clone's own processes are accepted).
  ASSIGN_OR_RETURN(w.lease_listen, ListenUnix(w.paths.lease_sock, 0666));
  if (cuda_) {
    // The clone's own endpoint, before the daemon is asked for its session.
    ASSIGN_OR_RETURN(w.endpoint, AttachCudaMachine(*cuda_, w.name, w.paths.cuda_sock, w.cg.dirs(),
                                                   w.rec.spec.gpu_mem_mib << 20, w.rec.forkable,
                                                   // a clone is its golden's user namespace: its uid
                                                   static_cast<uid_t>(rec_.uid_base),
                                                   w.rec.spec.isolation == Isolation::kGvisor));
  }
  return Status::Ok();
}

Status Supervisor::StartClone(CloneWork& w, ForkRun& run, Clock::time_point c1_deadline) {
  const int index = next_index_++;
  w.index = index;
  if (!SendLine(golden_->fd.get(), "FORK " + std::to_string(index) + " " + w.name + " " + run.share + " -").ok()) {
    run.golden_gone = true;
    return Unavailable("the golden left its forkpoint");
  }
  w.steps.order = run.Ms();
  // The daemon answers before the last clone attached only when it will not
  // fork the golden's GPU session: no session (a CPU-only golden) or an error.
  auto daemon_answered = [&]() -> Status {
    auto rep = ReadCudaMachineFork(run.cuda_fork.get(), Clock::now() + std::chrono::seconds(1));
    run.cuda_fork.Reset();
    if (rep.ok()) return Internal("the CUDA daemon finished a fork before the golden forked");
    if (rep.status().code() == static_cast<int32_t>(Code::kNotFound) && !run.released) {
      run.gpu_fork = false;
      return Status::Ok();
    }
    return Status(rep.status().code(), "GPU fork: " + rep.status().message());
  };
  // C1's connection; the golden may report a failed fork instead.
  while (!w.conn) {
    struct pollfd p[3] = {{fp_listen_.get(), POLLIN, 0}, {golden_->fd.get(), POLLIN, 0}, {run.cuda_fork.get(), POLLIN, 0}};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(c1_deadline - Clock::now()).count();
    if (left <= 0) return Timeout("the golden did not fork in time");
    if (::poll(p, 3, static_cast<int>(left)) < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
    if (run.cuda_fork.valid() && p[2].revents) RETURN_IF_ERROR(daemon_answered());
    if (p[1].revents) {
      Status f = Fill(*golden_, c1_deadline);
      if (!f.ok()) {
        run.golden_gone = true;
        return Unavailable("the golden left its forkpoint: " + f.message());
      }
      while (auto line = PopLine(*golden_)) {
        int i, r;
        if (std::sscanf(line->c_str(), "FORKED %d %d", &i, &r) == 2 && i == index && r < 0) {
          // Cancelled: the daemon gave up before any order; else the golden
          // took its order and could not fork.
          w.order_spent = r != -ECANCELED;
          if (r == -ECANCELED) run.released = false;
          // A GPU fork the daemon gave up on cancels the golden's wait: its
          // reason is the one to report.
          if (run.cuda_fork.valid()) RETURN_IF_ERROR(daemon_answered());
          return Internal("the golden could not fork: " + std::string(std::strerror(-r)));
        }
      }
    }
    if (p[0].revents) {
      w.conn = AcceptClone(fp_listen_.get(), index, golden_pid_, c1_deadline);
      if (w.conn) {
        w.order_spent = true;
        // The golden forks a GPU clone only with the daemon's order, and the
        // daemon gives all of a request's orders at once.
        if (run.gpu_fork) run.released = true;
      }
    }
  }
  w.steps.c1 = run.Ms();
  Conn& c1 = *w.conn;
  RETURN_IF_ERROR(w.cg.AddProcess(c1.peer));
  w.steps.cgroup = run.Ms();
  return SendLine(c1.fd.get(), "MOVED");
}

Status Supervisor::AdvanceClone(CloneWork& w, ForkRun& run, std::optional<Clock::time_point> deadline) {
  Conn& c1 = *w.conn;
  while (w.init == 0) {
    // The INIT line comes from the clone's init, whose pid its credentials carry.
    std::optional<std::string> line = PopLine(c1);
    if (!line) {
      RETURN_IF_ERROR(Fill(c1, deadline, &w.sender));
      line = PopLine(c1);
      if (!line) {
        if (!deadline) return Status::Ok();  // nothing more yet
        continue;
      }
    }
    if (w.steps.unshared == 0) {
      if (*line != "UNSHARED") return Internal("clone setup failed: " + *line);
      w.steps.unshared = run.Ms();
      GuestMounts gm;
      gm.tmp = std::move(w.disk.tmp);
      gm.workspace = std::move(w.disk.workspace);
      gm.cgroupfs = true;
      gm.replace = true;
      if (cuda_) gm.cuda_sock = w.paths.cuda_sock;
      gm.lease_sock = w.paths.lease_sock;
      RETURN_IF_ERROR(InjectGuestMounts(c1.peer, std::move(gm), layout_));
      w.steps.mounts = run.Ms();
      RETURN_IF_ERROR(SendLine(c1.fd.get(), "READY", w.log.get()));
      w.sender = 0;
      continue;
    }
    if (*line != "INIT" || w.sender <= 0 || !InMachineCgroup(w.sender, w.name))
      return Internal("clone did not come up: " + *line);
    w.init = w.sender;
    w.ms = w.steps.init = run.Ms();
  }
  return Status::Ok();
}

Status Supervisor::SpendOrder(const std::string& clone, ForkRun& run) {
  const int index = next_index_++;
  if (!SendLine(golden_->fd.get(), "FORK " + std::to_string(index) + " " + clone + " " + run.share + " -").ok()) {
    run.golden_gone = true;
    return Unavailable("the golden left its forkpoint");
  }
  auto deadline = Clock::now() + kCloneStepTimeout;
  for (;;) {
    struct pollfd p[2] = {{fp_listen_.get(), POLLIN, 0}, {golden_->fd.get(), POLLIN, 0}};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Timeout("the golden did not fork in time");
    if (::poll(p, 2, static_cast<int>(left)) < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
    if (p[1].revents) {
      if (Status f = Fill(*golden_, deadline); !f.ok()) {
        run.golden_gone = true;
        return Unavailable("the golden left its forkpoint: " + f.message());
      }
      while (auto line = PopLine(*golden_)) {
        int i, r;
        if (std::sscanf(line->c_str(), "FORKED %d %d", &i, &r) == 2 && i == index && r < 0)
          return Unavailable("no order left: " + std::string(std::strerror(-r)));
      }
    }
    if (p[0].revents) {
      if (auto c1 = AcceptClone(fp_listen_.get(), index, golden_pid_, deadline)) {
        // C1 ends at once; the golden goes back to its forkpoint.
        (void)SendLine(c1->fd.get(), "ERR 125 the fork request was abandoned");
        return Status::Ok();
      }
    }
  }
}

void Supervisor::UndoClone(CloneWork& w) {
  // A child not moved into the clone's cgroup yet ends on this answer; the
  // rest ends with the cgroup, the workers that served it on the GPU too.
  if (w.conn && w.init == 0) (void)SendLine(w.conn->fd.get(), "ERR 5 the fork request failed");
  w.conn.reset();
  w.endpoint.Reset();
  Status destroyed = w.cg.Destroy();
  if (!destroyed.ok()) Log(destroyed.message());
  std::error_code ec;
  std::filesystem::remove_all(w.paths.dir, ec);
}

}  // namespace smolvm::machine
