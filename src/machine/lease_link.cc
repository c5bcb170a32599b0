#include "machine/lease_link.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "machine/errors.h"
#include "machine/paths.h"
#include "machine/spec.h"
#include "machine/store.h"
#include "machine/supervisor_conn.h"
#include "transport/unix_channel.h"

namespace smolvm::machine {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kWriteTimeout = std::chrono::seconds(10);
constexpr auto kOpenTimeout = std::chrono::seconds(10);

int MsLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// The supervisor's answer line, read byte by byte: frames follow it at once.
Result<std::string> ReadAnswer(int fd, Clock::time_point deadline) {
  std::string line;
  while (line.size() < 4096) {
    struct pollfd p = {fd, POLLIN, 0};
    int r = ::poll(&p, 1, MsLeft(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("poll", errno);
    if (r == 0) return Timeout("no answer from the supervisor in time");
    char c;
    ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Unavailable("the supervisor closed the connection without an answer");
    if (c == '\n') return line;
    line += c;
  }
  return Malformed("the supervisor's answer is too long");
}

}  // namespace

Result<LeaseLink> LeaseLink::Open(const std::string& home, const std::string& clone) {
  RETURN_IF_ERROR(ValidateName(clone));
  if (::geteuid() != 0) return PermissionDenied("a lease link needs root on the host (the supervisor's control socket)");
  ASSIGN_OR_RETURN(auto store, Store::Open(home));
  ASSIGN_OR_RETURN(auto rec, store->Find(clone));
  if (!rec) return NotFound("machine '" + clone + "' does not exist (see 'smolvm machine list')");
  if (rec->golden.empty()) return WrongState("machine '" + clone + "' is no clone: lease links are a clone's");
  if (rec->state == kStateForking) return WrongState("clone '" + clone + "' is still being forked");
  auto sock = ConnectUnix(MachinePaths(home, rec->golden).ctl_sock);
  if (!sock.ok())
    return Unavailable("cannot reach the supervisor of '" + rec->golden + "' (" + sock.status().message() +
                       "): its golden is not running");
  RETURN_IF_ERROR(SendLine(sock->get(), "LEASE " + clone));
  ASSIGN_OR_RETURN(std::string answer, ReadAnswer(sock->get(), Clock::now() + kOpenTimeout));
  if (answer != "OK") {
    Status s = StatusOfErrLine(answer, "the supervisor refused the lease link of '" + clone + "'");
    if (s.message() == "unknown request")
      return NotSupported("the supervisor of '" + rec->golden + "' has no lease links (it is of an older smolvm)");
    return s;
  }
  return LeaseLink(std::move(sock).value());
}

Status LeaseLink::Write(int kind, std::string_view body, uint64_t number) {
  if (broken_) return Unavailable("the lease link is broken (a write timed out half-way): open it again");
  std::string frame =
      EncodeLeaseFrame(static_cast<uint8_t>(kind), body, kind == SMOLVM_LEASE_ACK ? number : 0, 0);
  auto deadline = Clock::now() + kWriteTimeout;
  size_t put = 0;
  while (put < frame.size()) {
    ssize_t n = ::send(fd_.get(), frame.data() + put, frame.size() - put, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) {
      put += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      broken_ = put > 0;
      return Unavailable(std::string("the lease link closed: ") + std::strerror(errno));
    }
    struct pollfd p = {fd_.get(), POLLOUT, 0};
    int r = ::poll(&p, 1, MsLeft(deadline));
    if (r == 0) {
      broken_ = put > 0;
      return Timeout("the supervisor did not take the message in time (the clone does not read its payloads)");
    }
  }
  return Status::Ok();
}

Status LeaseLink::Send(std::string_view payload_json) {
  if (payload_json.size() > kMaxJson)
    return InvalidArgument("a payload of " + std::to_string(payload_json.size()) + " bytes (at most 1 MiB)");
  Status json = CheckLeaseJson(payload_json, true);
  if (!json.ok()) return InvalidArgument("payload: " + json.message());
  return Write(SMOLVM_LEASE_PAYLOAD, payload_json, 0);
}

Status LeaseLink::End() { return Write(SMOLVM_LEASE_END, {}, 0); }

Status LeaseLink::Ack(uint64_t seq) { return Write(SMOLVM_LEASE_ACK, {}, seq); }

Result<std::optional<CloneMessage>> LeaseLink::Next(Clock::time_point deadline) {
  for (;;) {
    auto r = reader_.ReadSome(fd_.get());
    if (!r.ok()) {
      if (r.status().code() == static_cast<int32_t>(Code::kMalformed)) return r.status();
      return Unavailable("the lease link closed (the golden stopped, or another reader opened it): " +
                         r.status().message());
    }
    if (r->has_value()) {
      LeaseFrameReader::Frame& f = **r;
      CloneMessage m;
      m.seq = f.header.seq;
      m.payload = f.header.payload;
      if (m.seq == 0) return Malformed("a lease message without a sequence number");
      switch (f.header.kind) {
        case SMOLVM_LEASE_REPLY:
        case SMOLVM_LEASE_COMPLETE:
          RETURN_IF_ERROR(CheckLeaseJson(f.body, false));
          m.kind = f.header.kind == SMOLVM_LEASE_REPLY ? CloneMessage::kReply : CloneMessage::kComplete;
          m.json = std::move(f.body);
          break;
        case SMOLVM_LEASE_EXIT: {
          auto j = nlohmann::json::parse(f.body, nullptr, false);
          if (!j.is_object() || !j.contains("wait_status") || !j["wait_status"].is_number_integer())
            return Malformed("an EXIT message without its wait status");
          m.kind = CloneMessage::kExit;
          m.wait_status = j["wait_status"].get<int>();
          break;
        }
        case SMOLVM_LEASE_FAULT: {
          auto j = nlohmann::json::parse(f.body, nullptr, false);
          if (!j.is_object() || !j.contains("error") || !j["error"].is_string())
            return Malformed("a FAULT message without its error");
          m.kind = CloneMessage::kFault;
          m.json = std::move(f.body);
          break;
        }
        default:
          return Malformed("a lease message of kind " + std::to_string(f.header.kind) + " from the supervisor");
      }
      return std::optional<CloneMessage>(std::move(m));
    }
    struct pollfd p = {fd_.get(), POLLIN, 0};
    int n = ::poll(&p, 1, MsLeft(deadline));
    if (n < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
    if (n == 0) return std::optional<CloneMessage>();
  }
}

}  // namespace smolvm::machine
