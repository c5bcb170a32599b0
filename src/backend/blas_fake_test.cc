// The fake cuBLAS's host GEMM against a naive double-precision reference, at
// fresh random inputs, for every input type and both transposes; a call past
// the fake's work limit is refused at once.
#include <cublas_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/blas_fake.h"

namespace smolvm {
namespace {

struct Case {
  int32_t type;
  float tol;  // relative to the sum of |terms|
};

class HostGemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(HostGemmTest, MatchesNaiveReference) {
  const Case c = GetParam();
  const size_t es = c.type == CUDA_R_32F ? 4 : 2;
  std::mt19937 rng(1234 + c.type);
  std::uniform_real_distribution<float> dist(-2, 2);
  for (int32_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    for (int32_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      const int m = 17, n = 9, k = 23;
      const int lda = (ta == CUBLAS_OP_N ? m : k) + 3, ldb = (tb == CUBLAS_OP_N ? k : n) + 1, ldc = m + 2;
      std::vector<char> a(es * lda * (ta == CUBLAS_OP_N ? k : m)), b(es * ldb * (tb == CUBLAS_OP_N ? n : k)),
          cc(es * ldc * n);
      for (size_t i = 0; i < a.size() / es; ++i) BlasStore(a.data(), c.type, i, dist(rng));
      for (size_t i = 0; i < b.size() / es; ++i) BlasStore(b.data(), c.type, i, dist(rng));
      for (size_t i = 0; i < cc.size() / es; ++i) BlasStore(cc.data(), c.type, i, dist(rng));
      std::vector<char> c0 = cc;
      const float alpha = 0.75f, beta = -1.25f;
      ASSERT_TRUE(HostGemm(ta, tb, m, n, k, alpha, a.data(), c.type, lda, b.data(), c.type, ldb, beta, cc.data(),
                           c.type, ldc));
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < m; ++i) {
          double ref = 0, mag = 0;
          for (int p = 0; p < k; ++p) {
            double x = BlasLoad(a.data(), c.type, ta == CUBLAS_OP_N ? i + p * lda : p + i * lda);
            double y = BlasLoad(b.data(), c.type, tb == CUBLAS_OP_N ? p + j * ldb : j + p * ldb);
            ref += x * y;
            mag += std::fabs(x * y);
          }
          double c_in = BlasLoad(c0.data(), c.type, i + j * ldc);
          ref = alpha * ref + beta * c_in;
          mag = std::fabs(alpha) * mag + std::fabs(beta * c_in) + 1e-6;
          double got = BlasLoad(cc.data(), c.type, i + j * ldc);
          EXPECT_LE(std::fabs(got - ref) / mag, c.tol) << "ta=" << ta << " tb=" << tb << " i=" << i << " j=" << j;
        }
      }
      // Padding between columns of C is never written.
      for (int j = 0; j < n; ++j)
        for (int i = m; i < ldc; ++i)
          EXPECT_EQ(BlasLoad(cc.data(), c.type, i + j * ldc), BlasLoad(c0.data(), c.type, i + j * ldc));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, HostGemmTest,
                         ::testing::Values(Case{CUDA_R_32F, 1e-5f}, Case{CUDA_R_16F, 2e-3f}, Case{CUDA_R_16BF, 1e-2f}),
                         [](const auto& info) {
                           return info.param.type == CUDA_R_32F ? std::string("fp32")
                                  : info.param.type == CUDA_R_16F ? std::string("fp16")
                                                                  : std::string("bf16");
                         });

TEST(BlasConvert, HalfAndBf16RoundTripExactValues) {
  uint16_t buf[1];
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.9604645e-08f, 0.333251953125f}) {
    BlasStore(buf, CUDA_R_16F, 0, v);
    EXPECT_EQ(BlasLoad(buf, CUDA_R_16F, 0), v);
  }
  for (float v : {0.0f, 1.0f, -2.5f, 3.3895314e38f, 0.0078125f}) {
    BlasStore(buf, CUDA_R_16BF, 0, v);
    EXPECT_EQ(BlasLoad(buf, CUDA_R_16BF, 0), v);
  }
  BlasStore(buf, CUDA_R_16BF, 0, 1.00390625f);  // halfway between 1 and 1+2^-7: even rounds down
  EXPECT_EQ(BlasLoad(buf, CUDA_R_16BF, 0), 1.0f);
  BlasStore(buf, CUDA_R_16F, 0, 1e6f);
  EXPECT_TRUE(std::isinf(BlasLoad(buf, CUDA_R_16F, 0)));
}

// A strided batch of stride 0 needs no memory for any batch count: the fake
// would multiply on the CPU for hours (the fuzzer found it). It is refused,
// naming the size, before anything is read.
TEST(FakeBlasWork, AGemmPastTheLimitIsRefusedAtOnce) {
  FakeBackend gpu;
  ASSERT_TRUE(gpu.Init(0).ok());
  FakeBlasBackend blas(&gpu);
  auto h = blas.Create();
  ASSERT_TRUE(h.ok());
  const float one = 1, zero = 0;
  std::string alpha(4, '\0'), beta(4, '\0');
  std::memcpy(alpha.data(), &one, 4);
  std::memcpy(beta.data(), &zero, 4);
  BlasGemmArgs g;
  g.fn = BlasGemmFn::kSgemmStridedBatched;
  g.transa = g.transb = CUBLAS_OP_N;
  g.m = g.n = g.k = 64;
  g.lda = g.ldb = g.ldc = 64;
  g.atype = g.btype = g.ctype = CUDA_R_32F;
  g.compute = CUBLAS_COMPUTE_32F;
  g.batch = 1 << 20;  // 2^38 multiply-adds on the same 64 x 64 matrices
  g.a = g.b = g.c = 0x1000;
  g.scalars.alpha = alpha;
  g.scalars.beta = beta;
  auto t0 = std::chrono::steady_clock::now();
  Status st = blas.Gemm(*h, g);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(st.code(), proto::kBlasStatusBase + CUBLAS_STATUS_NOT_SUPPORTED) << st.ToString();
  EXPECT_NE(st.message().find("past the fake's"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("1048576 x 64 x 64 x 64"), std::string::npos) << st.message();
  g.batch = 1;  // within the limit: it goes on to the memory check (nothing allocated there)
  st = blas.Gemm(*h, g);
  EXPECT_EQ(st.message().find("past the fake's"), std::string::npos) << st.message();
  // k = 0 multiplies nothing but still scales C by beta, batch x m x n times
  // (the fuzzer found that too: it ran past its 20 s limit in CI).
  g.k = 0;
  g.batch = 1 << 20;
  t0 = std::chrono::steady_clock::now();
  st = blas.Gemm(*h, g);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(st.code(), proto::kBlasStatusBase + CUBLAS_STATUS_NOT_SUPPORTED) << st.ToString();
  EXPECT_NE(st.message().find("1048576 x 64 x 64 x 1"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace smolvm
