// Streams and events. Handles are guest-chosen ids (Runtime::NewHandle), so
// creating and destroying them is pipelined like any other ASYNC op.
#include "shim/runtime.h"

namespace smolvm::shim {

cudaError_t Runtime::StreamCreate(cudaStream_t* stream, unsigned flags, int priority) {
  if (stream == nullptr || (flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) != 0)
    return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t id = NewHandle();
  proto::StreamCreateRequest req;
  req.stream = id;
  req.flags = flags;
  req.priority = priority;
  session_.Enqueue(req);
  streams_[id] = StreamInfo{flags, priority};
  *stream = reinterpret_cast<cudaStream_t>(id);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::StreamDestroy(cudaStream_t stream) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t id = HandleId(stream);
  if (streams_.erase(id) == 0) return Finish(cudaErrorInvalidResourceHandle);
  captures_.Forget(id);
  proto::StreamDestroyRequest req;
  req.stream = id;
  session_.Enqueue(req);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::StreamSynchronize(cudaStream_t stream, bool per_thread) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t sid;
  if (cudaError_t e = StreamId(stream, per_thread, &sid); e != cudaSuccess) return Finish(e);
  if (CaptureTable::Capture* c = captures_.Of(sid)) {
    c->invalidated = true;  // its work does not run: nothing to wait for
    return Finish(cudaErrorStreamCaptureUnsupported);
  }
  if (cudaError_t e = captures_.CheckUnsafeCall(); e != cudaSuccess) return Finish(e);
  proto::StreamSynchronizeRequest req;
  req.stream = sid;
  proto::StreamSynchronizeReply rep;
  Status st = session_.Call(req, &rep);
  if (st.ok()) PoolsSynchronized([sid](uint64_t s) { return s == sid; });
  return FinishStatus(st);
}

cudaError_t Runtime::StreamQuery(cudaStream_t stream, bool per_thread) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t sid;
  if (cudaError_t e = StreamId(stream, per_thread, &sid); e != cudaSuccess) return Finish(e);
  if (CaptureTable::Capture* c = captures_.Of(sid)) {
    c->invalidated = true;
    return Finish(cudaErrorStreamCaptureUnsupported);
  }
  proto::StreamQueryRequest req;
  req.stream = sid;
  proto::StreamQueryReply rep;
  return FinishStatus(session_.Call(req, &rep));
}

cudaError_t Runtime::StreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags, bool per_thread) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t sid;
  if (cudaError_t e = StreamId(stream, per_thread, &sid); e != cudaSuccess) return Finish(e);
  if (events_.count(HandleId(event)) == 0) return Finish(cudaErrorInvalidResourceHandle);
  proto::StreamWaitEventRequest req;
  req.stream = sid;
  req.event = HandleId(event);
  req.flags = flags;
  session_.Enqueue(req);
  captures_.Wait(sid, req.event);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::StreamCaptureStatus(cudaStream_t stream, bool per_thread, cudaStreamCaptureStatus* status,
                                         unsigned long long* id, unsigned long long* capture_id, cudaGraph_t* graph) {
  std::lock_guard lock(session_.mu());
  uint64_t wire = 0;
  if (cudaError_t e = StreamId(stream, per_thread, &wire); e != cudaSuccess) return Record(e);
  const CaptureTable::Capture* c = captures_.Of(wire);
  if (status != nullptr)
    *status = c == nullptr ? cudaStreamCaptureStatusNone
                           : c->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  if (id != nullptr) *id = wire;
  // Valid only while capturing, as CUDA's.
  if (c != nullptr && capture_id != nullptr) *capture_id = c->id;
  if (c != nullptr && graph != nullptr) *graph = reinterpret_cast<cudaGraph_t>(c->graph);
  return cudaSuccess;
}

