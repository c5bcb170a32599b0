#include "machine/supervisor.h"
#include "machine/supervisor_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "guest/forkpoint_wire.h"
#include "guest/init_loop.h"
#include "machine/cgroups.h"
#include "machine/golden_end.h"
#include "machine/cuda_link.h"
#include "machine/disk_layers.h"
#include "machine/errors.h"
#include "machine/pack_mount.h"
#include "machine/process.h"
#include "machine/sandbox.h"
#include "machine/store.h"
#include "machine/supervisor_conn.h"
#include "transport/unix_channel.h"

extern char** environ;

namespace smolvm::machine {

// Back in the host's mount namespace, drops this machine's use of its pack
// (unmounting it when the last user is gone).
void Supervisor::ReleaseHostResources() {
  layers_.reset();
  if (host_mnt_.valid()) {
    Status s = SetnsMount(host_mnt_.get());
    if (!s.ok()) Log(s.message());
    host_mnt_.Reset();
  }
  if (pack_held_) {
    Status s = ReleasePack(*store_, home_, name_);
    if (!s.ok()) Log("releasing the pack: " + s.message());
    pack_held_ = false;
  }
}

void Supervisor::ReleaseBackend() {
  if (!backend_) return;
  SandboxConfig cfg;
  cfg.name = name_;
  cfg.spec = rec_.spec;
  cfg.paths = paths_;
  cfg.layout = layout_;
  backend_->Release(cfg);
}

void Supervisor::Log(const std::string& msg) { std::fprintf(stderr, "smolvm supervisor[%s]: %s\n", name_.c_str(), msg.c_str()); }

Status Supervisor::Update(const std::string& name, const std::function<Status(MachineRecord&)>& fn) {
  return store_->Update(name, fn);
}

Status Supervisor::Start() {
  ASSIGN_OR_RETURN(rec_, store_->Get(name_));
  if (rec_.run_id != run_id_ || rec_.state != kStateStarting)
    return WrongState("machine '" + name_ + "' is no longer starting (state " + rec_.state + ")");
  ASSIGN_OR_RETURN(layout_, DetectCgroups());
  cgroup_.emplace(layout_, name_);
  if (cgroup_->Exists()) RETURN_IF_ERROR(cgroup_->Destroy());  // leftover of a crashed run
  CgroupLimits limits;
  limits.cpus = rec_.spec.cpus;
  limits.cpuset = rec_.cpuset;
  limits.mem_bytes = rec_.spec.mem_mib << 20;
  limits.pids = PidsLimit(rec_.spec);
  RETURN_IF_ERROR(cgroup_->Create(limits));

  RETURN_IF_ERROR(MkDirOwned(paths_.dir, 0700, -1));  // paths.h: no other host user reaches below
  RETURN_IF_ERROR(MkDirOwned(paths_.root, 0711, -1));
  RETURN_IF_ERROR(MkDirOwned(paths_.run, 0711, -1));
  RETURN_IF_ERROR(MkDirOwned(paths_.lib, 0755, -1));
  RETURN_IF_ERROR(MkDirOwned(paths_.run + "/python", 0755, -1));  // mount point of <shim dir>/python
  RETURN_IF_ERROR(MkDirOwned(paths_.guest, 0700, rec_.uid_base));
  const bool pack = !rec_.spec.image.empty() && IsPackFile(rec_.spec.image);
  if (!rec_.spec.image.empty() && !pack) {
    RETURN_IF_ERROR(MkDirOwned(paths_.upper, 0755, rec_.uid_base));
    RETURN_IF_ERROR(MkDirOwned(paths_.work, 0700, rec_.uid_base));
  }
  if (!rec_.spec.cuda) {
    UniqueFd f(::open((paths_.lib + "/libsmolvm-guest.so").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
  }

  if (rec_.spec.cuda) {
    // The daemon first (started on demand), then this machine's own endpoint,
    // bound over the placeholder at /run/smolvm/cuda.sock.
    ASSIGN_OR_RETURN(CudaDaemon d, EnsureCudaDaemon(home_));
    cuda_ = d;
    UniqueFd placeholder(::open(paths_.cuda_mount.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    if (!placeholder.valid()) return ErrnoStatus("create " + paths_.cuda_mount, errno);
    const auto attach = [&] {
      return AttachCudaMachine(*cuda_, name_, paths_.cuda_sock, cgroup_->dirs(), rec_.spec.gpu_mem_mib << 20,
                               rec_.forkable, static_cast<uid_t>(rec_.uid_base),
                               rec_.spec.isolation == Isolation::kGvisor);
    };
    auto endpoint = attach();
    if (!endpoint.ok() && !FindCudaDaemon(home_).ok()) {
      // It stopped for idleness between the two calls (docs/daemon.md,
      // "Lifetime"): start the next one and attach there.
      ASSIGN_OR_RETURN(d, EnsureCudaDaemon(home_));
      cuda_ = d;
      endpoint = attach();
    }
    if (!endpoint.ok()) return endpoint.status();
    cuda_endpoint_ = std::move(*endpoint);
  }
  std::string pack_root, workspace_base;
  if (pack) {
    // Verified and mounted on the host once, shared by every machine on it.
    ASSIGN_OR_RETURN(MountedPack mp, AcquirePack(*store_, home_, name_, rec_.spec.image));
    pack_held_ = true;
    pack_root = mp.mount_point;
    struct stat st;
    if (::lstat((pack_root + "/workspace").c_str(), &st) == 0 && S_ISDIR(st.st_mode)) workspace_base = pack_root + "/workspace";
  }
  // From here on this process's mounts are its own (the writable layers);
  // the CUDA daemon, started above, stays in the host's namespace.
  RETURN_IF_ERROR(EnterPrivateMountNamespace(&host_mnt_));
  DiskLayers::Config lc;
  lc.dir = paths_.layers;
  lc.disk_bytes = DiskMib(rec_.spec) << 20;
  lc.uid = rec_.uid_base;
  lc.workspace_base = workspace_base;
  ASSIGN_OR_RETURN(layers_, DiskLayers::Create(lc));
  ASSIGN_OR_RETURN(ctl_listen_, ListenUnix(paths_.ctl_sock, 0600));
  if (rec_.forkable) {
    ASSIGN_OR_RETURN(fp_listen_, ListenUnix(paths_.forkpoint_sock, 0666));
    // Where each clone's own lease.sock is mounted (lease_relay.h).
    UniqueFd placeholder(::open(paths_.lease_mount.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    if (!placeholder.valid()) return ErrnoStatus("create " + paths_.lease_mount, errno);
  }

  SandboxConfig cfg;
  cfg.name = name_;
  cfg.spec = rec_.spec;
  cfg.uid_base = rec_.uid_base;
  cfg.paths = paths_;
  cfg.shim_dir = ShimDir();
  cfg.forkable = rec_.forkable;
  cfg.layout = layout_;
  cfg.cgroup = &*cgroup_;
  cfg.pack_root = pack_root;
  cfg.workdir = Workdir(rec_.spec);
  cfg.mount_writable = [&](pid_t pid) -> Status {
    ASSIGN_OR_RETURN(WritableMounts w, layers_->Golden());
    GuestMounts gm;
    gm.tmp = std::move(w.tmp);
    gm.workspace = std::move(w.workspace);
    gm.cgroupfs = true;
    if (rec_.spec.cuda) gm.cuda_sock = paths_.cuda_sock;
    return InjectGuestMounts(pid, std::move(gm), layout_);
  };
  backend_ = MakeBackend(rec_.spec.isolation);
  ASSIGN_OR_RETURN(init_pid_, backend_->Launch(cfg, &report_));
  return Update(name_, [&](MachineRecord& r) {
    r.state = kStateRunning;
    r.init_pid = init_pid_;
    r.init_start = ProcessStartTime(init_pid_);
    r.supervisor_pid = ::getpid();
    r.supervisor_start = ProcessStartTime(::getpid());
    r.started_at = NowSeconds();
    return Status::Ok();
  });
}

int Supervisor::Run(int ready_fd) {
  auto ready = [&](const std::string& line) {
    std::string s = line + "\n";
    (void)!::write(ready_fd, s.data(), s.size());
    ::close(ready_fd);
  };
  auto store = Store::Open(home_);
  if (!store.ok()) {
    ready(ErrLine(store.status()));
    return 1;
  }
  store_ = std::move(store).value();
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  signals_.Reset(::signalfd(-1, &mask, SFD_CLOEXEC));
  Status s = Start();
  if (!s.ok()) {
    Log("start failed: " + s.message());
    (void)Update(name_, [&](MachineRecord& r) {
      if (r.run_id != run_id_) return Status::Ok();
      r.state = kStateFailed;
      r.detail = s.message();
      r.init_pid = 0;
      r.supervisor_pid = 0;
      return Status::Ok();
    });
    ReleaseBackend();
    if (cgroup_) (void)cgroup_->Destroy();
    ReleaseHostResources();
    ::unlink(paths_.ctl_sock.c_str());
    ::unlink(paths_.forkpoint_sock.c_str());
    ::unlink(paths_.cuda_sock.c_str());
    ready(ErrLine(s));
    return 1;
  }
  ready("OK");
  LeaseRelay::Hooks hooks;
  hooks.release = [this](const std::string& clone) { ReleaseParked(clone); };
  hooks.in_clone = [](pid_t pid, const std::string& clone) { return InMachineCgroup(pid, clone); };
  hooks.exists = [this](const std::string& clone) {
    auto r = store_->Find(clone);
    return !r.ok() || r->has_value();  // a store error keeps the link
  };
  hooks.log = [this](const std::string& msg) { Log(msg); };
  leases_ = std::make_unique<LeaseRelay>(std::move(hooks));
  Loop();
  return 0;
}

void Supervisor::Accept(int listen_fd, Conn::Kind kind) {
  int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;
  if (kind == Conn::kGuestNew) {
    size_t guests = 0;
    for (auto& c : conns_) guests += c.kind != Conn::kCtl;
    if (guests >= kMaxGuestConns) {
      ::close(fd);
      return;
    }
  }
  Conn c;
  c.kind = kind;
  c.fd.Reset(fd);
  c.peer = PeerPid(fd);
  conns_.push_back(std::move(c));
}

void Supervisor::OnLine(Conn& c, const std::string& line) {
  switch (c.kind) {
    case Conn::kCtl: {
      // One request per connection (supervisor.h): lines after it are ignored.
      for (const auto& p : pending_)
        if (p.ctl == &c) return;
      c.dead = true;
      if (line == "CAPS") {
        (void)SendLine(c.fd.get(), "CAPS fork fork-count fork-cancel fork-park lease release");
        return;
      }
      if (line.rfind("LEASE ", 0) == 0) {
        AttachLeaseReader(c, line.substr(6));
        return;
      }
      if (line == "RELEASE") {
        (void)SendLine(c.fd.get(), ReleaseGolden());
        return;
      }
      PendingFork req;
      req.ctl = &c;
      long long timeout_ms = 0;
      std::istringstream in(line);
      std::string verb, clone;
      in >> verb;
      if (verb == "FORK") {
        if (in >> clone >> req.share >> timeout_ms) req.clones.push_back(clone);
      } else if (verb == "FORKN") {
        req.batch = true;
        // Options (words with '=', which no machine name has) come before the names.
        bool bad_option = false;
        if (in >> req.share >> timeout_ms) {
          while (in >> clone && req.clones.size() <= kMaxForkCount) {
            if (clone.find('=') == std::string::npos) {
              req.clones.push_back(clone);
            } else if (clone == "park=1" && req.clones.empty()) {
              req.park = true;
            } else {
              bad_option = true;
            }
          }
        }
        if (bad_option) {
          (void)SendLine(c.fd.get(), ErrLine(InvalidArgument("malformed request: " + line.substr(0, 200))));
          return;
        }
      } else {
        (void)SendLine(c.fd.get(), ErrLine(InvalidArgument("unknown request")));
        return;
      }
      bool names_ok = !req.clones.empty() && req.clones.size() <= kMaxForkCount;
      for (const auto& n : req.clones) names_ok = names_ok && n.size() < 64;
      if (!names_ok || (req.share != "on" && req.share != "off" && req.share != "auto") || timeout_ms <= 0) {
        (void)SendLine(c.fd.get(), ErrLine(InvalidArgument("malformed request: " + line.substr(0, 200))));
        return;
      }
      if (!fp_listen_.valid()) {
        (void)SendLine(c.fd.get(), ErrLine(WrongState("machine '" + name_ +
                                                      "' was not started with --forkable (stop it and 'smolvm machine start --name " +
                                                      name_ + " --forkable')")));
        return;
      }
      c.dead = false;
      req.timeout = std::chrono::milliseconds(timeout_ms);
      req.deadline = Clock::now() + req.timeout;
      pending_.push_back(std::move(req));
      return;
    }
    case Conn::kGuestNew: {
      if (line == "HELLO") {
        if (golden_ != nullptr) {
          (void)SendLine(c.fd.get(), "ERR 16 another process of this machine waits at the forkpoint");
          c.dead = true;
        } else if (c.peer <= 0 || !InMachineCgroup(c.peer, name_)) {
          (void)SendLine(c.fd.get(), "ERR 1 only the golden machine's own processes can be forked");
          c.dead = true;
        } else {
          c.kind = Conn::kGolden;
          golden_ = &c;
          golden_pid_ = c.peer;
          (void)Update(name_, [](MachineRecord& r) {
            r.detail = "at forkpoint";
            return Status::Ok();
          });
          AnnounceForkpoint(true);  // the daemon's work ahead starts now, not at the first fork
        }
        return;
      }
      (void)SendLine(c.fd.get(), "ERR 71 unexpected request");
      c.dead = true;
      return;
    }
    case Conn::kGolden:
      return;  // late "FORKED" lines
    case Conn::kClone: {
      int status;
      if (std::sscanf(line.c_str(), "EXIT %d", &status) == 1) {
        (void)Update(c.clone, [&](MachineRecord& r) {
          r.exit_code = SmolvmInitExitCode(status);
          return Status::Ok();
        });
        leases_->ProgramExited(c.clone, status);
      } else if (line == "PARKED") {
        CloneParked(c.clone, /*released=*/false);
      }
      return;
    }
  }
}

std::string Supervisor::ReleaseGolden() {
  if (golden_ == nullptr || golden_->dead)
    return ErrLine(WrongState("machine '" + name_ + "' has no process waiting at its forkpoint"));
  if (!pending_.empty()) return ErrLine(WrongState("machine '" + name_ + "' has a fork request waiting"));
  Status sent = SendLine(golden_->fd.get(), "RELEASE");
  if (!sent.ok()) return ErrLine(sent);
  // Its connection ends here (the line stays readable to it): no later
  // request sends it an order, and the loop announces it left.
  golden_->dead = true;
  Log("golden released from its forkpoint (machine stop)");
  return "OK released";
}

void Supervisor::CloneEnded(Conn& c) {
  CloneEndedWhileParking(c.clone);
  leases_->CloneEnded(c.clone);
  ::unlink(MachinePaths(home_, c.clone).lease_sock.c_str());
  MachineCgroup cg(layout_, c.clone);
  Status destroyed = cg.Destroy();
  (void)Update(c.clone, [&](MachineRecord& r) {
    if (r.state != kStateRunning && r.state != kStateStopping) return Status::Ok();
    if (r.detail == kDetailParked || r.detail == kDetailWarming) r.detail.clear();
    bool clean = r.state == kStateStopping || r.exit_code == 0;
    r.state = clean ? kStateStopped : kStateFailed;
    if (!clean) r.detail = r.exit_code >= 0 ? "program exited with code " + std::to_string(r.exit_code) : "clone init died";
    r.init_pid = 0;
    return Status::Ok();
  });
  if (!destroyed.ok()) Log(destroyed.message());
  leases_->Prune();
}

void Supervisor::AttachLeaseReader(Conn& c, const std::string& clone) {
  auto refuse = [&](const Status& s) { (void)SendLine(c.fd.get(), ErrLine(s)); };
  if (Status v = ValidateName(clone); !v.ok()) return refuse(v);
  auto rec = store_->Find(clone);
  if (!rec.ok()) return refuse(rec.status());
  if (!rec->has_value() || (**rec).golden != name_)
    return refuse(NotFound("machine '" + clone + "' is no clone of '" + name_ + "'"));
  leases_->Prune();
  if (!leases_->Has(clone)) {
    if ((**rec).state == kStateForking)
      return refuse(WrongState("clone '" + clone + "' is still being forked (open its lease link once 'machine fork' returned)"));
    return refuse(NotFound("clone '" + clone + "' has no lease link any more (it ended and its end was acknowledged, or it was made by an older smolvm)"));
  }
  if (!SendLine(c.fd.get(), "OK").ok()) return;
  // Anything the reader sent past its request line is dropped: a reader
  // waits for OK before its first frame.
  Status s = leases_->Attach(clone, std::move(c.fd));
  if (!s.ok()) Log(s.message());
}

void Supervisor::Loop() {
  while (true) {
    std::vector<struct pollfd> fds;
    fds.push_back({report_.get(), POLLIN, 0});
    fds.push_back({signals_.get(), POLLIN, 0});
    fds.push_back({ctl_listen_.get(), POLLIN, 0});
    fds.push_back({fp_listen_.valid() ? fp_listen_.get() : -1, POLLIN, 0});
    std::vector<Conn*> order;
    for (auto& c : conns_) {
      fds.push_back({c.fd.get(), POLLIN, 0});
      order.push_back(&c);
    }
    int timeout = -1;
    auto now = Clock::now();
    for (auto& p : pending_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(p.deadline - now).count();
      int ms = static_cast<int>(std::max<int64_t>(left, 0)) + 1;
      timeout = timeout < 0 ? ms : std::min(timeout, ms);
    }
    if (int parking = ParkingTimeoutMs(); parking >= 0) timeout = timeout < 0 ? parking : std::min(timeout, parking);
    const size_t lease_base = fds.size();
    leases_->AppendPollFds(&fds);
    int r = ::poll(fds.data(), fds.size(), timeout);
    if (r < 0 && errno != EINTR) break;
    // The lease links first, while the descriptors polled are still theirs.
    if (r > 0) leases_->OnPoll(fds.data() + lease_base, fds.size() - lease_base);
    if (fds[1].revents) {
      struct signalfd_siginfo si;
      if (::read(signals_.get(), &si, sizeof si) == sizeof si) {
        stopping_ = true;
        ::kill(init_pid_, SIGTERM);
      }
    }
    if (fds[0].revents) {
      // The init reports "EXIT <status>" once the program ends, and the
      // connection closes when pid 1 itself ends.
      char buf[128];
      ssize_t n = ::read(report_.get(), buf, sizeof buf);
      if (n <= 0) {
        int status = 0;
        while (::waitpid(init_pid_, &status, 0) < 0 && errno == EINTR) {
        }
        Finish(status);
        return;
      }
      int status;
      std::string text(buf, static_cast<size_t>(n));
      if (std::sscanf(text.c_str(), "EXIT %d", &status) == 1) {
        (void)Update(name_, [&](MachineRecord& rec) {
          if (rec.run_id == run_id_) rec.exit_code = SmolvmInitExitCode(status);
          return Status::Ok();
        });
      }
    }
    if (fds[2].revents) Accept(ctl_listen_.get(), Conn::kCtl);
    if (fds[3].revents) Accept(fp_listen_.get(), Conn::kGuestNew);
    for (size_t i = 0; i < order.size(); ++i) {
      if (!fds[4 + i].revents) continue;
      Conn& c = *order[i];
      Status f = Fill(c, std::nullopt);
      while (f.ok() && !c.dead) {
        auto line = PopLine(c);
        if (!line) break;
        OnLine(c, *line);
      }
      if (!f.ok()) {
        if (c.kind == Conn::kClone) CloneEnded(c);
        c.dead = true;
      }
    }
    ServeForks();
    ServeParked();
    FlushReleased();
    now = Clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->ctl->dead) {
        // Its caller went away (Ctrl-C) before the golden came to its forkpoint.
        DropPending(*it, Cancelled("the fork request was cancelled by its caller"));
        it = pending_.erase(it);
      } else if (it->deadline <= now) {
        DropPending(*it, Timeout("golden '" + name_ + "' did not reach smolvmForkpoint() in time (does its program call it? see 'smolvm machine logs --name " +
                                 name_ + "')"));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->dead) {
        if (&*it == golden_) {
          golden_ = nullptr;
          AnnounceForkpoint(false);
          (void)Update(name_, [](MachineRecord& rec) {
            if (rec.detail == "at forkpoint") rec.detail = "";
            return Status::Ok();
          });
        }
        bool referenced = false;
        for (auto& p : pending_) referenced |= p.ctl == &*it;
        for (auto& p : parking_) referenced |= p.ctl == &*it;
        if (referenced) {
          ++it;
          continue;
        }
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void Supervisor::Finish(int status) {
  FlushReleased();
  int code = SmolvmInitExitCode(status);
  // The program's exit code at once: a gVisor machine's program reports none
  // before it ends (its init is runsc), and what follows (runsc delete, the
  // cgroup) takes a while, during which `machine list` would find the init
  // gone and no code, and call the machine failed.
  (void)Update(name_, [&](MachineRecord& r) {
    if (r.run_id == run_id_ && r.exit_code < 0) r.exit_code = code;
    return Status::Ok();
  });
  for (auto& p : pending_) DropPending(p, WrongState("golden '" + name_ + "' stopped"));
  pending_.clear();
  FailParking(WrongState("golden '" + name_ + "' stopped while its parked clones warmed up"));
  EndClonesOfGolden(*store_, layout_, home_, name_);
  // The endpoint goes first, so no new session of ours starts while the
  // cgroup (with the workers that served us) is emptied.
  cuda_endpoint_.Reset();
  ReleaseBackend();
  Status destroyed = cgroup_->Destroy();
  if (!destroyed.ok()) Log(destroyed.message());
  ReleaseHostResources();
  ::unlink(paths_.ctl_sock.c_str());
  ::unlink(paths_.forkpoint_sock.c_str());
  ::unlink(paths_.cuda_sock.c_str());
  (void)Update(name_, [&](MachineRecord& r) {
    if (r.run_id != run_id_) return Status::Ok();
    bool clean = r.state == kStateStopping || stopping_ || code == 0;
    r.state = clean ? kStateStopped : kStateFailed;
    if (r.exit_code < 0) r.exit_code = code;
    r.detail = clean ? "" : "program exited with code " + std::to_string(code);
    r.init_pid = 0;
    r.supervisor_pid = 0;
    return Status::Ok();
  });
}

int RunSupervisor(const std::string& home, const std::string& name, int64_t run_id, int ready_fd) {
  Supervisor s(home, name, run_id);
  return s.Run(ready_fd);
}

}  // namespace smolvm::machine
