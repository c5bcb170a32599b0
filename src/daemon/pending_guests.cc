// Connections on the guest sockets before their Hello is whole. The poll loop
// reads each as bytes arrive (non-blocking), so a guest that drips or stays
// silent costs others nothing but a slot under the caps:
//
//   * a deadline for the whole Hello (--hello-timeout-ms), not per read;
//   * the Hello's buffer grows with bytes received, and a Hello that declares
//     more than kMaxHelloBytes is refused before any of it is read;
//   * at most --max-conns-per-machine pending connections per socket and
//     --max-conns over every socket; one past a cap is answered with the
//     cap's name (its Hello is read, briefly, only to echo its sequence);
//   * descriptors sent with a Hello are closed and the guest refused.
//
// The daemon reads exactly the Hello's bytes: whatever the guest sent after it
// stays in the socket for its worker.
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>

#include "daemon/daemon.h"
#include "proto/frame.h"
#include "proto/proto_hash.h"
#include "transport/control_message.h"

namespace smolvm {
namespace {

// How long a connection past a cap may take to send the Hello we answer.
constexpr int kRefusalGraceMs = 500;

void ReplyHelloError(int fd, uint32_t seq, const Status& st) {
  std::string out;
  proto::AppendErrorReply(&out, proto::HelloRequest::kNumber, seq, st.code(), 0, st.message());
  // Best effort, never blocking: a guest that does not read loses its answer.
  (void)::send(fd, out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace

std::string Daemon::SocketName(uint64_t endpoint) const {
  if (endpoint == 0) return "the daemon's socket";
  auto e = endpoints_.find(endpoint);
  return e == endpoints_.end() ? "a removed machine endpoint" : "machine '" + e->second.machine + "'";
}

void Daemon::AcceptGuest(int listen_fd, uint64_t endpoint) {
  auto accepted = AcceptOn(listen_fd, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (!accepted.ok()) return;
  const int raw = accepted->get();
  const uint64_t id = next_pending_++;
  Pending p;
  p.fd = std::move(accepted).value();
  p.endpoint = endpoint;
  struct ucred peer = {};
  socklen_t peer_len = sizeof peer;
  if (::getsockopt(raw, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) == 0 && peer.pid > 0) {
    p.host_pid = static_cast<uint32_t>(peer.pid);
    p.host_uid = peer.uid;
  }
  // The caps (guest_admission.h): per machine, or on the daemon's own
  // socket per peer uid and per host pid; then over every socket.
  const bool shared = endpoint == 0;
  GuestAdmission::Pending held;
  size_t refusing = 0;
  for (const auto& [other, q] : pending_) {
    if (!q.refusal.ok()) {
      ++refusing;
      continue;
    }
    ++held.total;
    if (q.endpoint != endpoint) continue;
    if (!shared || q.host_uid == p.host_uid) ++held.tenant;
    if (shared && q.host_pid == p.host_pid) ++held.pid;
  }
  auto now = std::chrono::steady_clock::now();
  p.refusal = admission_.AdmitConnection(SocketName(endpoint), shared ? TenantName("", p.host_uid) : SocketName(endpoint), shared,
                                         p.host_pid, held);
  if (!p.refusal.ok()) {
    refusals_.Count(p.refusal);
    // Throttled per socket: a guest that reconnects in a loop must not fill the log.
    LogGuest("connection refused", endpoint, "guest host pid %u on %s refused: %s", p.host_pid,
             SocketName(endpoint).c_str(), p.refusal.message().c_str());
    // Answered once its Hello says which sequence to echo; the refusals
    // waiting for that are bounded too, past which the answer goes at once.
    if (refusing >= static_cast<size_t>(options_.max_conns)) {
      ReplyHelloError(raw, 0, p.refusal);
      return;
    }
    p.deadline = now + std::chrono::milliseconds(std::min(kRefusalGraceMs, options_.hello_timeout_ms));
  } else {
    p.deadline = now + std::chrono::milliseconds(options_.hello_timeout_ms);
  }
  pending_[id] = std::move(p);
}

void Daemon::OnPendingReadable(uint64_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  // Exactly what is still missing of the Hello: its header, then its payload.
  size_t want = proto::kFrameHeaderBytes;
  proto::FrameHeader h;
  if (p.buf.size() >= proto::kFrameHeaderBytes) {
    h = proto::DecodeHeader(reinterpret_cast<const uint8_t*>(p.buf.data()));
    want += h.payload_bytes;
  }
  char chunk[kMaxHelloBytes];
  struct iovec iov = {chunk, std::min(sizeof chunk, want - p.buf.size())};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 253)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t r = ::recvmsg(p.fd.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  int err = errno;
  // Descriptors sent with a Hello are closed (as `cm` goes) and the guest refused.
  ControlMessage cm = TakeControlMessage(r, msg);
  const bool sent_fds = !cm.fds.empty();
  if (r < 0 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)) return;
  if (r <= 0) {
    LogGuest("dropped before its Hello", id, "guest host pid %u dropped before its Hello (%zu bytes of it arrived)",
             p.host_pid, p.buf.size());
    pending_.erase(it);
    return;
  }
  p.buf.append(chunk, static_cast<size_t>(r));
  if (sent_fds || cm.truncated) {
    LogGuest("descriptors with a Hello", id, "guest host pid %u refused: descriptors sent with its Hello", p.host_pid);
    ReplyHelloError(p.fd.get(), 0, Malformed("send no descriptors before the Hello reply"));
    pending_.erase(it);
    return;
  }
  if (p.buf.size() < proto::kFrameHeaderBytes) return;
  h = proto::DecodeHeader(reinterpret_cast<const uint8_t*>(p.buf.data()));
  if (h.op != proto::HelloRequest::kNumber || h.payload_bytes > kMaxHelloBytes || h.num_fds != 0) {
    Status why = h.op != proto::HelloRequest::kNumber
                     ? Malformed("the first frame must be Hello")
                     : h.num_fds != 0 ? Malformed("send no descriptors before the Hello reply")
                                      : Malformed("a Hello of " + std::to_string(h.payload_bytes) +
                                                  " bytes exceeds the limit of " + std::to_string(kMaxHelloBytes));
    LogGuest("bad first frame", id, "guest host pid %u refused: %s", p.host_pid, why.message().c_str());
    ReplyHelloError(p.fd.get(), h.seq, p.refusal.ok() ? why : p.refusal);
    pending_.erase(it);
    return;
  }
  if (p.buf.size() < proto::kFrameHeaderBytes + h.payload_bytes) return;
  Pending whole = std::move(p);
  pending_.erase(it);
  if (!whole.refusal.ok()) {
    ReplyHelloError(whole.fd.get(), h.seq, whole.refusal);
    return;
  }
  std::string payload = whole.buf.substr(proto::kFrameHeaderBytes);
  OnHello(std::move(whole), h, payload);
}

void Daemon::ExpirePending() {
  auto now = std::chrono::steady_clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = it->second;
    if (now < p.deadline) {
      ++it;
      continue;
    }
    if (p.refusal.ok()) {
      LogGuest("hello timeout", it->first, "guest host pid %u on %s dropped: no whole Hello within %d ms (%zu bytes arrived)",
               p.host_pid, SocketName(p.endpoint).c_str(), options_.hello_timeout_ms, p.buf.size());
      ReplyHelloError(p.fd.get(), 0, Timeout("no whole Hello within " + std::to_string(options_.hello_timeout_ms) + " ms"));
    } else {
      ReplyHelloError(p.fd.get(), 0, p.refusal);
    }
    it = pending_.erase(it);
  }
}

Status Daemon::AdmitSession(uint64_t endpoint, uint32_t host_uid) const {
  std::string machine;
  if (endpoint) {
    auto e = endpoints_.find(endpoint);
    if (e == endpoints_.end()) return Unavailable("the machine's CUDA endpoint was removed");
    machine = e->second.machine;
  }
  const std::string tenant = TenantName(machine, host_uid);
  // What each tenant holds: its sessions and the guests waiting for a worker.
  std::map<std::string, size_t> by_tenant;
  for (const auto& [id, s] : sessions_) ++by_tenant[TenantOf(s)];
  for (const auto& g : waiting_) {
    auto e = endpoints_.find(g.endpoint);
    ++by_tenant[TenantName(g.endpoint == 0 ? "" : e == endpoints_.end() ? "?" : e->second.machine, g.host_uid)];
  }
  GuestAdmission::Sessions held;
  held.tenant = by_tenant.count(tenant) ? by_tenant[tenant] : 0;
  held.other_tenants = by_tenant.size() - (by_tenant.count(tenant) ? 1 : 0);
  // Every session holds a worker of its own.
  held.committed = sessions_.size() + waiting_.size();
  for (const auto& [id, job] : forks_)
    for (const auto& c : job.clones) held.committed += c.worker < 0 ? 1 : 0;
  return admission_.AdmitSession(tenant, held);
}

void Daemon::OnHello(Pending p, const proto::FrameHeader& h, std::string_view payload) {
  proto::HelloRequest hello;
  proto::Decoder dec(payload);
  if (!proto::Decode(dec, &hello)) {
    ReplyHelloError(p.fd.get(), h.seq, Malformed("Hello does not decode"));
    return;
  }
  if (hello.proto_hash != proto::kProtoHash) {
    std::string msg = "PROTOCOL MISMATCH: client wire hash " + proto::HashHex(hello.proto_hash) + " != server " +
                      proto::HashHex(proto::kProtoHash);
    LogGuest("protocol mismatch", p.endpoint, "guest pid %u refused: %s", hello.pid, msg.c_str());
    ReplyHelloError(p.fd.get(), h.seq, Status(Code::kProtocolMismatch, msg));
    return;
  }
  const auto role = proto::SessionRoleOf(hello.role);
  if (role != proto::SessionRole::kStandalone && role != proto::SessionRole::kClone) {
    ReplyHelloError(p.fd.get(), h.seq,
                    InvalidArgument("a new session says role 0 (or 2 with a clone token)"));
    return;
  }
  if (role == proto::SessionRole::kStandalone) {
    if (Status admit = AdmitSession(p.endpoint, p.host_uid); !admit.ok()) {
      refusals_.Count(admit);
      LogGuest("session refused", p.endpoint, "guest pid %u (host pid %u) refused: %s", hello.pid, p.host_pid,
               admit.message().c_str());
      ReplyHelloError(p.fd.get(), h.seq, admit);
      return;
    }
  }
  // The worker reads the socket with blocking calls: hand it over so.
  int fl = ::fcntl(p.fd.get(), F_GETFL);
  if (fl < 0 || ::fcntl(p.fd.get(), F_SETFL, fl & ~O_NONBLOCK) < 0) return;
  PendingGuest g;
  g.channel = std::make_unique<UnixChannel>(std::move(p.fd));
  g.hello_seq = h.seq;
  g.role = *role;
  g.guest_pid = hello.pid;
  g.flags = hello.flags;
  g.host_pid = p.host_pid;
  g.host_uid = p.host_uid;
  g.endpoint = p.endpoint;
  if (auto e = endpoints_.find(p.endpoint); e != endpoints_.end() && e->second.no_descriptors) {
    // A gVisor machine: every guest's peer is its sandbox, and host sockets
    // pass no credentials. The machine is the endpoint's; the pid is the
    // one its Hello gives, inside the machine (no host pid).
    g.flags |= proto::kHelloNoDescriptors;
    g.host_pid = 0;
  }
  if (role == proto::SessionRole::kClone) return AttachClone(std::move(g), hello.token);
  waiting_.push_back(std::move(g));
  AssignWorkers();
}

}  // namespace smolvm
