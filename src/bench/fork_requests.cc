#include "bench/fork_requests.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <sstream>

#include "transport/unix_channel.h"

namespace smolvm::bench {
namespace {

// One line from fd ("" on timeout or end), at most 4 KiB.
std::string ReadLine(int fd, int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string line;
  while (line.size() < 4096) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return line;
    struct pollfd p = {fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return line;
    char c;
    ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || c == '\n') return line;
    line += c;
  }
  return line;
}

}  // namespace

ForkRequests ForkRequestsOf(const std::string& answer) {
  std::istringstream in(answer);
  std::string word;
  if (!(in >> word) || word != "CAPS") return ForkRequests::kPerClone;
  while (in >> word)
    if (word == "fork-count") return ForkRequests::kOneForAll;
  return ForkRequests::kPerClone;
}

ForkRequestsProbe ProbeForkRequests(const std::string& ctl_sock, int timeout_ms) {
  ForkRequestsProbe p;
  auto sock = ConnectUnix(ctl_sock);
  if (!sock.ok()) {
    p.answer = "no answer: " + sock.status().message();
    return p;
  }
  static const char kAsk[] = "CAPS\n";
  if (::write(sock->get(), kAsk, sizeof kAsk - 1) != static_cast<ssize_t>(sizeof kAsk - 1)) {
    p.answer = "no answer: the supervisor closed the connection";
    return p;
  }
  p.answer = ReadLine(sock->get(), timeout_ms);
  if (p.answer.empty()) p.answer = "no answer within " + std::to_string(timeout_ms) + " ms";
  p.mode = ForkRequestsOf(p.answer);
  return p;
}

std::string ForkRequestsText(ForkRequests mode) {
  return mode == ForkRequests::kOneForAll ? "one request" : "one request per clone";
}

}  // namespace smolvm::bench
