#include "backend/cuda_host_check.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "base/unique_fd.h"

namespace smolvm {
namespace {

// A broken driver can hang in cuInit; the answer is "no usable GPU" then.
constexpr int kProbeTimeoutMs = 60000;

// Runs in the child: empty when the host has a device, else why not.
std::string Probe(const LibcudaSearch& search) {
  auto found = FindLibcuda(search);
  if (!found.ok())
    return search.override_path.empty()
               ? "libcuda.so.1, the NVIDIA driver, is not installed: not on $LD_LIBRARY_PATH, in the ld.so cache or "
                 "the driver directories (SMOLVM_LIBCUDA names it elsewhere)"
               : found.status().message();
  auto driver = CudaDriver::Load(search);
  if (!driver.ok()) return driver.status().message();
  auto& d = **driver;
  if (Status st = d.Check(d.cuInit(0), "cuInit"); !st.ok()) return d.path() + ": " + st.message();
  int n = 0;
  if (Status st = d.Check(d.cuDeviceGetCount(&n), "cuDeviceGetCount"); !st.ok()) return d.path() + ": " + st.message();
  if (n <= 0) return d.path() + " sees no CUDA device";
  return "";
}

}  // namespace

Status CheckCudaHost(const LibcudaSearch& search) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) < 0) return ErrnoStatus("pipe", errno);
  UniqueFd rd(fds[0]), wr(fds[1]);
  pid_t child = ::fork();
  if (child < 0) return ErrnoStatus("fork", errno);
  if (child == 0) {
    rd.Reset();
    std::string why = Probe(search);
    for (size_t at = 0; at < why.size();) {
      ssize_t n = ::write(wr.get(), why.data() + at, why.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    ::_exit(why.empty() ? 0 : 1);
  }
  wr.Reset();
  std::string why;
  bool timed_out = false;
  char buf[512];
  struct pollfd p = {rd.get(), POLLIN, 0};
  while (true) {
    int r = ::poll(&p, 1, kProbeTimeoutMs);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      timed_out = true;
      ::kill(child, SIGKILL);
      break;
    }
    ssize_t n = ::read(rd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    why.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) why = "the NVIDIA driver did not answer cuInit within " + std::to_string(kProbeTimeoutMs / 1000) + " s";
  else if (why.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    why = "probing the NVIDIA driver crashed (" +
          std::string(WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                          : "exit " + std::to_string(WEXITSTATUS(status))) +
          ")";
  if (why.empty()) return Status::Ok();
  for (char& c : why)
    if (c == '\n') c = ' ';
  return Unavailable("no usable NVIDIA GPU on this host (" + why + "): " + kCudaBackendFix);
}

}  // namespace smolvm
