// Fork requests on the control socket (supervisor.h): FORK for one clone,
// FORKN for many. A request is served whole, once the golden waits at its
// forkpoint: every clone's pieces first, then for a --cuda golden one daemon
// request for all of its clones (the daemon builds them and gives the
// golden all their orders at once, when the first is built), then the golden forks them one after
// the other, each fork overlapping the earlier clones' setup; the clones'
// programs go on together once all are made (GO, at commit). The request is
// all or nothing: on any failure, or when its caller hung up before the
// answer (Ctrl-C), every clone it made is undone.
#include <errno.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "machine/errors.h"
#include "machine/process.h"
#include "machine/sandbox.h"
#include "machine/supervisor_internal.h"

namespace smolvm::machine {

Status Supervisor::DoForks(const PendingFork& req, std::vector<CloneWork>* works, ForkRun* run) {
  run->share = req.share;
  run->t0 = Clock::now();
  for (const auto& name : req.clones) {
    ASSIGN_OR_RETURN(MachineRecord rec, store_->Get(name));
    if (rec.golden != name_ || rec.state != kStateForking)
      return WrongState("machine '" + name + "' is not a clone being forked from '" + name_ + "'");
    works->emplace_back(home_, layout_, name);
    works->back().rec = std::move(rec);
  }
  // The golden's writable layer, frozen once for all of them when it changed.
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
  for (auto& w : *works) RETURN_IF_ERROR(PrepareClone(w));
  Log("fork: " + std::to_string(works->size()) + " clone(s) prepared in " +
      std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t_layers).count()) +
      " us (" + (refreshed ? "golden's layer frozen, " : "") + std::to_string(layers_->frozen_layers()) +
      " frozen layers)");
  auto c1_deadline = Clock::now() + kCloneStepTimeout;
  if (cuda_) {
    // One daemon request for every clone; the golden's cudart shim waits for
    // the daemon's order inside each FORK line's prepare_fork hook and takes
    // that clone's token from it.
    ASSIGN_OR_RETURN(run->cuda_fork, SendCudaMachineFork(*cuda_, name_, golden_pid_, req.clones, req.share,
                                                         static_cast<int>(kCudaForkTimeout.count() * 1000)));
    run->daemon_asked_ms = std::chrono::duration<double, std::milli>(Clock::now() - run->t0).count();
    run->gpu_fork = true;
    // The first clone's order comes once the daemon has built one.
    c1_deadline = Clock::now() + kCudaForkTimeout;
  }
  // The golden forks one clone's C1 after the other, each as soon as the
  // last one connected; meanwhile the C1s already forked unshare, get their
  // mounts and fork their inits, each as far as its lines have come, without
  // waiting for one another (the golden's forks set the pace, not the
  // clones' setup). Then each clone not up yet is waited for. On failure k
  // is the last clone whose order was sent.
  Status s = Status::Ok();
  const size_t n = works->size();
  size_t k = 0, first_not_up = 0;
  // Clones [first_not_up, upto) go on; wait: each until it is up.
  auto advance = [&](size_t upto, bool wait) {
    for (size_t j = first_not_up; j < upto; ++j) {
      CloneWork& w = (*works)[j];
      if (w.init != 0) continue;
      Status a = AdvanceClone(w, *run, wait ? std::optional(Clock::now() + kCloneStepTimeout) : std::nullopt);
      if (!a.ok()) return a;
    }
    while (first_not_up < upto && (*works)[first_not_up].init != 0) ++first_not_up;
    return Status::Ok();
  };
  for (; k < n; ++k) {
    s = StartClone((*works)[k], *run, k == 0 ? c1_deadline : Clock::now() + kCloneStepTimeout);
    if (!s.ok() || !(s = advance(k + 1, false)).ok()) break;
  }
  if (s.ok() && !(s = advance(n, true)).ok()) k = n - 1;
  if (s.ok() && run->gpu_fork && run->cuda_fork.valid()) {
    // Done when every clone's program has re-attached as its clone session
    // (its first CUDA call, the handshake, served).
    auto rep = ReadCudaMachineFork(run->cuda_fork.get(), Clock::now() + kCudaForkTimeout);
    // No CUDA session after all (its answer came after the first child): the
    // golden forked as a CPU program, with no GPU order to wait for.
    if (rep.status().code() == static_cast<int32_t>(Code::kNotFound)) {
      run->gpu_fork = false;
      return s;
    }
    if (!rep.ok()) return Status(rep.status().code(), "GPU fork: " + rep.status().message());
    auto lines = nlohmann::json::parse(*rep, nullptr, false);
    if (!lines.is_array() || lines.size() != works->size())
      return Internal("GPU fork: the CUDA daemon's reply does not list " + std::to_string(works->size()) + " clones");
    for (size_t i = 0; i < works->size(); ++i) {
      CloneWork& w = (*works)[i];
      Log("GPU fork into '" + w.name + "': " + lines[i].dump());
      // Serving: the daemon's own clock from the request's arrival to the
      // clone's first call, on ours from when the request met the golden.
      const double at = run->daemon_asked_ms + lines[i].value("waited_ms", 0.0);
      double attached = at + lines[i].value("ms", 0.0);
      w.ms = std::max(w.ms, attached);
      auto daemon_step = [&](const char* key) {
        double v = lines[i].value(key, 0.0);
        return v > 0 ? at + v : 0.0;
      };
      w.steps.built = daemon_step("built_at_ms");
      w.steps.released = daemon_step("released_ms");
      w.steps.hello = daemon_step("hello_ms");
    }
  }
  if (!s.ok() && run->released && !run->golden_gone) {
    // The golden still holds the orders of the clones not forked: it spends
    // them now, or a later request would fork with this one's tokens.
    size_t first = k < works->size() && (*works)[k].order_spent ? k + 1 : k;
    for (size_t j = first; j < works->size(); ++j) {
      Status spent = SpendOrder((*works)[j].name, *run);
      if (!spent.ok()) {
        Log("fork: the golden's order for '" + (*works)[j].name + "' was not spent: " + spent.message());
        break;
      }
    }
  }
  return s;
}

