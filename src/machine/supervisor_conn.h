// The supervisor's connections (guests on the forkpoint socket, the CLI on
// ctl.sock) and the line protocol on them (forkpoint_wire.h). Supervisor
// only; single-threaded.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace smolvm::machine {

using SupervisorClock = std::chrono::steady_clock;

struct Conn {
  enum Kind { kGuestNew, kGolden, kClone, kCtl } kind;
  UniqueFd fd;
  std::string buf;
  std::string clone;  // kClone: the clone machine's name
  UniqueFd cuda;      // kClone of a --cuda golden: holds the clone's CUDA endpoint
  pid_t peer = 0;     // SO_PEERCRED at accept (host pid)
  bool dead = false;
};

// The most a connection may buffer without a newline: a guest's lines are
// short (forkpoint_wire.h); a control client's FORKN names up to
// kMaxForkCount clones.
size_t MaxBuffered(Conn::Kind kind);

// Appends what is readable now (or waits until deadline) to c.buf.
// *sender gets the SCM_CREDENTIALS pid of the bytes, when present.
// Descriptors a guest sends are closed unread.
Status Fill(Conn& c, std::optional<SupervisorClock::time_point> deadline, pid_t* sender = nullptr);
std::optional<std::string> PopLine(Conn& c);
Result<std::string> ReadLine(Conn& c, SupervisorClock::time_point deadline, pid_t* sender = nullptr);
// One line, with pass_fd (if >= 0) as SCM_RIGHTS.
Status SendLine(int fd, const std::string& line, int pass_fd = -1);
// "ERR <code> <message>" (newlines flattened).
std::string ErrLine(const Status& s);
// The Status an ErrLine carries; Internal(fallback: line) for any other line.
Status StatusOfErrLine(const std::string& line, const std::string& fallback);
// Whether the peer of a connected stream socket has shut down its sending
// side (or closed): a control client's way to cancel a request. Never waits.
bool PeerHungUp(int fd);
// The peer's host pid (SO_PEERCRED), 0 when unknown.
pid_t PeerPid(int fd);

}  // namespace smolvm::machine
