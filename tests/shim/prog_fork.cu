// A golden that forks through the daemon: frozen weights shared read-only,
// private state, a device-resident pointer table and pinned host memory.
// Usage: prog_fork OUTDIR [FROZEN_MIB=96 PRIVATE_MIB=4]. The golden waits in
// smolvmForkpoint(); each clone checks what it inherited, writes
// OUTDIR/clone<i>.txt and exits (with PROG_FORK_HOLD=1 it first waits for
// OUTDIR/exit to appear, so its memory can be measured); the golden, once
// released, checks its own memory and writes OUTDIR/golden.txt.
// With PROG_FORK_UPLOAD=1 the frozen range is written by host-to-device
// copies instead of a kernel, so `--share auto` finds it. PROG_FORK_HOST_MIB=M
// makes the golden hold M MiB of touched private anonymous memory and
// PROG_FORK_PINNED_MIB=P makes its pinned buffer P MiB (default 1), like a
// learner that keeps host state: what each fork of the golden has to copy.
// A module global (smolvm_test_global) the golden wrote through
// cudaMemcpyToSymbol: each clone reads the golden's values at the golden's
// symbol address and writes its own (global=1), the golden keeps its own.
#include <smolvm/guest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"

__device__ unsigned smolvm_test_global[1024];

namespace {

size_t kFrozenWords = (96u << 20) / 4;
size_t kPrivateWords = (4u << 20) / 4;
size_t kPinnedBytes = 1u << 20;

// p[i] == value + i, checked on up to 64 blocks of 256 KiB spread over the
// range (first and last included), so multi-GiB buffers check quickly.
bool Holds(const unsigned* dev, size_t n, unsigned value) {
  const size_t block = 64 * 1024;
  size_t blocks = (n + block - 1) / block;
  size_t step = blocks > 64 ? blocks / 63 : 1;
  std::vector<unsigned> h(block);
  for (size_t b = 0; b < blocks; b = (b + step < blocks || b == blocks - 1) ? b + step : blocks - 1) {
    size_t at = b * block, len = std::min(block, n - at);
    if (cudaMemcpy(h.data(), dev + at, len * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
    for (size_t i = 0; i < len; ++i)
      if (h[i] != value + static_cast<unsigned>(at + i)) return false;
    if (b == blocks - 1) break;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CHECK(argc == 2 || argc == 4);
  std::string outdir = argv[1];
  if (argc == 4) {
    kFrozenWords = std::stoull(argv[2]) * (1u << 20) / 4;
    kPrivateWords = std::stoull(argv[3]) * (1u << 20) / 4;
  }
  unsigned *frozen, *priv;
  unsigned** table;
  CHECK_CUDA(cudaMalloc(&frozen, kFrozenWords * 4));
  CHECK_CUDA(cudaMalloc(&priv, kPrivateWords * 4));
  CHECK_CUDA(cudaMalloc(&table, 2 * sizeof(unsigned*)));
  if (const char* up = std::getenv("PROG_FORK_UPLOAD"); up && std::string(up) == "1") {
    std::vector<unsigned> piece(16u << 20);  // 64 MiB at a time
    for (size_t at = 0; at < kFrozenWords; at += piece.size()) {
      size_t n = std::min(piece.size(), kFrozenWords - at);
      for (size_t i = 0; i < n; ++i) piece[i] = 1000 + static_cast<unsigned>(at + i);
      CHECK_CUDA(cudaMemcpy(frozen + at, piece.data(), n * 4, cudaMemcpyHostToDevice));
    }
  } else {
    smolvm_test_fill_u32<<<256, 256>>>(frozen, 1000, kFrozenWords);
  }
  smolvm_test_fill_u32<<<256, 256>>>(priv, 7, kPrivateWords);
  unsigned* ptrs[2] = {frozen, priv};
  CHECK_CUDA(cudaMemcpy(table, ptrs, sizeof ptrs, cudaMemcpyHostToDevice));
  std::vector<char> host_state;
  if (const char* m = std::getenv("PROG_FORK_HOST_MIB")) host_state.assign(std::stoull(m) << 20, 'h');
  if (const char* m = std::getenv("PROG_FORK_PINNED_MIB")) kPinnedBytes = std::stoull(m) << 20;
  char* pinned;
  CHECK_CUDA(cudaMallocHost(&pinned, kPinnedBytes));
  std::memset(pinned, 'g', kPinnedBytes);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<unsigned> global_values(1024);
  for (unsigned i = 0; i < 1024; ++i) global_values[i] = 300 + i;
  CHECK_CUDA(cudaMemcpyToSymbol(smolvm_test_global, global_values.data(), 4096));
  void* global_addr = nullptr;
  CHECK_CUDA(cudaGetSymbolAddress(&global_addr, smolvm_test_global));
  CHECK(smolvmMarkFrozen(frozen, kFrozenWords * 4) == 0);
  CHECK(smolvmMarkFrozen(&argc, 4) != 0);  // not device memory

  int idx = smolvmForkpoint();
  if (idx < 0) {
    // Released: the golden's memory is as it left it, shared or not.
    std::vector<unsigned> g(1024);
    bool ok = Holds(frozen, kFrozenWords, 1000) && Holds(priv, kPrivateWords, 7) && pinned[123] == 'g' &&
              cudaMemcpyFromSymbol(g.data(), smolvm_test_global, 4096) == cudaSuccess && g == global_values;
    WriteFile(outdir + "/golden.txt", "golden released=" + std::to_string(idx) + " ok=" + (ok ? "1" : "0") + "\n");
    return ok ? 0 : 1;
  }
  std::string report = "clone " + std::to_string(idx);
  unsigned* got[2];
  CHECK_CUDA(cudaMemcpy(got, table, sizeof got, cudaMemcpyDeviceToHost));
  report += " table=" + std::string(got[0] == frozen && got[1] == priv ? "1" : "0");
  report += " frozen=" + std::string(Holds(frozen, kFrozenWords, 1000) ? "1" : "0");
  report += " private=" + std::string(Holds(priv, kPrivateWords, 7) ? "1" : "0");
  report += " pinned=" + std::string(pinned[kPinnedBytes - 1] == 'g' ? "1" : "0");
  // Private writes, pinned writes and a copy into frozen memory (copy-on-write).
  std::memset(pinned, 'c', kPinnedBytes);
  smolvm_test_fill_u32<<<64, 256>>>(priv, 5000 + idx, kPrivateWords);
  unsigned mark[4] = {1, 2, 3, static_cast<unsigned>(idx)};
  CHECK_CUDA(cudaMemcpy(frozen, mark, sizeof mark, cudaMemcpyHostToDevice));
  unsigned back[4];
  CHECK_CUDA(cudaMemcpy(back, frozen, sizeof back, cudaMemcpyDeviceToHost));
  report += " own_private=" + std::string(Holds(priv, kPrivateWords, 5000 + idx) ? "1" : "0");
  report += " cow=" + std::string(std::memcmp(back, mark, sizeof mark) == 0 ? "1" : "0");
  // The golden's global: its values, at its symbol address; then this clone's own.
  std::vector<unsigned> g(1024);
  void* addr = nullptr;
  unsigned own = 9000 + static_cast<unsigned>(idx), own_back = 0;
  bool global_ok = cudaMemcpyFromSymbol(g.data(), smolvm_test_global, 4096) == cudaSuccess && g == global_values &&
                   cudaGetSymbolAddress(&addr, smolvm_test_global) == cudaSuccess && addr == global_addr &&
                   cudaMemcpyToSymbol(smolvm_test_global, &own, 4, 64) == cudaSuccess &&
                   cudaMemcpyFromSymbol(&own_back, smolvm_test_global, 4, 64) == cudaSuccess && own_back == own;
  report += " global=" + std::string(global_ok ? "1" : "0");
  if (idx == 1) {
    // A kernel write into shared frozen memory faults, in this clone only.
    smolvm_test_write_u32<<<1, 1>>>(frozen + (80u << 20) / 4, 9);  // past the copied first chunk
    report += " fault=" + std::string(cudaGetErrorName(cudaDeviceSynchronize()));
  }
  WriteFile(outdir + "/clone" + std::to_string(idx) + ".txt", report + "\n");
  if (const char* hold = std::getenv("PROG_FORK_HOLD"); hold && std::string(hold) == "1") {
    struct stat st;
    for (int i = 0; i < 30000 && ::stat((outdir + "/exit").c_str(), &st) != 0; ++i) ::usleep(10000);
  }
  return 0;
}
