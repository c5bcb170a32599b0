#include "serve/fake_clone_driver.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <deque>
#include <thread>

#include "base/unique_fd.h"
#include "serve/errors.h"

namespace smolvm::serve {

// A reader: a pipe holds one byte per event not yet taken by Next.
struct FakeCloneDriver::Link final : public CloneLink {
  Link(FakeCloneDriver* d, std::string clone) : driver(d), name(std::move(clone)) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0) {
      r.Reset(p[0]);
      w.Reset(p[1]);
    }
  }
  ~Link() override {
    std::lock_guard<std::mutex> l(driver->mu_);
    auto it = driver->machines_.find(name);
    if (it != driver->machines_.end() && it->second.reader == this) it->second.reader = nullptr;
  }
  // mu_ held.
  void Push(const CloneEvent& e) {
    queue.push_back(e);
    char b = 1;
    (void)!::write(w.get(), &b, 1);
  }

  Status Send(const std::string& payload_json) override {
    auto j = nlohmann::json::parse(payload_json, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return InvalidArgument("a payload must be a JSON object");
    if (payload_json.size() > (1u << 20)) return InvalidArgument("a payload is at most 1 MiB");
    std::lock_guard<std::mutex> l(driver->mu_);
    if (closed) return Unavailable("the link of " + name + " is closed");
    auto it = driver->machines_.find(name);
    if (it == driver->machines_.end()) return Unavailable("the link of " + name + " is closed");
    Machine& m = it->second;
    if (!m.released && driver->busy_.count(m.golden)) {
      m.held.push_back(payload_json);  // the supervisor relays it once its fork ended
      return Status::Ok();
    }
    driver->OnPayload(m, payload_json);
    return Status::Ok();
  }
  Status End() override {
    std::lock_guard<std::mutex> l(driver->mu_);
    auto it = driver->machines_.find(name);
    if (it == driver->machines_.end() || closed) return Unavailable("the link of " + name + " is closed");
    Machine& m = it->second;
    m.ended_by_host = true;
    if (m.live && m.behaviour == "fake:reply" && m.released) {
      driver->Emit(m, {CloneEvent::kComplete, nlohmann::json{{"replies", m.payloads}}.dump(), -1, 0, m.payloads});
      driver->Exit(m, 0);
    }
    return Status::Ok();
  }
  Result<std::optional<CloneEvent>> Next(std::chrono::steady_clock::time_point deadline) override {
    for (;;) {
      {
        std::lock_guard<std::mutex> l(driver->mu_);
        if (!queue.empty()) {
          char b;
          (void)!::read(r.get(), &b, 1);
          CloneEvent e = queue.front();
          queue.pop_front();
          return std::optional<CloneEvent>(e);
        }
        if (closed) return Unavailable("the link of " + name + " is closed");
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) return std::optional<CloneEvent>();
      struct pollfd p = {r.get(), POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::min<long>(left, 1000)));
    }
  }
  Status Ack(uint64_t seq) override {
    std::lock_guard<std::mutex> l(driver->mu_);
    auto it = driver->machines_.find(name);
    if (it == driver->machines_.end()) return Status::Ok();
    auto& u = it->second.unacked;
    bool exit_acked = false;
    for (auto e = u.begin(); e != u.end();) {
      if (e->seq <= seq) {
        exit_acked |= e->kind == CloneEvent::kExit;
        e = u.erase(e);
      } else {
        ++e;
      }
    }
    (void)exit_acked;
    return Status::Ok();
  }
  int fd() const override { return r.get(); }

  FakeCloneDriver* driver;
  std::string name;
  UniqueFd r, w;
  std::deque<CloneEvent> queue;
  bool closed = false;
};

FakeCloneDriver::FakeCloneDriver() = default;
FakeCloneDriver::~FakeCloneDriver() = default;

Status FakeCloneDriver::StartGolden(const std::string& name, const GoldenRequest& request) {
  std::function<void()> hook;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = machines_.find(name);
    if (it != machines_.end() && it->second.live) return Status(Code::kAlreadyExists, "machine '" + name + "' already exists");
    Machine m;
    m.name = name;
    m.is_golden = true;
    m.behaviour = request.spec.cmd.empty() ? "fake:echo" : request.spec.cmd[0];
    m.uid_base = next_uid_base_;
    next_uid_base_ += 65536;
    hook.swap(during_start_);
    // As the machine layer: created first (listed, not live), then started.
    m.live = !hook;
    machines_[name] = std::move(m);
  }
  if (hook) {
    hook();
    std::lock_guard<std::mutex> l(mu_);
    auto it = machines_.find(name);
    if (it == machines_.end()) return NotFound("machine '" + name + "' was removed while it started");
    it->second.live = true;
  }
  return Status::Ok();
}

