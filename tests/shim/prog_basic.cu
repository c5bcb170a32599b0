// Prints what the first CUDA calls return, one name a line; used by the
// handshake-mismatch and worker-death tests. With an argument "wait" it
// prints READY after its first calls, then waits for a line on stdin before
// calling again.
#include <cstring>
#include <string>

#include "check.h"

int main(int argc, char** argv) {
  bool wait = argc > 1 && std::strcmp(argv[1], "wait") == 0;
  void* d = nullptr;
  std::printf("malloc: %s\n", cudaGetErrorName(cudaMalloc(&d, 1 << 20)));
  int count = -1;
  std::printf("count: %s\n", cudaGetErrorName(cudaGetDeviceCount(&count)));
  if (wait) {
    std::printf("memset: %s\n", cudaGetErrorName(cudaMemset(d, 1, 1 << 20)));
    std::printf("sync: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    std::printf("READY\n");
    std::fflush(stdout);
    char line[64];
    if (!std::fgets(line, sizeof line, stdin)) return 2;
    std::printf("memset: %s\n", cudaGetErrorName(cudaMemset(d, 1, 1 << 20)));
    std::printf("sync: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
  }
  std::printf("free: %s\n", cudaGetErrorName(cudaFree(d)));
  if (!wait) {  // an export the shim does not implement: not supported, named once on stderr
    cudaGraph_t g;
    void* managed = nullptr;
    std::printf("stub: %s\n", cudaGetErrorName(cudaMallocManaged(&managed, 256, cudaMemAttachGlobal)));
    std::printf("stub: %s\n", cudaGetErrorName(cudaMallocManaged(&managed, 256, cudaMemAttachGlobal)));
    // What torch.cuda.graph() does first: a capture of nothing, after which
    // the stream goes on working.
    cudaStream_t s;
    void* e = nullptr;
    if (cudaStreamCreate(&s) == cudaSuccess && cudaMalloc(&e, 4096) == cudaSuccess) {
      cudaError_t begin = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
      std::printf("capture: %s\n", cudaGetErrorName(begin));
      if (begin == cudaSuccess) {  // natively
        (void)cudaStreamEndCapture(s, &g);
        (void)cudaGraphDestroy(g);
      }
      cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusActive;
      (void)cudaStreamIsCapturing(s, &capturing);
      std::printf("capturing: %d\n", static_cast<int>(capturing));
      (void)cudaGetLastError();
      cudaError_t m = cudaMemsetAsync(e, 1, 4096, s);
      std::printf("after capture: %s\n", cudaGetErrorName(m == cudaSuccess ? cudaStreamSynchronize(s) : m));
      (void)cudaFree(e);
      (void)cudaStreamDestroy(s);
    }
  }
  std::printf("last: %s\n", cudaGetErrorName(cudaGetLastError()));
  return 0;
}
