#include "worker/device_output.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "base/diagnostics.h"

namespace smolvm {

Result<std::unique_ptr<DeviceOutput>> DeviceOutput::Capture() {
  std::unique_ptr<DeviceOutput> out(new DeviceOutput());
  // The original stderr, for the worker's own lines, before fd 2 moves.
  int log_fd = ::fcntl(2, F_DUPFD_CLOEXEC, 3);
  if (log_fd < 0) return ErrnoStatus("dup of stderr", errno);
  FILE* log = ::fdopen(log_fd, "w");
  if (log == nullptr) {
    ::close(log_fd);
    return ErrnoStatus("fdopen of stderr", errno);
  }
  ::setvbuf(log, nullptr, _IONBF, 0);
  int pipes[2][2];
  for (int i = 0; i < 2; ++i) {
    if (::pipe2(pipes[i], O_CLOEXEC) != 0) return ErrnoStatus("pipe2", errno);
    // Room for a whole default device printf FIFO (1 MiB) where allowed.
    (void)::fcntl(pipes[i][1], F_SETPIPE_SZ, 1 << 20);
    (void)::fcntl(pipes[i][0], F_SETFL, O_NONBLOCK);
    out->read_[i] = UniqueFd(pipes[i][0]);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  SetDiagnostics(log);
  for (int i = 0; i < 2; ++i) {
    ::dup2(pipes[i][1], i + 1);  // without O_CLOEXEC: fds 1 and 2 stay what exec'd children see
    ::close(pipes[i][1]);
  }
  // Text a FILE* holds would reach the guest late, or never.
  ::setvbuf(stdout, nullptr, _IONBF, 0);
  ::setvbuf(stderr, nullptr, _IONBF, 0);
  out->stop_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!out->stop_.valid()) return ErrnoStatus("eventfd", errno);
  out->thread_ = std::thread([p = out.get()] { p->Loop(); });
  return out;
}

DeviceOutput::~DeviceOutput() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!::write(stop_.get(), &one, sizeof one);
    thread_.join();
  }
}

void DeviceOutput::DrainLocked(int which) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(read_[which].get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    size_t keep = pending_bytes_ >= kMaxPending ? 0 : std::min(static_cast<size_t>(n), kMaxPending - pending_bytes_);
    dropped_ += static_cast<size_t>(n) - keep;
    if (keep == 0) continue;
    if (pending_.empty() || pending_.back().fd != which + 1) pending_.push_back(Piece{which + 1, {}});
    pending_.back().text.append(buf, keep);
    pending_bytes_ += keep;
  }
}

std::vector<DeviceOutput::Piece> DeviceOutput::Take() {
  std::lock_guard l(mu_);
  // One system call on the usual path (nothing printed): a poll of both.
  struct pollfd p[2] = {{read_[0].get(), POLLIN, 0}, {read_[1].get(), POLLIN, 0}};
  if (::poll(p, 2, 0) > 0) {
    if (p[0].revents) DrainLocked(0);
    if (p[1].revents) DrainLocked(1);
  }
  if (pending_.empty() && dropped_ == 0) return {};
  std::vector<Piece> out;
  out.swap(pending_);
  pending_bytes_ = 0;
  if (dropped_ != 0) {
    out.push_back(Piece{2, "smolvm: " + std::to_string(dropped_) +
                               " bytes of device output dropped (more than 16 MiB between two synchronizations)\n"});
    dropped_ = 0;
  }
  return out;
}

void DeviceOutput::Loop() {
  for (;;) {
    struct pollfd p[3] = {{read_[0].get(), POLLIN, 0}, {read_[1].get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    int n = ::poll(p, 3, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (p[2].revents & POLLIN)) return;
    std::lock_guard l(mu_);
    if (p[0].revents) DrainLocked(0);
    if (p[1].revents) DrainLocked(1);
  }
}

}  // namespace smolvm