void FakeCloneDriver::SetDevice(int64_t device_mib, int64_t clone_mib) {
  std::lock_guard<std::mutex> l(mu_);
  device_mib_ = device_mib;
  clone_mib_ = clone_mib;
}

void FakeCloneDriver::DuringNextStart(std::function<void()> hook) {
  std::lock_guard<std::mutex> l(mu_);
  during_start_ = std::move(hook);
}

Status FakeCloneDriver::ForkParked(const std::string& golden, const std::vector<std::string>& clones,
                                   const std::string& share, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  if (fork_delay_.count() > 0) {
    // The golden's supervisor forks: busy (no link opens, no parked clone of
    // it is released) until the fork ended, made or not.
    busy_[golden]++;
    l.unlock();
    std::this_thread::sleep_for(fork_delay_);
    l.lock();
    if (--busy_[golden] == 0) busy_.erase(golden);
    Status s = ForkLocked(golden, clones);
    if (!busy_.count(golden))
      for (auto& [n, m] : machines_) {
        if (m.golden != golden || m.held.empty()) continue;
        std::vector<std::string> held;
        held.swap(m.held);
        for (const auto& p : held) OnPayload(m, p);
      }
    idle_.notify_all();
    return s;
  }
  return ForkLocked(golden, clones);
}

Status FakeCloneDriver::ForkLocked(const std::string& golden, const std::vector<std::string>& clones) {
  auto g = machines_.find(golden);
  if (g == machines_.end() || !g->second.is_golden) return NotFound("machine '" + golden + "' does not exist");
  if (!g->second.live) return Status(Code::kUnavailable, "golden '" + golden + "' is not running");
  if (fail_forks_ > 0) {
    fail_forks_--;
    return Status(Code::kUnavailable, fail_message_);
  }
  for (const auto& c : clones)
    if (machines_.count(c)) return Status(Code::kAlreadyExists, "machine '" + c + "' already exists");
  if (device_mib_ > 0) {
    // As the CUDA daemon's fork admission: all the clones fit, or none is made.
    int64_t held = 0;
    for (const auto& [name, m] : machines_) held += !m.is_golden && m.live ? clone_mib_ : 0;
    const int64_t need = clone_mib_ * static_cast<int64_t>(clones.size()), free = device_mib_ - held;
    if (need > free) {
      refused_forks_++;
      return NoRoom("GPU fork: fork needs " + std::to_string(need) + " MiB, " + std::to_string(free) + " MiB free");
    }
  }
  for (const auto& c : clones) {
    Machine m;
    m.name = c;
    m.golden = golden;
    m.behaviour = g->second.behaviour;
    m.uid_base = g->second.uid_base;
    machines_[c] = std::move(m);
  }
  forks_++;
  forked_clones_ += static_cast<int>(clones.size());
  return Status::Ok();
}

Result<std::unique_ptr<CloneLink>> FakeCloneDriver::OpenLink(const std::string& clone) {
  std::unique_lock<std::mutex> l(mu_);
  // The golden's supervisor answers the link's request once it is not forking.
  idle_.wait(l, [&] {
    auto c = machines_.find(clone);
    return c == machines_.end() || !busy_.count(c->second.golden);
  });
  auto it = machines_.find(clone);
  if (it == machines_.end() || it->second.is_golden) return NotFound("machine '" + clone + "' is no clone");
  Machine& m = it->second;
  if (m.reader != nullptr) m.reader->closed = true;  // replaced, as LeaseLink's contract says
  auto link = std::make_unique<Link>(this, clone);
  for (const auto& e : m.unacked) link->Push(e);
  m.reader = link.get();
  return std::unique_ptr<CloneLink>(std::move(link));
}

void FakeCloneDriver::Emit(Machine& m, CloneEvent e) {
  e.seq = m.next_seq++;
  m.unacked.push_back(e);
  if (m.reader != nullptr) m.reader->Push(e);
}

void FakeCloneDriver::Exit(Machine& m, int wait_status) {
  if (!m.live) return;
  m.live = false;
  m.exit_code = (wait_status & 0x7f) == 0 ? (wait_status >> 8) & 0xff : 128 + (wait_status & 0x7f);
  CloneEvent e;
  e.kind = CloneEvent::kExit;
  e.wait_status = wait_status;
  Emit(m, e);
}

