#include "shim/runtime.h"

#include <execinfo.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "shim/foreign_libs.h"

#include "shim/errors.h"

namespace smolvm::shim {
namespace {

thread_local cudaError_t tl_last_error = cudaSuccess;
thread_local int tl_driver_calls = 0;  // DriverCallScope depth

// SMOLVM_SHIM_ERRORS=1: every error a runtime call returns is written to
// stderr with the stack that called it (a program that only says "CUDA
// error: invalid argument" then says which call, from where). Read once.
bool TraceErrors() {
  static const bool on = [] {
    const char* v = std::getenv("SMOLVM_SHIM_ERRORS");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return on;
}

void TraceError(cudaError_t err) {
  const char* name = CudaErrorName(err);
  std::fprintf(stderr, "smolvm shim: pid %d: a runtime call returns %s (%d); its stack (SMOLVM_SHIM_ERRORS):\n",
               static_cast<int>(::getpid()), name != nullptr ? name : "an unknown error", static_cast<int>(err));
  std::fflush(stderr);
  void* frames[16];
  int n = ::backtrace(frames, 16);
  if (n > 1) ::backtrace_symbols_fd(frames + 1, n - 1, STDERR_FILENO);  // from its caller on
}

}  // namespace

Runtime& Runtime::Get() {
  // Never destroyed: the program's atexit handlers (__cudaUnregisterFatBinary,
  // cudaFree in destructors) may call in after static destructors ran.
  static Runtime* runtime = new Runtime(SessionOptions::FromEnv());
  // A host function may not call CUDA: on its thread every call goes to a
  // runtime whose session never connects and answers cudaErrorNotPermitted
  // (the real session's lock may be held by a call waiting for this very
  // function).
  if (OnHostFunctionThread()) [[unlikely]] {
    static Runtime* denied = [] {
      SessionOptions o;
      o.host_function_thread = true;
      o.reserve_ranges = false;
      return new Runtime(o);
    }();
    return *denied;
  }
  return *runtime;
}

Runtime::Runtime(SessionOptions options) : session_(std::move(options)) {}

cudaError_t Runtime::ToCuda(const Status& st) const {
  if (st.ok()) return cudaSuccess;
  if (session_.failure() != SessionFailure::kNone) return static_cast<cudaError_t>(session_.failure());
  return WireResultToCuda(st.code());
}

cudaError_t Runtime::Begin() {
  if (sticky_ != cudaSuccess) return sticky_;
  Status st = session_.Connect();
  if (!st.ok()) return ToCuda(st);
  if (!host_mem_.initialized()) {
    host_mem_.Init(session_.hello().host_base, session_.hello().host_bytes);
    if (session_.no_descriptors()) {
      host_mem_.set_mirror(&mirror_);
      session_.set_mirror(&mirror_);
    }
    WarnForeignCudaLibraries();  // once: the session's start
  }
  return cudaSuccess;
}

cudaError_t Runtime::Finish(cudaError_t err) {
  if (session_.failure() != SessionFailure::kNone) {
    err = static_cast<cudaError_t>(session_.failure());
  } else if (int32_t d = session_.TakeDeferred(); d != 0) {
    cudaError_t de = WireResultToCuda(d);
    if (IsStickyError(de)) sticky_ = de;
    if (err == cudaSuccess) err = de;
    else if (tl_driver_calls == 0) tl_last_error = de;
  }
  // A fault reported as the call's own result poisons the context too.
  if (sticky_ == cudaSuccess && IsStickyError(err)) sticky_ = err;
  if (sticky_ != cudaSuccess) err = sticky_;
  return Record(err);
}

cudaError_t Runtime::Record(cudaError_t err) {
  // Not-ready answers of queries are results, not errors: CUDA leaves the
  // last error alone for them.
  if (err != cudaSuccess && err != cudaErrorNotReady && tl_driver_calls == 0) {
    tl_last_error = err;
    if (TraceErrors()) [[unlikely]] TraceError(err);
  }
  return err;
}

Runtime::DriverCallScope::DriverCallScope() { ++tl_driver_calls; }
Runtime::DriverCallScope::~DriverCallScope() { --tl_driver_calls; }

cudaError_t Runtime::GetLastError() {
  std::lock_guard lock(session_.mu());
  if (int32_t d = session_.TakeDeferred(); d != 0) {
    cudaError_t de = WireResultToCuda(d);
    if (IsStickyError(de)) sticky_ = de;
    tl_last_error = de;
  }
  // Like CUDA: the last error resets even after a sticky fault (later API
  // calls keep failing with it and record it again).
  return std::exchange(tl_last_error, cudaSuccess);
}

cudaError_t Runtime::PeekAtLastError() {
  std::lock_guard lock(session_.mu());
  if (int32_t d = session_.TakeDeferred(); d != 0) {
    cudaError_t de = WireResultToCuda(d);
    if (IsStickyError(de)) sticky_ = de;
    tl_last_error = de;
  }
  return tl_last_error;
}

cudaError_t Runtime::StreamId(cudaStream_t stream, bool per_thread, uint64_t* id) const {
  uint64_t s = HandleId(stream);
  if (s == 0 || s == HandleId(cudaStreamLegacy)) {
    // Work on the legacy stream would wait for a capturing blocking stream.
    if (!per_thread || s != 0) {
      if (captures_.LegacyBlocked()) return cudaErrorStreamCaptureImplicit;
    }
    *id = per_thread && s == 0 ? 2 : 0;
  } else if (s == HandleId(cudaStreamPerThread)) {
    *id = 2;
  } else if (streams_.count(s) == 1) {
    *id = s;
  } else {
    return cudaErrorInvalidResourceHandle;
  }
  return cudaSuccess;
}

}  // namespace smolvm::shim
