// Micro-benchmarks of the remoting cost; the same binary runs natively and
// through the shim. Each prints one JSON line on stdout.
//
//   micro_bench roundtrip [--iters N]  cudaStreamQuery on an idle stream: median/p99 µs
//   micro_bench launch    [--iters N]  empty kernel, async launches per second
//   micro_bench copy      [--reps R]   1 GiB H2D and D2H, pageable and pinned: GB/s (1e9)
//   micro_bench all
// --label L is copied into every line ("native", "shim", ...).
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "gpu_check.cuh"

using Clock = std::chrono::steady_clock;

// Named as the fake backend's built-in empty kernel, so that the launch
// benchmark also runs through the shim against `--backend fake`.
extern "C" __global__ void smolvm_test_empty() {}

static std::string g_label = "unlabelled";

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

void RoundTrip(int iters) {
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < 1000; ++i) CHECK(cudaStreamQuery(s));
  std::vector<double> us(iters);
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    cudaError_t e = cudaStreamQuery(s);
    us[i] = Us(Clock::now() - t0);
    if (e != cudaSuccess) CHECK(e);
  }
  std::printf("{\"bench\":\"sync_roundtrip\",\"label\":\"%s\",\"call\":\"cudaStreamQuery\","
              "\"iters\":%d,\"median_us\":%.3f,\"p10_us\":%.3f,\"p90_us\":%.3f,\"p99_us\":%.3f}\n",
              g_label.c_str(), iters, Percentile(us, 0.5), Percentile(us, 0.1), Percentile(us, 0.9),
              Percentile(us, 0.99));
  CHECK(cudaStreamDestroy(s));
}

void Launch(int iters) {
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  for (int i = 0; i < 1000; ++i) smolvm_test_empty<<<1, 1, 0, s>>>();
  CHECK(cudaStreamSynchronize(s));
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) smolvm_test_empty<<<1, 1, 0, s>>>();
  auto issued = Clock::now();
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(s));
  auto done = Clock::now();
  std::printf("{\"bench\":\"launch_rate\",\"label\":\"%s\",\"kernel\":\"empty<<<1,1>>>\","
              "\"launches\":%d,\"issue_per_s\":%.0f,\"complete_per_s\":%.0f}\n",
              g_label.c_str(), iters, iters / (Us(issued - t0) * 1e-6),
              iters / (Us(done - t0) * 1e-6));
  CHECK(cudaStreamDestroy(s));
}

void Copy(int reps) {
  const size_t bytes = size_t{1} << 30;
  void* dev;
  CHECK(cudaMalloc(&dev, bytes));
  void* pageable = std::malloc(bytes);
  EXPECT(pageable != nullptr);
  std::memset(pageable, 0x5a, bytes);  // fault every page in before timing
  void* pinned;
  CHECK(cudaMallocHost(&pinned, bytes));
  std::memset(pinned, 0xa5, bytes);
  for (auto [mem, host] : {std::pair<const char*, void*>{"pageable", pageable}, {"pinned", pinned}}) {
    for (auto [dir, kind] : {std::pair<const char*, cudaMemcpyKind>{"H2D", cudaMemcpyHostToDevice},
                             {"D2H", cudaMemcpyDeviceToHost}}) {
      auto once = [&, kind = kind, host = host] {
        auto t0 = Clock::now();
        if (kind == cudaMemcpyHostToDevice) {
          CHECK(cudaMemcpy(dev, host, bytes, kind));
        } else {
          CHECK(cudaMemcpy(host, dev, bytes, kind));
        }
        return bytes / (Us(Clock::now() - t0) * 1e3);  // GB/s, 1e9 bytes
      };
      once();  // warm-up
      std::vector<double> gbs;
      for (int r = 0; r < reps; ++r) gbs.push_back(once());
      std::printf("{\"bench\":\"copy\",\"label\":\"%s\",\"dir\":\"%s\",\"host_mem\":\"%s\","
                  "\"bytes\":%zu,\"reps\":%d,\"median_gbps\":%.2f,\"best_gbps\":%.2f}\n",
                  g_label.c_str(), dir, mem, bytes, reps, Percentile(gbs, 0.5),
                  *std::max_element(gbs.begin(), gbs.end()));
      std::fflush(stdout);
    }
  }
  CHECK(cudaFreeHost(pinned));
  std::free(pageable);
  CHECK(cudaFree(dev));
}

int main(int argc, char** argv) {
  std::string what = argc > 1 ? argv[1] : "all";
  int iters = 0, reps = 5;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--label") g_label = argv[i + 1];
    else if (flag == "--iters") iters = std::atoi(argv[i + 1]);
    else if (flag == "--reps") reps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "micro_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  RequireDevice();
  CHECK(cudaFree(nullptr));  // context creation, outside every measurement
  if (what == "roundtrip" || what == "all") RoundTrip(iters ? iters : 20000);
  if (what == "launch" || what == "all") Launch(iters ? iters : 100000);
  if (what == "copy" || what == "all") Copy(reps);
  if (what != "roundtrip" && what != "launch" && what != "copy" && what != "all") {
    std::fprintf(stderr, "micro_bench: unknown benchmark '%s' (roundtrip|launch|copy|all)\n",
                 what.c_str());
    return 2;
  }
  return 0;
}
