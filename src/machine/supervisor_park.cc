// Parked fork requests (FORKN park=1, supervisor.h) between their commit and
// their answer: each clone's program may warm up before it parks
// (smolvm_fork_child_park; python: smolvm.forkpoint(warmup=fn)), and the
// request is answered once every clone parked (its init says PARKED), was
// released before it parked (its first payload came), or -- a failure of the
// whole request -- ended first, outlived the request's timeout, or its caller
// hung up. On a failure every clone of the request is killed (its cgroup
// destroyed; its row ends failed) and the caller removes them, so a request
// stays all or nothing for its caller (ForkMachine does).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "machine/errors.h"
#include "machine/supervisor_internal.h"

namespace smolvm::machine {
namespace {

// The last bytes of a clone's log (its program's stdout and stderr), one line.
std::string LogTail(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return "";
  off_t end = ::lseek(fd.get(), 0, SEEK_END);
  if (end <= 0) return "";
  off_t from = end > static_cast<off_t>(max_bytes) ? end - static_cast<off_t>(max_bytes) : 0;
  std::string out(static_cast<size_t>(end - from), '\0');
  ssize_t n = ::pread(fd.get(), out.data(), out.size(), from);
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  for (char& ch : out)
    if (ch == '\n' || ch == '\r' || static_cast<unsigned char>(ch) < 0x20) ch = ' ';
  return out;
}

}  // namespace

void Supervisor::ParkRequest(const PendingFork& req, std::vector<std::string> answer,
                             const std::vector<CloneWork>& works) {
  ParkingFork p;
  p.ctl = req.ctl;
  p.answer = std::move(answer);
  p.t0 = Clock::now();
  p.deadline = p.t0 + req.timeout;
  for (const auto& w : works) {
    p.clones.push_back(w.name);
    p.waiting.insert(w.name);
  }
  parking_.push_back(std::move(p));
}

void Supervisor::CloneParked(const std::string& clone, bool released) {
  for (auto& p : parking_) {
    if (p.waiting.erase(clone) == 0) continue;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - p.t0).count();
    Log("fork: clone '" + clone + "' " + (released ? "released before it parked" : "parked") + " " +
        std::to_string(ms) + " ms after its request's commit");
  }
  if (released) return;
  (void)Update(clone, [](MachineRecord& r) {
    if (r.detail == kDetailWarming) r.detail = kDetailParked;
    return Status::Ok();
  });
}

void Supervisor::CloneEndedWhileParking(const std::string& clone) {
  for (auto& p : parking_) {
    if (p.waiting.count(clone) == 0 || !p.failure.ok()) continue;
    auto rec = store_->Find(clone);
    int code = rec.ok() && *rec ? (**rec).exit_code : -1;
    std::string tail = LogTail(MachinePaths(home_, clone).log, 400);
    // More of it here, in the golden's log: the clone's machine is removed
    // with the failed fork, its log with it.
    Log("clone '" + clone + "' ended before it parked; the end of its log:\n" +
        LogTail(MachinePaths(home_, clone).log, 4000));
    p.failure = Internal("clone '" + clone + "' ended before it parked (" +
                         (code >= 0 ? "exit code " + std::to_string(code) : std::string("its init died")) +
                         "; a warm-up that failed?)" + (tail.empty() ? "" : ": its log ends: " + tail));
  }
}

void Supervisor::ServeParked() {
  auto now = Clock::now();
  for (auto it = parking_.begin(); it != parking_.end();) {
    ParkingFork& p = *it;
    if (p.failure.ok() && (p.ctl->dead || PeerHungUp(p.ctl->fd.get())))
      p.failure = Cancelled("the fork of " + std::to_string(p.clones.size()) +
                            " parked clone(s) was cancelled by its caller while they warmed up");
    if (p.failure.ok() && !p.waiting.empty() && now >= p.deadline) {
      std::string names;
      for (const auto& n : p.waiting) names += (names.empty() ? "'" : ", '") + n + "'";
      p.failure = Timeout("clone(s) " + names + " did not park in time (their warm-up still runs? see 'smolvm machine logs')");
    }
    if (p.failure.ok() && !p.waiting.empty()) {
      ++it;
      continue;
    }
    if (p.failure.ok()) {
      for (const auto& line : p.answer) (void)SendLine(p.ctl->fd.get(), line);
    } else {
      Log("fork of " + std::to_string(p.clones.size()) + " parked clone(s) failed: " + p.failure.message());
      for (const auto& n : p.clones) {
        Status killed = MachineCgroup(layout_, n).Destroy();
        if (!killed.ok()) Log(killed.message());
      }
      (void)SendLine(p.ctl->fd.get(), ErrLine(p.failure));
    }
    p.ctl->dead = true;
    it = parking_.erase(it);
  }
}

int Supervisor::ParkingTimeoutMs() const {
  int timeout = -1;
  auto now = Clock::now();
  for (const auto& p : parking_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(p.deadline - now).count();
    int ms = static_cast<int>(std::clamp<int64_t>(left, 0, 3600 * 1000)) + 1;
    timeout = timeout < 0 ? ms : std::min(timeout, ms);
  }
  return timeout;
}

void Supervisor::FailParking(const Status& why) {
  for (auto& p : parking_)
    if (p.failure.ok()) p.failure = why;
  ServeParked();
}

void Supervisor::ReleaseParked(const std::string& clone) {
  for (auto& c : conns_) {
    if (c.kind != Conn::kClone || c.clone != clone || c.dead) continue;
    Status s = SendLine(c.fd.get(), "GO");
    Log("lease: parked clone '" + clone + "' released" + (s.ok() ? "" : ": " + s.message()));
    CloneParked(clone, /*released=*/true);
    released_.push_back(clone);  // its record after this round of the loop (FlushReleased)
    return;
  }
}

void Supervisor::FlushReleased() {
  // One transaction for every clone released in this round of the loop: a
  // write each, in line, held up the next lease links of the same round
  // (64 acquires at once, issue 32).
  if (released_.empty()) return;
  std::vector<std::string> clones;
  clones.swap(released_);
  Status s = store_->Transaction([&]() -> Status {
    for (const auto& clone : clones) {
      ASSIGN_OR_RETURN(auto r, store_->Find(clone));
      if (!r || (r->detail != kDetailParked && r->detail != kDetailWarming)) continue;
      r->detail.clear();
      RETURN_IF_ERROR(store_->Put(*r));
    }
    return Status::Ok();
  });
  if (!s.ok()) Log("lease: the records of " + std::to_string(clones.size()) + " released clone(s): " + s.message());
}

}  // namespace smolvm::machine