void FakeCloneDriver::OnPayload(Machine& m, const std::string& payload) {
  if (!m.live) return;
  if (!m.released) released_at_[m.name] = std::chrono::steady_clock::now();
  m.released = true;
  m.payloads++;
  auto j = nlohmann::json::parse(payload);
  if (m.behaviour == "fake:crash") {
    Exit(m, 3 << 8);
  } else if (m.behaviour == "fake:hang") {
  } else if (m.behaviour == "fake:reply") {
    Emit(m, {CloneEvent::kReply, nlohmann::json{{"echo", j}}.dump(), -1, 0, m.payloads});
  } else if (m.payloads == 1) {
    Emit(m, {CloneEvent::kComplete, nlohmann::json{{"echo", j}, {"machine", m.name}}.dump(), -1, 0, m.payloads});
    Exit(m, 0);
  }
}

Status FakeCloneDriver::Remove(const std::string& machine) {
  std::unique_lock<std::mutex> l(mu_);
  if (remove_delay_.count() > 0) {
    auto d = remove_delay_;
    l.unlock();
    std::this_thread::sleep_for(d);
    l.lock();
  }
  auto it = machines_.find(machine);
  if (it == machines_.end()) return Status::Ok();
  if (it->second.reader != nullptr) it->second.reader->closed = true;
  machines_.erase(it);
  removes_++;
  return Status::Ok();
}

Result<std::vector<MachineState>> FakeCloneDriver::List() {
  std::vector<MachineState> out;
  std::function<void()> hook;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [n, m] : machines_) out.push_back({n, m.live, m.exit_code, "", m.uid_base});
    hook.swap(after_list_);
  }
  if (hook) hook();
  return out;
}

void FakeCloneDriver::AfterNextList(std::function<void()> hook) {
  std::lock_guard<std::mutex> l(mu_);
  after_list_ = std::move(hook);
}

int64_t FakeCloneDriver::FreeGpuMib() {
  std::lock_guard<std::mutex> l(mu_);
  return free_gpu_mib_;
}

Result<std::string> FakeCloneDriver::Logs(const std::string& machine, size_t max_bytes) {
  std::lock_guard<std::mutex> l(mu_);
  if (!machines_.count(machine)) return NotFound("machine '" + machine + "' does not exist");
  std::string log = "fake log of " + machine + "\n";
  return log.size() > max_bytes ? log.substr(log.size() - max_bytes) : log;
}

Result<ExecResult> FakeCloneDriver::Exec(const std::string& machine, const std::vector<std::string>& cmd,
                                         std::chrono::milliseconds timeout, size_t max_bytes) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = machines_.find(machine);
  if (it == machines_.end()) return NotFound("machine '" + machine + "' does not exist");
  if (!it->second.live) return Conflict("machine '" + machine + "' is not running");
  ExecResult r;
  r.exit_code = 0;
  r.out = machine + ":";
  for (const auto& w : cmd) r.out += " " + w;
  r.out += "\n";
  return r;
}

void FakeCloneDriver::FailForks(int n, const std::string& message) {
  std::lock_guard<std::mutex> l(mu_);
  fail_forks_ = n;
  fail_message_ = message;
}

void FakeCloneDriver::Kill(const std::string& machine, int wait_status) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = machines_.find(machine);
  if (it != machines_.end()) Exit(it->second, wait_status);
}

void FakeCloneDriver::SetForkDelay(std::chrono::milliseconds d) {
  std::lock_guard<std::mutex> l(mu_);
  fork_delay_ = d;
}

void FakeCloneDriver::SetRemoveDelay(std::chrono::milliseconds d) {
  std::lock_guard<std::mutex> l(mu_);
  remove_delay_ = d;
}

std::optional<std::chrono::steady_clock::time_point> FakeCloneDriver::ReleasedAt(const std::string& clone) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = released_at_.find(clone);
  if (it == released_at_.end()) return std::nullopt;
  return it->second;
}

void FakeCloneDriver::SetFreeGpuMib(int64_t mib) {
  std::lock_guard<std::mutex> l(mu_);
  free_gpu_mib_ = mib;
}

size_t FakeCloneDriver::machines() const {
  std::lock_guard<std::mutex> l(mu_);
  return machines_.size();
}

bool FakeCloneDriver::Released(const std::string& clone) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = machines_.find(clone);
  return it != machines_.end() && it->second.released;
}

}  // namespace smolvm::serve
