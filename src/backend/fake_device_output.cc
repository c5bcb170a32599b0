// FakeBackend's device printf and assert, as the driver does them: a
// kernel's printf text waits in the context's FIFO (CU_LIMIT_PRINTF_FIFO_SIZE
// bytes; past it, the oldest text is lost as a full FIFO overwrites it) and
// an assert's message beside it; both reach the process's stdout and stderr
// only at the driver's flush points: a kernel launch, a context, stream or
// event synchronization, a blocking device-to-host copy, a module load or
// unload, and the context's end. A failed assert poisons the context at that
// flush (CUDA_ERROR_ASSERT), not at its launch, as on a GPU.
#include <cuda.h>
#include <unistd.h>

#include <cerrno>

#include "backend/fake_backend.h"

namespace smolvm {
namespace {

void WriteAll(int fd, const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

void FakeBackend::DevicePrintf(std::string_view text) {
  auto fifo = limits_.find(CU_LIMIT_PRINTF_FIFO_SIZE);
  uint64_t cap = fifo == limits_.end() ? (1u << 20) : fifo->second;
  printf_fifo_.append(text);
  if (printf_fifo_.size() > cap) printf_fifo_.erase(0, printf_fifo_.size() - cap);
}

void FakeBackend::DeviceAssert(std::string_view message) {
  assert_text_.append(message);
  if (pending_fault_ == 0) pending_fault_ = CUDA_ERROR_ASSERT;
}

void FakeBackend::FlushDeviceOutput() {
  if (!printf_fifo_.empty()) {
    WriteAll(STDOUT_FILENO, printf_fifo_);
    printf_fifo_.clear();
  }
  if (!assert_text_.empty()) {
    WriteAll(STDERR_FILENO, assert_text_);
    assert_text_.clear();
  }
  if (pending_fault_ != 0 && sticky_ == 0) sticky_ = pending_fault_;
  pending_fault_ = 0;
}

}  // namespace smolvm
