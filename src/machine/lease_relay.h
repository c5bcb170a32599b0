// LeaseRelay: the supervisor's half of its clones' lease links
// (guest/lease_wire.h; the host's half is lease_link.h). Per clone: its
// listening lease.sock, the clone's connection, at most one reader's
// connection, the payloads on their way to the clone and the clone's messages
// kept until a reader acks them.
//
// Owned by the Supervisor and driven by its one thread's poll loop:
// AppendPollFds before poll(2), OnPoll right after it (before anything else
// changes a link). Never blocks: every socket is non-blocking and every
// buffer is bounded (Limits); a clone that sends too much is simply not read
// until a reader acks, a clone that breaks the protocol gets a FAULT and its
// link closed — nothing another clone or reader sees.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "machine/lease_frame.h"

namespace smolvm::machine {

class LeaseRelay {
 public:
  struct Limits {
    size_t retained_messages = 64;        // clone -> host, not acked: stop reading the clone beyond
    size_t retained_bytes = 4u << 20;
    size_t pending_bytes = 4u << 20;      // host -> clone, not written: stop reading the reader beyond
    size_t ended_links = 256;             // ended clones kept for a reader (oldest forgotten first)
  };
  struct Hooks {
    // A parked clone's first payload came: send its init "GO".
    std::function<void(const std::string& clone)> release;
    // Whether host pid `pid` is a process of machine `clone` (its cgroup).
    std::function<bool(pid_t pid, const std::string& clone)> in_clone;
    // Whether the machine `clone` still exists (its store row).
    std::function<bool(const std::string& clone)> exists;
    std::function<void(const std::string& msg)> log;
  };

  explicit LeaseRelay(Hooks hooks);
  LeaseRelay(Hooks hooks, Limits limits);
  ~LeaseRelay();
  LeaseRelay(const LeaseRelay&) = delete;
  LeaseRelay& operator=(const LeaseRelay&) = delete;

  // A clone made: `listen` is its lease.sock. A parked clone's program waits
  // for the first payload (the release hook).
  void AddClone(const std::string& clone, UniqueFd listen, bool parked);
  bool Has(const std::string& clone) const { return links_.count(clone) != 0; }
  bool Parked(const std::string& clone) const;
  // The clone's init reported its program's end: what the clone sent before
  // is taken, then EXIT is queued and the clone's link closed.
  void ProgramExited(const std::string& clone, int wait_status);
  // The clone's init ended (its connection closed): EXIT (-1) unless reported.
  void CloneEnded(const std::string& clone);
  // A reader for `clone` (the connection of a LEASE request, after "OK"
  // was sent on it); replaces the one before. kNotFound when there is no link.
  Status Attach(const std::string& clone, UniqueFd reader);
  // Forgets ended clones whose machine is gone, and the oldest ended ones
  // beyond Limits::ended_links.
  void Prune();

  void AppendPollFds(std::vector<struct pollfd>* fds);
  // `fds` points at the entries AppendPollFds added, after poll(2).
  void OnPoll(const struct pollfd* fds, size_t n);

 private:
  struct Link;
  enum class Role { kListen, kGuest, kReader };
  struct Polled {
    std::string clone;
    Role role;
    int fd;
  };

  void OnListen(Link& l);
  void OnGuest(Link& l, short revents);
  void OnReader(Link& l, short revents);
  // Takes frames from the clone while the bounds allow (all that is there with drain).
  void ReadGuest(Link& l, bool drain);
  void WriteGuest(Link& l);
  void WriteReader(Link& l);
  void Retain(Link& l, uint8_t kind, std::string body, uint64_t payload);
  void Fault(Link& l, const std::string& why);
  void CloseGuest(Link& l, bool for_good);
  void CloseReader(Link& l, const std::string& why);
  void QueueExit(Link& l, int wait_status);
  bool OverRetained(const Link& l) const;
  void Log(const std::string& msg) const;

  Hooks hooks_;
  Limits limits_;
  std::map<std::string, std::unique_ptr<Link>> links_;
  std::vector<Polled> polled_;
  uint64_t ended_counter_ = 0;
};

}  // namespace smolvm::machine