void Supervisor::AnnounceForkpoint(bool at) {
  if (!cuda_ || golden_pid_ <= 0) return;
  Status st = AnnounceCudaForkpoint(*cuda_, name_, golden_pid_, at);
  if (!st.ok() && st.code() != static_cast<int32_t>(Code::kNotFound))
    Log(std::string("forkpoint: the CUDA daemon was not told the golden ") + (at ? "waits" : "left") + ": " +
        st.message());
}

std::string Supervisor::CloneLine(const CloneWork& w) {
  // "fork: clone <i> '<name>' pid <init> ms=<t>", then its steps (ms since
  // the request met the golden, like ms); a GPU fork's daemon steps too.
  char steps[256];
  const CloneWork::Steps& t = w.steps;
  int n = std::snprintf(steps, sizeof steps, " order=%.1f c1=%.1f cgroup=%.1f unshared=%.1f mounts=%.1f init=%.1f",
                        t.order, t.c1, t.cgroup, t.unshared, t.mounts, t.init);
  if (t.hello > 0 && n > 0 && static_cast<size_t>(n) < sizeof steps)
    std::snprintf(steps + n, sizeof steps - n, " built=%.1f released=%.1f hello=%.1f", t.built, t.released, t.hello);
  return "fork: clone " + std::to_string(w.index) + " '" + w.name + "' pid " + std::to_string(w.init) +
         " ms=" + std::to_string(static_cast<int64_t>(w.ms)) + steps;
}

Status Supervisor::Commit(std::vector<CloneWork>& works, bool park) {
  const int64_t now = NowSeconds();
  const int64_t self_start = ProcessStartTime(::getpid());
  RETURN_IF_ERROR(store_->Transaction([&]() -> Status {
    for (auto& w : works) {
      ASSIGN_OR_RETURN(auto r, store_->Find(w.name));
      if (!r || r->state != kStateForking) return WrongState("machine '" + w.name + "' was removed while it was forked");
      r->state = kStateRunning;
      r->fork_index = w.index;
      r->init_pid = w.init;
      r->init_start = ProcessStartTime(w.init);
      r->supervisor_pid = ::getpid();
      r->supervisor_start = self_start;
      r->started_at = now;
      r->run_id++;
      if (park) r->detail = kDetailWarming;
      RETURN_IF_ERROR(store_->Put(*r));
    }
    return Status::Ok();
  }));
  for (auto& w : works) {
    // Every clone made: their programs go on past the forkpoint together,
    // or, parked, each once its first lease payload comes.
    leases_->AddClone(w.name, std::move(w.lease_listen), park);
    if (!park) (void)SendLine(w.conn->fd.get(), "GO");
    w.conn->cuda = std::move(w.endpoint);
    w.conn->clone = w.name;
    conns_.push_back(std::move(*w.conn));
    w.conn.reset();
  }
  leases_->Prune();
  return Status::Ok();
}

