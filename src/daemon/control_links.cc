#include "daemon/control_links.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>

#include "daemon/daemon.h"

namespace smolvm {

Status SetLinkSendTimeout(int fd) {
  struct timeval tv = {static_cast<time_t>(kLinkFrameDeadline.count() / 1000),
                       static_cast<suseconds_t>(kLinkFrameDeadline.count() % 1000 * 1000)};
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0) return ErrnoStatus("SO_SNDTIMEO", errno);
  return Status::Ok();
}

Status LinkReader::ReadFrame(proto::FrameHeader* header, std::string* payload, std::vector<UniqueFd>* fds) {
  while (true) {
    ASSIGN_OR_RETURN(bool whole, link_.TryReadFrame(header, payload, fds));
    if (whole) return Status::Ok();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Timeout("the worker's control link did not send a whole frame in time");
    struct pollfd p = {link_.fd(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count()) + 1) < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
  }
}

void Daemon::ExpireStalledLinks() {
  auto now = std::chrono::steady_clock::now();
  for (auto& [pid, w] : workers_) {
    if (!w.control) continue;
    auto since = w.control->PartialSince();
    if (!since || now - *since < kLinkFrameDeadline) continue;
    Log("worker %d stopped mid-frame on its control link for %lld ms: ending it", pid,
        static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(now - *since).count()));
    DiscardWorker(w);  // reaped through its pidfd; its session ends
  }
  for (auto it = admin_clients_.begin(); it != admin_clients_.end();) {
    auto since = it->second->PartialSince();
    if (!since || now - *since < kLinkFrameDeadline) {
      ++it;
      continue;
    }
    Log("an admin client stopped mid-frame for %lld ms: closing it",
        static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(now - *since).count()));
    uint64_t client = it->first;
    it = admin_clients_.erase(it);
    DetachEndpointsOf(client);
  }
}

std::optional<std::chrono::steady_clock::time_point> Daemon::NextLinkDeadline() const {
  std::optional<std::chrono::steady_clock::time_point> soonest;
  auto consider = [&soonest](const UnixChannel* ch) {
    if (!ch) return;
    if (auto since = ch->PartialSince()) {
      auto at = *since + kLinkFrameDeadline;
      if (!soonest || at < *soonest) soonest = at;
    }
  };
  for (const auto& [pid, w] : workers_) consider(w.control.get());
  for (const auto& [id, c] : admin_clients_) consider(c.get());
  return soonest;
}

}  // namespace smolvm
