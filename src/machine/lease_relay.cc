#include "machine/lease_relay.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

namespace smolvm::machine {

struct LeaseRelay::Link {
  std::string clone;
  UniqueFd listen;  // lease.sock; closed once nothing more is taken from the clone
  UniqueFd guest;   // the clone's connection (one at a time)
  LeaseFrameReader guest_in;
  std::deque<std::string> to_guest;  // PAYLOAD/END frames; the front written up to to_guest_off
  size_t to_guest_off = 0, to_guest_bytes = 0;
  uint64_t payloads = 0;        // payloads numbered so far
  bool parked = false;          // its program waits for the first payload
  bool ended_by_host = false;   // END queued: later payloads are dropped
  bool guest_done = false;      // COMPLETE, FAULT or the program's end: nothing more from the clone
  bool exit_queued = false;     // EXIT retained: the clone is over
  uint64_t ended_at = 0;
  UniqueFd reader;
  LeaseFrameReader reader_in;
  struct Msg {
    uint64_t seq;
    uint8_t kind;
    std::string frame;
  };
  std::deque<Msg> retained;  // seqs contiguous: front().seq .. next_seq - 1
  size_t retained_bytes = 0;
  uint64_t next_seq = 1;
  uint64_t sent_upto = 0;  // to the current reader: every seq <= sent_upto written whole
  size_t send_off = 0;     // bytes of the next one written
  bool forget = false;     // its EXIT was acked
};

LeaseRelay::LeaseRelay(Hooks hooks) : LeaseRelay(std::move(hooks), Limits()) {}
LeaseRelay::LeaseRelay(Hooks hooks, Limits limits) : hooks_(std::move(hooks)), limits_(limits) {}
LeaseRelay::~LeaseRelay() = default;

void LeaseRelay::Log(const std::string& msg) const {
  if (hooks_.log) hooks_.log("lease: " + msg);
}

void LeaseRelay::AddClone(const std::string& clone, UniqueFd listen, bool parked) {
  auto l = std::make_unique<Link>();
  l->clone = clone;
  l->listen = std::move(listen);
  // accept4 must never wait (OnListen also runs when nothing was polled).
  int flags = ::fcntl(l->listen.get(), F_GETFL);
  if (flags >= 0) ::fcntl(l->listen.get(), F_SETFL, flags | O_NONBLOCK);
  l->parked = parked;
  links_[clone] = std::move(l);
}

bool LeaseRelay::Parked(const std::string& clone) const {
  auto it = links_.find(clone);
  return it != links_.end() && it->second->parked;
}

bool LeaseRelay::OverRetained(const Link& l) const {
  return l.retained.size() >= limits_.retained_messages || l.retained_bytes >= limits_.retained_bytes;
}

void LeaseRelay::Retain(Link& l, uint8_t kind, std::string body, uint64_t payload) {
  Link::Msg m;
  m.seq = l.next_seq++;
  m.kind = kind;
  m.frame = EncodeLeaseFrame(kind, body, m.seq, payload);
  l.retained_bytes += m.frame.size();
  l.retained.push_back(std::move(m));
}

void LeaseRelay::CloseGuest(Link& l, bool for_good) {
  l.guest.Reset();
  l.guest_in.Reset();
  if (l.to_guest_off > 0) {
    // Half-delivered to a connection that is gone: a new one starts at a frame.
    l.to_guest_bytes -= l.to_guest.front().size();
    l.to_guest.pop_front();
    l.to_guest_off = 0;
  }
  if (for_good) {
    l.guest_done = true;
    l.listen.Reset();
    l.to_guest.clear();
    l.to_guest_bytes = 0;
  }
}

void LeaseRelay::CloseReader(Link& l, const std::string& why) {
  if (!l.reader.valid()) return;
  Log("'" + l.clone + "': reader detached: " + why);
  l.reader.Reset();
  l.reader_in.Reset();
  l.send_off = 0;
}

void LeaseRelay::Fault(Link& l, const std::string& why) {
  Log("'" + l.clone + "': the clone broke the lease protocol: " + why);
  Retain(l, SMOLVM_LEASE_FAULT, nlohmann::json{{"error", why}}.dump(), 0);
  CloseGuest(l, true);
}

void LeaseRelay::QueueExit(Link& l, int wait_status) {
  if (l.exit_queued) return;
  Retain(l, SMOLVM_LEASE_EXIT, nlohmann::json{{"wait_status", wait_status}}.dump(), 0);
  l.exit_queued = true;
  l.ended_at = ++ended_counter_;
  CloseGuest(l, true);
}

void LeaseRelay::OnListen(Link& l) {
  while (l.listen.valid()) {
    int fd = ::accept4(l.listen.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    UniqueFd conn(fd);
    struct ucred uc = {};
    socklen_t len = sizeof uc;
    bool ok = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) == 0 && uc.pid > 0 &&
              hooks_.in_clone && hooks_.in_clone(uc.pid, l.clone);
    if (!ok) {
      Log("'" + l.clone + "': refused a connection from pid " + std::to_string(uc.pid) + " (not of the clone)");
      continue;
    }
    if (l.guest.valid()) continue;  // one connection at a time: the newcomer sees EOF
    l.guest = std::move(conn);
    WriteGuest(l);
    return;
  }
}

void LeaseRelay::ReadGuest(Link& l, bool drain) {
  while (l.guest.valid() && !l.guest_done && (drain || !OverRetained(l))) {
    auto r = l.guest_in.ReadSome(l.guest.get());
    if (!r.ok()) {
      if (r.status().code() == static_cast<int32_t>(Code::kMalformed)) {
        Fault(l, r.status().message());
      } else {
        CloseGuest(l, false);  // the clone closed its connection; it may open another
      }
      return;
    }
    if (!r->has_value()) return;
    LeaseFrameReader::Frame& f = **r;
    if (f.header.kind != SMOLVM_LEASE_REPLY && f.header.kind != SMOLVM_LEASE_COMPLETE) {
      Fault(l, "a frame of kind " + std::to_string(f.header.kind) + " (a clone sends REPLY or COMPLETE)");
      return;
    }
    if (f.header.seq != 0) {
      Fault(l, "a frame with a sequence number (the supervisor numbers them)");
      return;
    }
    if (f.header.payload > l.payloads) {
      Fault(l, "a reply to payload " + std::to_string(f.header.payload) + ", of " + std::to_string(l.payloads) + " sent");
      return;
    }
    Status json = CheckLeaseJson(f.body, false);
    if (!json.ok()) {
      Fault(l, json.message());
      return;
    }
    bool complete = f.header.kind == SMOLVM_LEASE_COMPLETE;
    Retain(l, f.header.kind, std::move(f.body), f.header.payload);
    if (complete) CloseGuest(l, true);  // the lease is over; the program may still run
  }
}

void LeaseRelay::WriteGuest(Link& l) {
  while (l.guest.valid() && !l.to_guest.empty()) {
    const std::string& f = l.to_guest.front();
    ssize_t n;
    do {
      n = ::send(l.guest.get(), f.data() + l.to_guest_off, f.size() - l.to_guest_off, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) CloseGuest(l, false);
      return;
    }
    l.to_guest_off += static_cast<size_t>(n);
    if (l.to_guest_off == f.size()) {
      l.to_guest_bytes -= f.size();
      l.to_guest.pop_front();
      l.to_guest_off = 0;
    }
  }
}

void LeaseRelay::WriteReader(Link& l) {
  while (l.reader.valid() && !l.retained.empty()) {
    uint64_t front = l.retained.front().seq;
    size_t idx = l.sent_upto + 1 >= front ? static_cast<size_t>(l.sent_upto + 1 - front) : 0;
    if (idx >= l.retained.size()) return;  // all written
    const std::string& f = l.retained[idx].frame;
    ssize_t n;
    do {
      n = ::send(l.reader.get(), f.data() + l.send_off, f.size() - l.send_off, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // The reader is gone, but what it sent before it went may still be
        // unread (a lease-send that wrote its payload and exited before its
        // connection was attached): taken first, as Attach does for the
        // reader it replaces.
        int err = errno;
        OnReader(l, POLLIN);
        CloseReader(l, std::strerror(err));
      }
      return;
    }
    l.send_off += static_cast<size_t>(n);
    if (l.send_off == f.size()) {
      l.sent_upto = l.retained[idx].seq;
      l.send_off = 0;
    }
  }
}

void LeaseRelay::OnReader(Link& l, short revents) {
  if (revents & POLLOUT) WriteReader(l);
  if (!(revents & (POLLIN | POLLHUP | POLLERR))) return;
  while (l.reader.valid() && l.to_guest_bytes < limits_.pending_bytes) {
    auto r = l.reader_in.ReadSome(l.reader.get());
    if (!r.ok()) {
      CloseReader(l, r.status().message());
      return;
    }
    if (!r->has_value()) return;
    LeaseFrameReader::Frame& f = **r;
    switch (f.header.kind) {
      case SMOLVM_LEASE_PAYLOAD: {
        Status json = CheckLeaseJson(f.body, true);
        if (!json.ok()) {
          CloseReader(l, "a payload that is not a JSON object: " + json.message());
          return;
        }
        if (l.guest_done || l.ended_by_host) {
          Log("'" + l.clone + "': a payload after the lease ended was dropped");
          break;
        }
        std::string frame = EncodeLeaseFrame(SMOLVM_LEASE_PAYLOAD, f.body, 0, ++l.payloads);
        l.to_guest_bytes += frame.size();
        l.to_guest.push_back(std::move(frame));
        if (l.parked) {
          l.parked = false;
          if (hooks_.release) hooks_.release(l.clone);
        }
        WriteGuest(l);
        break;
      }
      case SMOLVM_LEASE_END:
        if (!l.guest_done && !l.ended_by_host) {
          l.ended_by_host = true;
          std::string frame = EncodeLeaseFrame(SMOLVM_LEASE_END, {}, 0, 0);
          l.to_guest_bytes += frame.size();
          l.to_guest.push_back(std::move(frame));
          WriteGuest(l);
        }
        break;
      case SMOLVM_LEASE_ACK: {
        if (f.header.seq > l.sent_upto) {
          CloseReader(l, "an ack of message " + std::to_string(f.header.seq) + ", past those sent");
          return;
        }
        bool was_over = OverRetained(l);
        while (!l.retained.empty() && l.retained.front().seq <= f.header.seq) {
          if (l.retained.front().kind == SMOLVM_LEASE_EXIT) l.forget = true;
          l.retained_bytes -= l.retained.front().frame.size();
          l.retained.pop_front();
        }
        if (was_over && !OverRetained(l)) ReadGuest(l, false);
        if (l.forget) return;
        break;
      }
      default:
        CloseReader(l, "a frame of kind " + std::to_string(f.header.kind) + " from the reader");
        return;
    }
  }
}

void LeaseRelay::OnGuest(Link& l, short revents) {
  if (revents & POLLOUT) WriteGuest(l);
  if (revents & (POLLIN | POLLHUP | POLLERR)) ReadGuest(l, false);
}

void LeaseRelay::ProgramExited(const std::string& clone, int wait_status) {
  auto it = links_.find(clone);
  if (it == links_.end()) return;
  Link& l = *it->second;
  if (l.exit_queued) return;
  // What the program sent before it ended is all in the sockets now (also a
  // connection not accepted yet).
  if (!l.guest_done && !l.guest.valid()) OnListen(l);
  ReadGuest(l, true);
  QueueExit(l, wait_status);
  WriteReader(l);
}

void LeaseRelay::CloneEnded(const std::string& clone) { ProgramExited(clone, -1); }

Status LeaseRelay::Attach(const std::string& clone, UniqueFd reader) {
  auto it = links_.find(clone);
  if (it == links_.end()) return NotFound("machine '" + clone + "' has no lease link (not a clone of this golden, or its end was acknowledged)");
  Link& l = *it->second;
  // What the reader before sent and this loop has not read yet (a lease-send
  // that wrote its payload and exited just before the next reader came, on
  // a busy supervisor) is taken first: replacing a reader loses nothing.
  if (l.reader.valid()) OnReader(l, POLLIN);
  CloseReader(l, "replaced by a new reader");
  l.reader = std::move(reader);
  l.sent_upto = l.retained.empty() ? l.next_seq - 1 : l.retained.front().seq - 1;
  l.send_off = 0;
  WriteReader(l);
  return Status::Ok();
}

void LeaseRelay::Prune() {
  std::vector<std::pair<uint64_t, std::string>> ended;
  for (auto it = links_.begin(); it != links_.end();) {
    Link& l = *it->second;
    if (l.exit_queued && hooks_.exists && !hooks_.exists(l.clone)) {
      it = links_.erase(it);
      continue;
    }
    if (l.exit_queued) ended.emplace_back(l.ended_at, l.clone);
    ++it;
  }
  if (ended.size() <= limits_.ended_links) return;
  std::sort(ended.begin(), ended.end());
  for (size_t i = 0; i + limits_.ended_links < ended.size(); ++i) {
    Log("'" + ended[i].second + "': forgotten (more than " + std::to_string(limits_.ended_links) + " ended clones kept)");
    links_.erase(ended[i].second);
  }
}

void LeaseRelay::AppendPollFds(std::vector<struct pollfd>* fds) {
  polled_.clear();
  for (auto& [name, lp] : links_) {
    Link& l = *lp;
    if (l.listen.valid() && !l.guest.valid()) {
      fds->push_back({l.listen.get(), POLLIN, 0});
      polled_.push_back({name, Role::kListen, l.listen.get()});
    }
    if (l.guest.valid()) {
      short ev = 0;
      if (!l.guest_done && !OverRetained(l)) ev |= POLLIN;
      if (!l.to_guest.empty()) ev |= POLLOUT;
      // Nothing wanted: left out (a hung-up peer would wake poll at once).
      fds->push_back({ev != 0 ? l.guest.get() : -1, ev, 0});
      polled_.push_back({name, Role::kGuest, l.guest.get()});
    }
    if (l.reader.valid()) {
      short ev = 0;
      if (l.to_guest_bytes < limits_.pending_bytes) ev |= POLLIN;
      uint64_t last = l.next_seq - 1;
      if (l.sent_upto < last) ev |= POLLOUT;
      fds->push_back({ev != 0 ? l.reader.get() : -1, ev, 0});
      polled_.push_back({name, Role::kReader, l.reader.get()});
    }
  }
}

void LeaseRelay::OnPoll(const struct pollfd* fds, size_t n) {
  for (size_t i = 0; i < n && i < polled_.size(); ++i) {
    if (fds[i].revents == 0) continue;
    auto it = links_.find(polled_[i].clone);
    if (it == links_.end()) continue;
    Link& l = *it->second;
    switch (polled_[i].role) {
      case Role::kListen:
        if (l.listen.get() == polled_[i].fd) OnListen(l);
        break;
      case Role::kGuest:
        if (l.guest.get() == polled_[i].fd) OnGuest(l, fds[i].revents);
        break;
      case Role::kReader:
        if (l.reader.get() == polled_[i].fd) OnReader(l, fds[i].revents);
        break;
    }
    // Read from the clone may have made messages for the reader.
    WriteReader(l);
  }
  for (auto it = links_.begin(); it != links_.end();) {
    if (it->second->forget) {
      Log("'" + it->first + "': its end was acknowledged; forgotten");
      it = links_.erase(it);
    } else {
      ++it;
    }
  }
  polled_.clear();
}

}  // namespace smolvm::machine
