// Clone tokens: how a forked child proves it is the child the golden made.
//
// Each clone of a fork job gets a token of 128 random bits (getrandom) when
// the job is made, before anything can attach; the golden learns every
// clone's token at once, in the job's one ForkGo, sent when its first clone
// is built. A clone Hello is accepted only for a clone already released to
// the golden, not attached yet, through the clone machine's own socket, with
// the token compared in constant time; the token is then spent, and the
// Hello waits for its clone's build if that is not done yet. An empty,
// unknown, spent or misplaced token is refused and logged, and counted in
// the fork's admin reply.
#include <errno.h>
#include <openssl/crypto.h>
#include <sys/random.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "daemon/daemon.h"
#include "proto/frame.h"

namespace smolvm {
namespace {

constexpr size_t kTokenHexBytes = 32;

bool SameToken(const std::string& a, const std::string& b) {
  return a.size() == kTokenHexBytes && b.size() == kTokenHexBytes && CRYPTO_memcmp(a.data(), b.data(), kTokenHexBytes) == 0;
}

}  // namespace

std::string Daemon::NewCloneToken() {
  unsigned char raw[16];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = ::getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "";
    got += static_cast<size_t>(n);
  }
  char hex[kTokenHexBytes + 1];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", raw[i]);
  return std::string(hex, kTokenHexBytes);
}

void Daemon::ReleaseClones(ForkJob& job) {
  auto golden = sessions_.find(job.golden);
  if (golden == sessions_.end()) return;  // AdvanceForks fails the job
  auto gw = workers_.find(golden->second.worker_pid);
  if (gw == workers_.end() || !gw->second.control) return;
  for (const auto& c : job.clones)
    if (c.token.size() != kTokenHexBytes) return FailFork(job, Internal("a clone has no token"));
  // Every order in one message: the golden forks its children one after
  // another now, while the clones still to build are built; each child's
  // Hello waits here for its clone (AttachClone). The built clones' orders
  // come first, so the first child forked is one that can attach at once;
  // a machine fork's go in its clone machines' order (ReadyToRelease).
  std::vector<ForkJob::Clone*> order;
  for (auto& c : job.clones) order.push_back(&c);
  if (!job.machine_fork)
    std::stable_partition(order.begin(), order.end(), [](const ForkJob::Clone* c) { return c->built; });
  proto::ForkGoRequest go;
  const double released_ms = job.MsSinceT0();
  for (ForkJob::Clone* c : order) {
    c->index = next_clone_index_[job.golden]++;
    go.orders.push_back({c->index, c->token});
    c->released = true;
    c->released_ms = released_ms;
  }
  std::string out;
  proto::AppendRequest(&out, go, 0);
  (void)SendToGolden(job, out);
  job.released = true;
  // With each clone's "fork: clone k ... ms=" line: the request-to-release
  // part (the golden's prepare and the builds) against release-to-attach
  // (the guest forking each child and its first call).
  size_t built = 0;
  for (const auto& c : job.clones) built += c.built;
  Log("fork of session %llu: %zu orders sent to the golden %.1f ms after the request met the forkpoint (%zu built)",
      static_cast<unsigned long long>(job.golden), go.orders.size(),
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - job.t0).count(), built);
  // A machine's golden leaves the daemon's forkpoint with its orders and
  // waits at its supervisor's; its next fork finds it here again.
  if (job.machine_fork) golden->second.state = "running";
}

Status Daemon::SendToGolden(ForkJob& job, const std::string& frame) {
  auto golden = sessions_.find(job.golden);
  if (golden == sessions_.end()) return Unavailable("the golden session ended");
  auto gw = workers_.find(golden->second.worker_pid);
  if (gw == workers_.end() || !gw->second.control) return Unavailable("the golden's worker is gone");
  ++job.golden_messages;
  return gw->second.control->Write(frame);
}

