#include "bench/fork_requests.h"

#include <chrono>
#include <sstream>

#include "machine/supervisor_conn.h"
#include "transport/unix_channel.h"

namespace smolvm::bench {

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
  // The CLI's side of ctl.sock, with the supervisor's own line helpers.
  machine::Conn conn;
  conn.kind = machine::Conn::kCtl;
  conn.fd = std::move(*sock);
  Status sent = machine::SendLine(conn.fd.get(), "CAPS");
  if (!sent.ok()) {
    p.answer = "no answer: " + sent.message();
    return p;
  }
  auto line = machine::ReadLine(conn, machine::SupervisorClock::now() + std::chrono::milliseconds(timeout_ms));
  p.answer = line.ok() ? *line : "no answer: " + line.status().message();
  p.mode = ForkRequestsOf(p.answer);
  return p;
}

bool RefusedForMemory(const Status& fork) {
  return !fork.ok() && fork.message().find("fork needs ") != std::string::npos &&
         fork.message().find(" MiB free") != std::string::npos;
}

std::string ForkRequestsText(ForkRequests mode) {
  return mode == ForkRequests::kOneForAll ? "one request" : "one request per clone";
}

}  // namespace smolvm::bench
