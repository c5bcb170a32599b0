// Kernel parameters of every shape the runtime must pack: 1/2/4/8-byte
// scalars at odd positions, a float4 (16-byte aligned), a struct with
// padding, a 1 KiB struct by value and pointers. The kernel writes back
// what it received; the CPU compares byte for byte.
#include <vector>

#include "gpu_check.cuh"

struct Padded {
  char c;
  double d;
  int3 v;
  short s;
};

struct Big {
  unsigned words[256];
};

struct Seen {
  char c;
  short s;
  int i;
  long long ll;
  float f;
  double d;
  float4 f4;
  Padded p;
  unsigned big_sum;
  unsigned big_last;
};

__global__ void Echo(char c, Seen* out, short s, int i, long long ll, float f, double d,
                     float4 f4, Padded p, Big big, const unsigned* check) {
  unsigned sum = 0;
  for (int k = 0; k < 256; ++k) sum += big.words[k] ^ check[k];
  out->c = c;
  out->s = s;
  out->i = i;
  out->ll = ll;
  out->f = f;
  out->d = d;
  out->f4 = f4;
  out->p = p;
  out->big_sum = sum;
  out->big_last = big.words[255];
}

int main() {
  RequireDevice();
  Rng rng(5);
  Big big;
  for (auto& w : big.words) w = static_cast<unsigned>(rng.Next());
  unsigned* check;
  CHECK(cudaMalloc(&check, sizeof big.words));
  CHECK(cudaMemcpy(check, big.words, sizeof big.words, cudaMemcpyHostToDevice));
  Seen* out;
  CHECK(cudaMalloc(&out, sizeof(Seen)));
  CHECK(cudaMemset(out, 0, sizeof(Seen)));

  Seen want;
  std::memset(&want, 0, sizeof want);
  want.c = 'q';
  want.s = -12345;
  want.i = static_cast<int>(rng.Next());
  want.ll = static_cast<long long>(rng.Next());
  want.f = rng.Float();
  want.d = static_cast<double>(rng.Float()) / 3.0;
  want.f4 = make_float4(rng.Float(), rng.Float(), rng.Float(), rng.Float());
  want.p.c = 'z';
  want.p.d = -want.d;
  want.p.v = make_int3(1, -2, 3);
  want.p.s = 777;
  want.big_sum = 0;  // every word xor itself
  want.big_last = big.words[255];

  Echo<<<1, 1>>>(want.c, out, want.s, want.i, want.ll, want.f, want.d, want.f4, want.p, big, check);
  CHECK(cudaGetLastError());
  Seen got;
  std::memset(&got, 0, sizeof got);
  CHECK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
  // Compare field by field (padding bytes are not part of the contract).
  bool same = got.c == want.c && got.s == want.s && got.i == want.i && got.ll == want.ll &&
              std::memcmp(&got.f, &want.f, 4) == 0 && std::memcmp(&got.d, &want.d, 8) == 0 &&
              std::memcmp(&got.f4, &want.f4, 16) == 0 && got.p.c == want.p.c &&
              std::memcmp(&got.p.d, &want.p.d, 8) == 0 && got.p.v.x == 1 && got.p.v.y == -2 &&
              got.p.v.z == 3 && got.p.s == 777 && got.big_sum == 0 && got.big_last == want.big_last;
  std::printf("kernel_params c=%c s=%d i=%d ll=%lld f=%.9g d=%.17g f4=(%.9g,%.9g,%.9g,%.9g) "
              "p=(%c,%.17g,%d,%d,%d,%d) big_sum=%u big_last=%u match=%s\n",
              got.c, got.s, got.i, got.ll, got.f, got.d, got.f4.x, got.f4.y, got.f4.z, got.f4.w,
              got.p.c, got.p.d, got.p.v.x, got.p.v.y, got.p.v.z, got.p.s, got.big_sum,
              got.big_last, same ? "yes" : "no");
  CHECK(cudaFree(out));
  CHECK(cudaFree(check));
  return same ? 0 : 1;
}