std::vector<std::string> Supervisor::AnswerLines(const PendingFork& req, const std::vector<CloneWork>& works) {
  if (!req.batch) return {"OK " + std::to_string(works[0].index) + " " + std::to_string(works[0].init)};
  std::vector<std::string> lines;
  for (const auto& w : works) {
    char line[160];
    std::snprintf(line, sizeof line, "CLONE %s %d %d %.1f", w.name.c_str(), w.index, static_cast<int>(w.init), w.ms);
    lines.push_back(line);
  }
  lines.push_back("OK " + std::to_string(works.size()));
  return lines;
}

void Supervisor::Answer(const PendingFork& req, const Status& s, const std::vector<CloneWork>& works) {
  int fd = req.ctl->fd.get();
  if (!s.ok()) {
    (void)SendLine(fd, ErrLine(s));
    return;
  }
  for (const auto& line : AnswerLines(req, works)) (void)SendLine(fd, line);
}

void Supervisor::DeleteForkingRows(const std::vector<std::string>& names) {
  Status s = store_->Transaction([&]() -> Status {
    for (const auto& n : names) {
      ASSIGN_OR_RETURN(auto r, store_->Find(n));
      if (r && r->state == kStateForking && r->golden == name_) RETURN_IF_ERROR(store_->Delete(n));
    }
    return Status::Ok();
  });
  if (!s.ok()) Log("removing the rows of clones not made: " + s.message());
}

void Supervisor::DropPending(const PendingFork& req, const Status& why) {
  (void)SendLine(req.ctl->fd.get(), ErrLine(why));
  req.ctl->dead = true;
  DeleteForkingRows(req.clones);
}

void Supervisor::ServeForks() {
  while (!pending_.empty() && golden_ != nullptr && !golden_->dead) {
    PendingFork req = pending_.front();
    pending_.pop_front();
    const std::string what = req.clones.size() == 1 ? "'" + req.clones[0] + "'" : std::to_string(req.clones.size()) + " clones";
    if (req.ctl->dead || PeerHungUp(req.ctl->fd.get())) {
      DropPending(req, Cancelled("the fork of " + what + " was cancelled by its caller"));
      continue;
    }
    std::vector<CloneWork> works;
    ForkRun run;
    auto t0 = Clock::now();
    Status s = DoForks(req, &works, &run);
    if (s.ok() && PeerHungUp(req.ctl->fd.get()))
      s = Cancelled("the fork of " + what + " was cancelled by its caller (Ctrl-C); its clones are removed");
    if (s.ok()) s = Commit(works, req.park);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    if (s.ok()) {
      for (const auto& w : works) Log(CloneLine(w));
      Log("fork: " + std::to_string(works.size()) + " clone(s) in one request" + (run.gpu_fork ? " (one GPU fork)" : "") +
          (req.park ? " (parked)" : "") +
          " ms=" + std::to_string(ms));
    } else {
      Log("fork of " + what + " failed: " + s.message());
      for (auto& w : works) UndoClone(w);
      DeleteForkingRows(req.clones);
    }
    run.cuda_fork.Reset();
    if (s.ok() && req.park) {
      // Answered once its clones parked (their warm-ups done): ServeParked.
      ParkRequest(req, AnswerLines(req, works), works);
    }
    if (s.ok()) {
      // What a clone's init said after its INIT while the rest of the request
      // was made (PARKED, EXIT) sits in its buffer: the loop polls only what
      // comes later.
      for (auto& c : conns_) {
        if (c.kind != Conn::kClone || c.buf.empty() ||
            std::find(req.clones.begin(), req.clones.end(), c.clone) == req.clones.end())
          continue;
        while (!c.dead) {
          auto line = PopLine(c);
          if (!line) break;
          OnLine(c, *line);
        }
      }
    }
    if (!s.ok() || !req.park) {
      Answer(req, s, works);
      req.ctl->dead = true;
    }
    if (run.golden_gone) golden_->dead = true;
  }
  // After the replies: dropping the golden's old overlays may take a while
  // (their cached dentries go with them).
  if (pending_.empty()) retired_.clear();
}

}  // namespace smolvm::machine
