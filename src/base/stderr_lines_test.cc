#include "base/stderr_lines.h"

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace smolvm {
namespace {

// A child's stderr is a SOCK_SEQPACKET socket, so each write(2) arrives as
// one message: the parent sees how the child's lines were written.
std::string FirstWrite(bool whole_lines, const std::string& line) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) return "socketpair failed";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(sv[1], 2);
    if (whole_lines) StderrWholeLines();
    // Written in two calls, as a message built in parts is.
    std::fputs(line.substr(0, line.size() / 2).c_str(), stderr);
    std::fputs(line.substr(line.size() / 2).c_str(), stderr);
    ::_exit(0);  // no exit-time flush: what left, left at the newline
  }
  ::close(sv[1]);
  std::string got(128 << 10, '\0');
  ssize_t n = ::recv(sv[0], got.data(), got.size(), 0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(sv[0]);
  got.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return got;
}

TEST(StderrWholeLines, ALineWrittenInPartsLeavesInOneWrite) {
  std::string line = "smolvmd[1] 00:00:00.000: fork: clone 0 of golden pid 2 (1 of 16 attached) shared=88\n";
  EXPECT_EQ(FirstWrite(true, line), line);
  // Without it, stderr is unbuffered: the first part leaves alone, and
  // another process's write can come between the parts.
  EXPECT_EQ(FirstWrite(false, line), line.substr(0, line.size() / 2));
}

TEST(StderrWholeLines, ALongLineLeavesInOneWrite) {
  std::string line = std::string(20000, 'x') + "\n";
  EXPECT_EQ(FirstWrite(true, line).size(), line.size());
}

}  // namespace
}  // namespace smolvm
