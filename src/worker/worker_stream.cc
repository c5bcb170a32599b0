// The worker's stream and event handlers (ops 30-40), mirroring the shim's
// forward_stream.cc: the guest-chosen stream and event ids.
#include <cuda.h>

#include "worker/cu_status.h"
#include "worker/worker.h"

namespace smolvm {
namespace {

}  // namespace

// --- streams and events ---------------------------------------------------------

Status Worker::Handle(const proto::StreamCreateRequest& q, proto::StreamCreateReply*, Ctx*) {
  if (q.stream <= 2 || streams_.count(q.stream))
    return Cu(CUDA_ERROR_INVALID_VALUE, "stream id is reserved or in use");
  ASSIGN_OR_RETURN(uint64_t h, backend_->StreamCreate(q.flags, q.priority));
  streams_[q.stream] = StreamInfo{h, q.flags, q.priority, contexts_.current()};
  return Status::Ok();
}

Status Worker::Handle(const proto::StreamDestroyRequest& q, proto::StreamDestroyReply*, Ctx*) {
  auto it = streams_.find(q.stream);
  if (it == streams_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown stream");
  Status st = backend_->StreamDestroy(it->second.handle);
  streams_.erase(it);
  return st;
}

Status Worker::Handle(const proto::StreamSynchronizeRequest& q, proto::StreamSynchronizeReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  return backend_->StreamSynchronize(s);
}

Status Worker::Handle(const proto::StreamQueryRequest& q, proto::StreamQueryReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  return backend_->StreamQuery(s);
}

Status Worker::Handle(const proto::StreamWaitEventRequest& q, proto::StreamWaitEventReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  ASSIGN_OR_RETURN(uint64_t e, Event(q.event));
  return backend_->StreamWaitEvent(s, e, q.flags);
}

Status Worker::Handle(const proto::EventCreateRequest& q, proto::EventCreateReply*, Ctx*) {
  if (q.event == 0 || events_.count(q.event)) return Cu(CUDA_ERROR_INVALID_VALUE, "event id in use");
  ASSIGN_OR_RETURN(uint64_t h, backend_->EventCreate(q.flags));
  events_[q.event] = EventInfo{h, q.flags, contexts_.current()};
  return Status::Ok();
}

Status Worker::Handle(const proto::EventDestroyRequest& q, proto::EventDestroyReply*, Ctx*) {
  auto it = events_.find(q.event);
  if (it == events_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown event");
  Status st = backend_->EventDestroy(it->second.handle);
  events_.erase(it);
  return st;
}

Status Worker::Handle(const proto::EventRecordRequest& q, proto::EventRecordReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t e, Event(q.event));
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  return backend_->EventRecord(e, s);
}

Status Worker::Handle(const proto::EventSynchronizeRequest& q, proto::EventSynchronizeReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t e, Event(q.event));
  return backend_->EventSynchronize(e);
}

Status Worker::Handle(const proto::EventQueryRequest& q, proto::EventQueryReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t e, Event(q.event));
  return backend_->EventQuery(e);
}

Status Worker::Handle(const proto::EventElapsedTimeRequest& q, proto::EventElapsedTimeReply* r, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t a, Event(q.start));
  ASSIGN_OR_RETURN(uint64_t b, Event(q.end));
  ASSIGN_OR_RETURN(r->ms, backend_->EventElapsedTime(a, b));
  return Status::Ok();
}

}  // namespace smolvm
