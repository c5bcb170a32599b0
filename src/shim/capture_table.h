// CaptureTable: the guest's view of its stream captures (cudaStreamBeginCapture
// to cudaStreamEndCapture), so cudaStreamIsCapturing / GetCaptureInfo tell the
// truth without a round trip and the capture modes' thread rules are
// applied here: the worker runs every guest thread's calls on one thread and
// captures in relaxed mode, so only the guest knows which thread calls.
//
// A capture begins on its origin stream; another stream joins it by waiting
// on an event recorded in it (cudaStreamWaitEvent); at the end every member
// leaves. A rule broken during the capture (a synchronization of a
// capturing stream, a prohibited call) invalidates it: cudaStreamEndCapture
// then answers cudaErrorStreamCaptureInvalidated and no graph.
//
// Not thread-safe by itself: the Runtime holds the session lock.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <thread>

namespace smolvm::shim {

// The calling thread's capture interaction mode (cudaThreadExchangeStreamCaptureMode).
cudaStreamCaptureMode& ThreadCaptureMode();

class CaptureTable {
 public:
  struct Capture {
    unsigned long long id = 0;  // unique over the process's life
    uint64_t graph = 0;         // the guest's graph id it goes into
    uint64_t origin = 0;        // wire stream id
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
    std::thread::id thread;
    bool invalidated = false;
    bool blocking = false;      // the origin stream synchronizes with the legacy stream
    uint32_t host_nodes = 0;    // host functions captured (the graph's host nodes)
  };

  bool empty() const { return captures_.empty(); }
  // The capture `stream` takes part in, or null.
  Capture* Of(uint64_t stream);
  const Capture* Of(uint64_t stream) const;
  // The capture `event` was last recorded in, or null.
  Capture* OfEvent(uint64_t event);
  // REQUIRES: stream is not capturing.
  Capture& Begin(uint64_t stream, cudaStreamCaptureMode mode, uint64_t graph, bool blocking);
  // Ends the capture whose origin is `stream`; every member leaves.
  Capture End(uint64_t stream);
  // An event recorded on `stream`: part of its capture, or of none.
  void Record(uint64_t event, uint64_t stream);
  // `stream` waits on `event`: joins the event's capture.
  void Wait(uint64_t stream, uint64_t event);
  void Forget(uint64_t stream_or_event);
  // Whether the calling thread may make a potentially unsafe call (CUDA's
  // rules for its mode); when not, the captures that forbid it are
  // invalidated and the answer is cudaErrorStreamCaptureUnsupported.
  cudaError_t CheckUnsafeCall();
  // Whether work on the legacy stream is allowed: not while a blocking
  // stream captures (cudaErrorStreamCaptureImplicit).
  bool LegacyBlocked() const;

 private:
  std::map<unsigned long long, Capture> captures_;  // by id
  std::map<uint64_t, unsigned long long> streams_;  // member stream -> capture id
  std::map<uint64_t, unsigned long long> events_;   // event -> capture id
  unsigned long long next_id_ = 1;
};

}  // namespace smolvm::shim