void Daemon::AttachClone(PendingGuest g, const std::string& token) {
  auto e = endpoints_.find(g.endpoint);
  const std::string via = g.endpoint == 0 ? "" : (e == endpoints_.end() ? "?" : e->second.machine);
  ForkJob* found_job = nullptr;
  ForkJob::Clone* found = nullptr;
  // Every live token is compared, the same way, whatever matches.
  for (auto& [id, job] : forks_) {
    if (job.phase != ForkJob::kBuilding) continue;
    for (auto& c : job.clones) {
      bool match = SameToken(c.token, token);
      if (match && c.released && !c.attached && !found) {
        found_job = &job;
        found = &c;
      }
    }
  }
  if (!found || via != found->machine) {
    const char* why = token.empty() ? "an empty clone token" : found ? "a clone token of another machine"
                                                                     : "an unknown or spent clone token";
    // A kind per reason: a flood of one reason hides none of the others.
    const std::string kind = std::string("clone token refused: ") + why;
    LogGuest(kind.c_str(), g.endpoint, "clone Hello from guest pid %u (host pid %u) on %s refused: %s",
             g.guest_pid, g.host_pid, SocketName(g.endpoint).c_str(), why);
    // Counted only in the forks whose clones attach through that socket
    // (on the daemon's own socket: from the golden's uid), not in every
    // tenant's.
    for (auto& [id, job] : forks_) {
      auto gold = sessions_.find(job.golden);
      bool same_socket = false;
      for (const auto& c : job.clones) same_socket |= c.machine == via;
      if (same_socket && (g.endpoint != 0 || (gold != sessions_.end() && gold->second.host_uid == g.host_uid)))
        ++job.refused_attaches;
    }
    ReplyHelloError(*g.channel, g.hello_seq, Code::kPermissionDenied, "unknown or expired clone token");
    return;
  }
  ForkJob& job = *found_job;
  ForkJob::Clone& c = *found;
  c.token.clear();  // spent: no Hello can match it again
  c.hello_ms = job.MsSinceT0();
  if (!c.built) {
    // The golden forked this child before its clone was built.
    c.parked = std::move(g);
    return;
  }
  AdoptClone(job, c, std::move(g));
  AdvanceForks();
}

void Daemon::AdoptClone(ForkJob& job, ForkJob::Clone& c, PendingGuest g) {
  auto w = workers_.find(c.worker);
  auto sock = g.channel->TakeSocket();
  if (w == workers_.end() || !w->second.control || !sock.ok()) {
    ReplyHelloError(*g.channel, g.hello_seq, Code::kUnavailable, "the clone's worker is gone");
    return;
  }
  proto::WorkerAdoptRequest adopt{c.session, g.hello_seq, 2, g.guest_pid, g.flags, w->second.uid};
  std::string out;
  proto::AppendRequest(&out, adopt, 0, 1);
  int fd = sock->get();
  if (!w->second.control->Write(out, std::span<const int>(&fd, 1)).ok()) return;
  c.attached = true;
  c.host_pid = g.host_pid;
  c.ms = job.MsSinceT0();
  Session& s = sessions_[c.session];
  s.guest_pid = g.guest_pid;
  s.host_pid = g.host_pid;
  s.host_uid = g.host_uid;
  s.state = "running";
  const Session& gold = sessions_[job.golden];
  size_t attached = 0;
  for (const auto& other : job.clones) attached += other.attached;
  // ms: the request met the golden at its forkpoint -> this clone's
  // worker serves its first call (the Hello). "k of N": this clone is the
  // k-th of the request's N to attach. The steps after waited_ms are ms
  // since the forkpoint as well: build sent, built, released, Hello.
  Log("fork: clone %d of golden pid %u (%zu of %zu attached) shared=%llu private=%llu shared_mib=%.1f "
      "private_mib=%.1f ms=%.1f build_ms=%.1f preloaded=%u waited_ms=%.1f sent=%.1f built=%.1f released=%.1f "
      "hello=%.1f",
      c.index, gold.guest_pid, attached, job.clones.size(), static_cast<unsigned long long>(c.info.shared_chunks),
      static_cast<unsigned long long>(c.info.private_chunks), c.info.shared_bytes / 1048576.0,
      c.info.private_bytes / 1048576.0, c.ms, static_cast<double>(c.info.ms), c.info.preloaded, job.waited_ms,
      c.sent_ms, c.built_ms, c.released_ms, c.hello_ms);
}

}  // namespace smolvm
