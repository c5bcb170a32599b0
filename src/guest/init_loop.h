// The pid-1 loop of a machine (and of each clone): reaps every process of the
// pid namespace, reports when the machine's program ends, and returns once no
// process is left. SIGTERM/SIGINT/SIGHUP sent to pid 1 are forwarded to every
// process of the namespace (kill(-1)), which is how `machine stop` asks nicely
// before it kills the cgroup.
//
// Header-only and free of smolvm libraries because libsmolvm-guest runs it in
// a clone's pid 1 and the supervisor's sandbox child runs it in a machine's.
#pragma once

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void SmolvmInitForwardSignal(int sig) { kill(-1, sig); }

// REQUIRES: the caller is pid 1 of its pid namespace. `report_fd` (>= 0) gets
// "EXIT <wait status>\n" when `program` ends. Returns `program`'s wait status.
static inline int SmolvmInitLoop(pid_t program, int report_fd) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SmolvmInitForwardSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, SIGTERM);
  sigaddset(&unblock, SIGINT);
  sigaddset(&unblock, SIGHUP);
  sigaddset(&unblock, SIGCHLD);
  sigprocmask(SIG_UNBLOCK, &unblock, NULL);
  int program_status = 0;
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: nobody left
    }
    if (pid == program) {
      program_status = status;
      if (report_fd >= 0) {
        char line[64];
        int n = snprintf(line, sizeof line, "EXIT %d\n", status);
        ssize_t w;
        do {
          w = write(report_fd, line, (size_t)n);
        } while (w < 0 && errno == EINTR);
      }
    }
  }
  return program_status;
}

// The exit code pid 1 ends with, from the program's wait status.
static inline int SmolvmInitExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}
