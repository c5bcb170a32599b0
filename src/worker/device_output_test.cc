// DeviceOutput alone, in a forked child (it takes the process's fds 1 and 2).
#include "worker/device_output.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "base/diagnostics.h"

namespace smolvm {
namespace {

// Runs `body` in a child whose stderr is a pipe; returns what the body wrote
// on `report` (fd 3 in the child) and what reached the original stderr.
struct ChildRun {
  std::string report, log;
  int status = -1;
};
template <typename F>
ChildRun InChild(F body) {
  int rep[2], err[2];
  EXPECT_EQ(::pipe(rep), 0);
  EXPECT_EQ(::pipe(err), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(rep[0]);
    ::close(err[0]);
    ::dup2(err[1], 2);
    FILE* report = ::fdopen(rep[1], "w");
    int rc = body(report);
    std::fclose(report);
    ::_exit(rc);
  }
  ::close(rep[1]);
  ::close(err[1]);
  ChildRun r;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(rep[0], buf, sizeof buf)) > 0) r.report.append(buf, static_cast<size_t>(n));
  while ((n = ::read(err[0], buf, sizeof buf)) > 0) r.log.append(buf, static_cast<size_t>(n));
  ::close(rep[0]);
  ::close(err[0]);
  ::waitpid(pid, &r.status, 0);
  return r;
}

TEST(DeviceOutputTest, StdoutAndStderrAreTakenInOrderAndDiagnosticsStayInTheLog) {
  ChildRun r = InChild([](FILE* report) {
    auto out = DeviceOutput::Capture();
    if (!out.ok()) return 2;
    std::printf("printf line\n");           // stdio, unbuffered now
    (void)!::write(1, "raw line\n", 9);     // the descriptor
    (void)!::write(2, "assert line\n", 12);
    std::fprintf(Diagnostics(), "smolvm worker: a diagnostic\n");
    for (const DeviceOutput::Piece& p : (*out)->Take()) std::fprintf(report, "[%d]%s", p.fd, p.text.c_str());
    std::fprintf(report, "|%zu", (*out)->Take().size());  // taken once
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.status << r.log;
  EXPECT_EQ(r.report, "[1]printf line\nraw line\n[2]assert line\n|0");
  EXPECT_EQ(r.log, "smolvm worker: a diagnostic\n");
}

// A flush larger than a pipe holds does not block the writer; past the cap
// the text is dropped and Take says how much.
TEST(DeviceOutputTest, LargeOutputNeverBlocksAndIsCapped) {
  ChildRun r = InChild([](FILE* report) {
    auto out = DeviceOutput::Capture();
    if (!out.ok()) return 2;
    std::string chunk(1 << 20, 'x');
    size_t written = 0;
    for (int i = 0; i < 17; ++i) {  // 17 MiB: over the pipe's size and the 16 MiB cap
      size_t off = 0;
      while (off < chunk.size()) {
        ssize_t n = ::write(1, chunk.data() + off, chunk.size() - off);
        if (n <= 0) return 3;
        off += static_cast<size_t>(n);
      }
      written += chunk.size();
    }
    size_t got = 0;
    std::string note;
    for (const DeviceOutput::Piece& p : (*out)->Take()) {
      if (p.fd == 1) got += p.text.size();
      else note += p.text;
    }
    std::fprintf(report, "%zu %zu %s", written, got, note.c_str());
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.status << r.log;
  EXPECT_EQ(r.report, std::to_string(17u << 20) + " " + std::to_string(DeviceOutput::kMaxPending) +
                          " smolvm: 1048576 bytes of device output dropped (more than 16 MiB between two "
                          "synchronizations)\n");
}

}  // namespace
}  // namespace smolvm