cudaError_t Runtime::StreamGetFlags(cudaStream_t stream, unsigned* flags) {
  if (flags == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  uint64_t id = HandleId(stream);
  if (id == 0 || id == HandleId(cudaStreamLegacy) || id == HandleId(cudaStreamPerThread)) {
    *flags = 0;
    return cudaSuccess;
  }
  auto it = streams_.find(id);
  if (it == streams_.end()) return Record(cudaErrorInvalidResourceHandle);
  *flags = it->second.flags;
  return cudaSuccess;
}

cudaError_t Runtime::StreamGetPriority(cudaStream_t stream, int* priority) {
  if (priority == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  uint64_t id = HandleId(stream);
  if (id == 0 || id == HandleId(cudaStreamLegacy) || id == HandleId(cudaStreamPerThread)) {
    *priority = 0;
    return cudaSuccess;
  }
  auto it = streams_.find(id);
  if (it == streams_.end()) return Record(cudaErrorInvalidResourceHandle);
  *priority = it->second.priority;
  return cudaSuccess;
}

cudaError_t Runtime::EventCreate(cudaEvent_t* event, unsigned flags) {
  constexpr unsigned kKnown = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (event == nullptr || (flags & ~kKnown) != 0) return Record(cudaErrorInvalidValue);
  // CUDA: an interprocess event must also disable timing.
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t id = NewHandle();
  proto::EventCreateRequest req;
  req.event = id;
  req.flags = flags;
  session_.Enqueue(req);
  events_[id] = EventInfo{flags};
  *event = reinterpret_cast<cudaEvent_t>(id);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::EventDestroy(cudaEvent_t event) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t id = HandleId(event);
  if (events_.erase(id) == 0) return Finish(cudaErrorInvalidResourceHandle);
  proto::EventDestroyRequest req;
  req.event = id;
  session_.Enqueue(req);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::EventRecord(cudaEvent_t event, cudaStream_t stream, unsigned flags, bool per_thread) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t sid;
  if (cudaError_t e = StreamId(stream, per_thread, &sid); e != cudaSuccess) return Finish(e);
  if (events_.count(HandleId(event)) == 0) return Finish(cudaErrorInvalidResourceHandle);
  proto::EventRecordRequest req;
  req.event = HandleId(event);
  req.stream = sid;
  req.flags = flags;
  session_.Enqueue(req);
  captures_.Record(req.event, sid);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::EventSynchronize(cudaEvent_t event) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (events_.count(HandleId(event)) == 0) return Finish(cudaErrorInvalidResourceHandle);
  if (CaptureTable::Capture* c = captures_.OfEvent(HandleId(event))) {
    c->invalidated = true;
    return Finish(cudaErrorStreamCaptureUnsupported);
  }
  if (cudaError_t e = captures_.CheckUnsafeCall(); e != cudaSuccess) return Finish(e);
  proto::EventSynchronizeRequest req;
  req.event = HandleId(event);
  proto::EventSynchronizeReply rep;
  return FinishStatus(session_.Call(req, &rep));
}

cudaError_t Runtime::EventQuery(cudaEvent_t event) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (events_.count(HandleId(event)) == 0) return Finish(cudaErrorInvalidResourceHandle);
  if (CaptureTable::Capture* c = captures_.OfEvent(HandleId(event))) {
    c->invalidated = true;
    return Finish(cudaErrorStreamCaptureUnsupported);
  }
  proto::EventQueryRequest req;
  req.event = HandleId(event);
  proto::EventQueryReply rep;
  return FinishStatus(session_.Call(req, &rep));
}

cudaError_t Runtime::EventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  auto s = events_.find(HandleId(start)), t = events_.find(HandleId(end));
  if (s == events_.end() || t == events_.end()) return Finish(cudaErrorInvalidResourceHandle);
  if ((s->second.flags | t->second.flags) & cudaEventDisableTiming) return Finish(cudaErrorInvalidResourceHandle);
  proto::EventElapsedTimeRequest req;
  req.start = HandleId(start);
  req.end = HandleId(end);
  proto::EventElapsedTimeReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) return FinishStatus(st);
  *ms = rep.ms;
  return Finish(cudaSuccess);
}

}  // namespace smolvm::shim
