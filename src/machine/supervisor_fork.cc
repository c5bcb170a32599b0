// The supervisor's fork of a clone: the clone's cgroup and disk layers, the
// forkpoint conversation with the golden and its child (guest/forkpoint_wire.h),
// and for --cuda machines the daemon's GPU fork of the golden's session.
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

namespace smolvm::machine {

Status Supervisor::DoFork(const PendingFork& req, int* index_out, pid_t* init_out) {
  ASSIGN_OR_RETURN(MachineRecord clone, store_->Get(req.clone));
  if (clone.golden != name_ || clone.state != kStateForking)
    return WrongState("machine '" + req.clone + "' is not a clone being forked from '" + name_ + "'");
  MachinePaths cp(home_, req.clone);
  MachineCgroup cg(layout_, req.clone);
  int index = next_index_;
  std::optional<Conn> c1;
  UniqueFd clone_endpoint, cuda_fork;  // --cuda: the clone's endpoint; the daemon's fork reply
  auto cleanup = [&](Status s) -> Status {
    if (c1) (void)SendLine(c1->fd.get(), "ERR 5 " + s.message());
    clone_endpoint.Reset();
    (void)cg.Destroy();
    std::error_code ec;
    std::filesystem::remove_all(cp.dir, ec);
    return s;
  };
  Status s = [&]() -> Status {
    RETURN_IF_ERROR(MkDirOwned(cp.dir, 0711, -1));
    // No copy: the golden's writable layer (frozen when it changed) is the
    // clone's read-only lower; the clone writes into a fresh upper.
    auto t_layers = Clock::now();
    ASSIGN_OR_RETURN(auto refreshed, layers_->FreezeIfDirty());
    if (refreshed) {
      GuestMounts gm;
      gm.tmp = std::move(refreshed->tmp);
      gm.workspace = std::move(refreshed->workspace);
      gm.replace = true;
      gm.retired = &retired_;
      RETURN_IF_ERROR(InjectGuestMounts(init_pid_, std::move(gm), layout_));
    }
    ASSIGN_OR_RETURN(WritableMounts clone_disk, layers_->ForClone());
    Log("fork: disk layers ready in " +
        std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t_layers).count()) +
        " us (" + (refreshed ? "golden's layer frozen, " : "") + std::to_string(layers_->frozen_layers()) +
        " frozen)");
    UniqueFd log(::open(cp.log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
    if (!log.valid()) return ErrnoStatus("open " + cp.log, errno);
    CgroupLimits limits;
    limits.cpus = clone.spec.cpus;
    limits.cpuset = clone.cpuset;
    limits.mem_bytes = clone.spec.mem_mib << 20;
    RETURN_IF_ERROR(cg.Create(limits));
    auto deadline = Clock::now() + kCloneStepTimeout;
    if (cuda_) {
      // The clone's own endpoint, then the daemon's GPU fork of the golden's
      // session into a clone session of that machine. The golden's cudart
      // shim waits for the daemon's order inside the FORK line's
      // prepare_fork hook and takes the clone's token from it.
      ASSIGN_OR_RETURN(clone_endpoint, AttachCudaMachine(*cuda_, req.clone, cp.cuda_sock, cg.dirs(),
                                                         clone.spec.gpu_mem_mib << 20));
      ASSIGN_OR_RETURN(cuda_fork, SendCudaMachineFork(*cuda_, name_, golden_pid_, req.clone, req.share,
                                                      static_cast<int>(kCudaForkTimeout.count() * 1000)));
      deadline = Clock::now() + kCudaForkTimeout;
    }

    next_index_++;
    RETURN_IF_ERROR(SendLine(golden_->fd.get(), "FORK " + std::to_string(index) + " " + req.clone + " " +
                                                    req.share + " -"));
    bool gpu_fork = cuda_.has_value();
    // The daemon answers early only when it will not fork the golden's GPU
    // session: no session (a CPU-only golden) or an error.
    auto daemon_answered = [&]() -> Status {
      auto rep = ReadCudaMachineFork(cuda_fork.get(), Clock::now() + std::chrono::seconds(1));
      cuda_fork.Reset();
      if (rep.ok()) return Internal("the CUDA daemon finished a fork before the golden forked");
      if (rep.status().code() == static_cast<int32_t>(Code::kNotFound)) {
        gpu_fork = false;
        return Status::Ok();
      }
      return Status(rep.status().code(), "GPU fork: " + rep.status().message());
    };
    // Wait for C1's connection; the golden may report a failed fork instead.
    while (!c1) {
      struct pollfd p[3] = {{fp_listen_.get(), POLLIN, 0}, {golden_->fd.get(), POLLIN, 0}, {cuda_fork.get(), POLLIN, 0}};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return Timeout("the golden did not fork in time");
      if (::poll(p, 3, static_cast<int>(left)) < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
      if (cuda_fork.valid() && p[2].revents) RETURN_IF_ERROR(daemon_answered());
      if (p[1].revents) {
        Status f = Fill(*golden_, deadline);
        if (!f.ok()) return Unavailable("the golden left its forkpoint: " + f.message());
        while (auto line = PopLine(*golden_)) {
          int i, r;
          if (std::sscanf(line->c_str(), "FORKED %d %d", &i, &r) == 2 && i == index && r < 0) {
            // A GPU fork the daemon gave up on cancels the golden's wait: its
            // reason is the one to report.
            if (cuda_fork.valid()) RETURN_IF_ERROR(daemon_answered());
            return Internal("the golden could not fork: " + std::string(std::strerror(-r)));
          }
        }
      }
      if (p[0].revents) {
        int fd = ::accept4(fp_listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) continue;
        Conn c;
        c.kind = Conn::kClone;
        c.fd.Reset(fd);
        c.peer = PeerPid(fd);
        int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
        auto line = ReadLine(c, std::min(deadline, Clock::now() + std::chrono::seconds(2)));
        int i;
        if (line.ok() && std::sscanf(line->c_str(), "CLONE %d", &i) == 1 && i == index &&
            ParentPid(c.peer) == golden_pid_) {
          c1.emplace(std::move(c));
        } else {
          (void)SendLine(fd, "ERR 16 a fork is in progress");
        }
      }
    }
    RETURN_IF_ERROR(cg.AddProcess(c1->peer));
    RETURN_IF_ERROR(SendLine(c1->fd.get(), "MOVED"));
    ASSIGN_OR_RETURN(std::string line, ReadLine(*c1, deadline));
    if (line != "UNSHARED") return Internal("clone setup failed: " + line);
    GuestMounts gm;
    gm.tmp = std::move(clone_disk.tmp);
    gm.workspace = std::move(clone_disk.workspace);
    gm.cgroupfs = true;
    gm.replace = true;
    if (cuda_) gm.cuda_sock = cp.cuda_sock;
    RETURN_IF_ERROR(InjectGuestMounts(c1->peer, std::move(gm), layout_));
    RETURN_IF_ERROR(SendLine(c1->fd.get(), "READY", log.get()));
    pid_t init = 0;
    ASSIGN_OR_RETURN(line, ReadLine(*c1, deadline, &init));
    if (line != "INIT" || init <= 0 || !InMachineCgroup(init, req.clone))
      return Internal("clone did not come up: " + line);
    if (gpu_fork && cuda_fork.valid()) {
      // Done when the clone's program has re-attached as the clone session
      // (its first CUDA call, the handshake, served).
      auto rep = ReadCudaMachineFork(cuda_fork.get(), deadline);
      if (!rep.ok()) return Status(rep.status().code(), "GPU fork: " + rep.status().message());
      Log("GPU fork into '" + req.clone + "': " + *rep);
    }
    c1->cuda = std::move(clone_endpoint);
    c1->clone = req.clone;
    *init_out = init;
    *index_out = index;
    int64_t start = ProcessStartTime(init);
    RETURN_IF_ERROR(Update(req.clone, [&](MachineRecord& r) {
      r.state = kStateRunning;
      r.fork_index = index;
      r.init_pid = init;
      r.init_start = start;
      r.supervisor_pid = ::getpid();
      r.supervisor_start = ProcessStartTime(::getpid());
      r.started_at = NowSeconds();
      r.run_id++;
      return Status::Ok();
    }));
    conns_.push_back(std::move(*c1));
    c1.reset();
    return Status::Ok();
  }();
  if (!s.ok()) {
    (void)cleanup(s);
    (void)store_->Transaction([&]() -> Status {
      ASSIGN_OR_RETURN(auto r, store_->Find(req.clone));
      if (r && r->state == kStateForking) return store_->Delete(req.clone);
      return Status::Ok();
    });
  }
  return s;
}

void Supervisor::ServeForks() {
  while (!pending_.empty() && golden_ != nullptr && !golden_->dead) {
    PendingFork req = pending_.front();
    pending_.pop_front();
    if (req.ctl->dead) continue;
    int index = -1;
    pid_t init = 0;
    auto t0 = Clock::now();
    Status s = DoFork(req, &index, &init);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    if (s.ok()) {
      Log("fork: clone " + std::to_string(index) + " '" + req.clone + "' pid " + std::to_string(init) +
          " ms=" + std::to_string(ms));
      (void)SendLine(req.ctl->fd.get(), "OK " + std::to_string(index) + " " + std::to_string(init));
    } else {
      Log("fork of '" + req.clone + "' failed: " + s.message());
      (void)SendLine(req.ctl->fd.get(), ErrLine(s));
    }
    req.ctl->dead = true;
    if (s.code() == static_cast<int32_t>(Code::kUnavailable)) golden_->dead = true;
  }
  // After the replies: dropping the golden's old overlays may take a while
  // (their cached dentries go with them).
  if (pending_.empty()) retired_.clear();
}

}  // namespace smolvm::machine
