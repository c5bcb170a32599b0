// Uploads host memory to the device through two pinned staging buffers.
#pragma once

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "learner/cuda/common.cuh"

namespace smolvm::learner::cuda {

// Copies host memory (e.g. an mmap of a safetensors file) to the device
// through two pinned buffers, host copies spread over a few threads.
class Uploader {
 public:
  Status Init(DeviceAllocator& a, size_t staging_bytes, cudaStream_t s) {
    half_ = staging_bytes / 2;
    stream_ = s;
    for (int i = 0; i < 2; ++i) {
      CUDA_RETURN(cudaMallocHost(&pinned_[i], half_));
      CUDA_RETURN(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming));
    }
    return Status::Ok();
  }
  ~Uploader() {
    for (int i = 0; i < 2; ++i) {
      if (done_[i]) cudaEventSynchronize(done_[i]), cudaEventDestroy(done_[i]);
      if (pinned_[i]) cudaFreeHost(pinned_[i]);
    }
  }
  Status Copy(void* dst, const void* src, size_t bytes) {
    for (size_t off = 0; off < bytes; off += half_) {
      size_t n = std::min(half_, bytes - off);
      CUDA_RETURN(cudaEventSynchronize(done_[cur_]));
      ParallelMemcpy(static_cast<uint8_t*>(pinned_[cur_]), static_cast<const uint8_t*>(src) + off, n);
      CUDA_RETURN(cudaMemcpyAsync(static_cast<uint8_t*>(dst) + off, pinned_[cur_], n, cudaMemcpyHostToDevice, stream_));
      CUDA_RETURN(cudaEventRecord(done_[cur_], stream_));
      cur_ ^= 1;
    }
    return Status::Ok();
  }

 private:
  static void ParallelMemcpy(uint8_t* dst, const uint8_t* src, size_t n) {
    constexpr size_t kPerThread = size_t{8} << 20;
    unsigned threads = static_cast<unsigned>(std::min<size_t>(8, (n + kPerThread - 1) / kPerThread));
    if (threads <= 1) return void(std::memcpy(dst, src, n));
    size_t part = (n + threads - 1) / threads;
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      size_t b = t * part, e = std::min(n, b + part);
      if (b < e) pool.emplace_back([=] { std::memcpy(dst + b, src + b, e - b); });
    }
    for (auto& t : pool) t.join();
  }
  size_t half_ = 0;
  cudaStream_t stream_ = nullptr;
  void* pinned_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
  int cur_ = 0;
};

}  // namespace smolvm::learner::cuda
