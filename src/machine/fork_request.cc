#include "machine/fork_request.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>

#include "machine/errors.h"
#include "machine/supervisor_conn.h"
#include "transport/unix_channel.h"

namespace smolvm::machine {

Status RequestForks(const std::string& ctl_sock, const std::vector<std::string>& names, const std::string& share,
                    int timeout_ms, bool park, const std::function<bool()>& cancelled, std::vector<ForkResult>* out,
                    bool* unknown) {
  using Clock = std::chrono::steady_clock;
  *unknown = false;
  out->clear();
  auto sock = ConnectUnix(ctl_sock);
  if (!sock.ok()) return Unavailable(sock.status().message());
  std::string req = "FORKN " + share + " " + std::to_string(timeout_ms);
  if (park) req += " park=1";
  for (const auto& n : names) req += " " + n;
  RETURN_IF_ERROR(SendLine(sock->get(), req));
  // The supervisor bounds each step of its own; this only guards against one
  // that hangs. A parked request's clones get timeout_ms again to park.
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms) * (park ? 2 : 1) + std::chrono::seconds(120) +
                  std::chrono::seconds(1) * static_cast<int64_t>(names.size());
  std::string buf;
  bool cancel_sent = false;
  for (;;) {
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (line.rfind("ERR ", 0) == 0) {
        Status s = StatusOfErrLine(line, "fork failed");
        *unknown = out->empty() && s.message() == "unknown request";
        return s;
      }
      if (line.rfind("OK ", 0) == 0) {
        if (out->size() != names.size())
          return Internal("the supervisor reported " + std::to_string(out->size()) + " of " +
                          std::to_string(names.size()) + " clones: " + line);
        return Status::Ok();
      }
      std::istringstream in(line);
      std::string verb;
      ForkResult r;
      long pid = 0;
      if (!(in >> verb >> r.name >> r.index >> pid >> r.ms) || verb != "CLONE" || out->size() >= names.size() ||
          r.name != names[out->size()])
        return Internal("unexpected answer from the supervisor: " + line);
      r.init_pid = static_cast<pid_t>(pid);
      out->push_back(r);
    }
    if (!cancel_sent && cancelled && cancelled()) {
      ::shutdown(sock->get(), SHUT_WR);
      cancel_sent = true;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Timeout("no answer from the supervisor in time");
    struct pollfd p = {sock->get(), POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
    if (r < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
    if (r <= 0) continue;
    char chunk[4096];
    ssize_t n = ::read(sock->get(), chunk, sizeof chunk);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return Unavailable("the supervisor closed the connection without an answer");
    buf.append(chunk, static_cast<size_t>(n));
    if (buf.size() > 1 << 20) return Internal("the supervisor's answer is too long");
  }
}

Result<std::string> SupervisorCaps(const std::string& ctl_sock) {
  auto sock = ConnectUnix(ctl_sock);
  if (!sock.ok()) return Unavailable(sock.status().message());
  RETURN_IF_ERROR(SendLine(sock->get(), "CAPS"));
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (line.size() < 4096) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return Timeout("no answer from the supervisor in time");
    struct pollfd p = {sock->get(), POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("poll", errno);
    if (r == 0) continue;
    char c;
    ssize_t n = ::read(sock->get(), &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || c == '\n') break;
    line += c;
  }
  if (line.rfind("CAPS", 0) != 0) return StatusOfErrLine(line, "the supervisor did not answer CAPS");
  return line;
}

}  // namespace smolvm::machine
