#include "worker/guest_link.h"

#include "worker/host_mirrors.h"

#include <poll.h>

#include <chrono>

#include "proto/frame.h"

namespace smolvm {

void HostCallTrampoline(void* p) {
  auto* call = static_cast<HostCall*>(p);
  GuestLink* link = call->link;
  link->Call(*call);
  if (call->once) link->Forget(call);
}

Status GuestLink::Write(std::string_view bytes, std::span<const int> fds) {
  std::lock_guard l(write_mu_);
  return inner_->Write(bytes, fds);
}

bool GuestLink::HasBufferedFrame() const {
  {
    std::lock_guard l(mu_);
    if (!set_aside_.empty() || !read_error_.ok()) return true;
  }
  return inner_->HasBufferedFrame();
}

bool GuestLink::ReadyToRead() {
  if (callers_.load(std::memory_order_acquire) == 0) return true;
  std::lock_guard rl(read_mu_);
  {
    std::lock_guard l(mu_);
    if (!set_aside_.empty() || !read_error_.ok()) return true;
  }
  if (inner_->HasBufferedFrame()) return true;
  struct pollfd p = {inner_->fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

Status GuestLink::ReadFrame(proto::FrameHeader* header, std::string* payload, std::vector<UniqueFd>* fds) {
  auto take = [&]() -> bool {
    std::lock_guard l(mu_);
    if (set_aside_.empty()) return false;
    Frame& f = set_aside_.front();
    *header = f.header;
    *payload = std::move(f.payload);
    *fds = std::move(f.fds);
    set_aside_bytes_ -= payload->size();
    set_aside_.pop_front();
    return true;
  };
  if (take()) return Status::Ok();
  std::lock_guard rl(read_mu_);
  if (take()) return Status::Ok();  // a waiting call read it while this waited for the lock
  {
    std::lock_guard l(mu_);
    if (!read_error_.ok()) return read_error_;
  }
  return inner_->ReadFrame(header, payload, fds);
}

void GuestLink::Complete(uint64_t call) {
  std::lock_guard l(mu_);
  if (waiting_.erase(call) != 0) cv_.notify_all();
}

void GuestLink::Close() {
  std::lock_guard l(mu_);
  closed_ = true;
  waiting_.clear();
  cv_.notify_all();
}

HostCall* GuestLink::Keep(std::unique_ptr<HostCall> call) {
  std::lock_guard l(mu_);
  HostCall* p = call.get();
  once_.emplace(p, std::move(call));
  return p;
}

void GuestLink::Forget(HostCall* call) {
  std::lock_guard l(mu_);
  once_.erase(call);
}

bool GuestLink::ReadAndRoute(int timeout_ms) {
  if (!inner_->HasBufferedFrame()) {
    struct pollfd p = {inner_->fd(), POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return true;
  }
  Frame f;
  Status st = inner_->ReadFrame(&f.header, &f.payload, &f.fds);
  std::lock_guard l(mu_);
  if (!st.ok()) {
    // The serve loop sees the same failure once it has taken what was set aside.
    read_error_ = st;
    closed_ = true;
    waiting_.clear();
    cv_.notify_all();
    return false;
  }
  if (f.header.op == proto::HostFuncDoneRequest::kNumber && (f.header.flags & proto::kFlagAsync)) {
    proto::HostFuncDoneRequest done;
    proto::Decoder dec(f.payload);
    if (proto::Decode(dec, &done)) {
      waiting_.erase(done.call);
      cv_.notify_all();
      return true;
    }
  }
  if (f.header.op == proto::HostFetchDataRequest::kNumber && (f.header.flags & proto::kFlagAsync) &&
      mirrors_ != nullptr) {
    // The answer to the HostFetch a callback waits in: into the mirror now,
    // before the copy behind it runs (bytes outside the guest's mirrors are
    // dropped: the guest wrote only its own memory's worth).
    proto::HostFetchDataRequest data;
    proto::Decoder dec(f.payload);
    if (proto::Decode(dec, &data)) (void)mirrors_->WriteGuestBytes(data.addr, data.data);
    return true;
  }
  set_aside_bytes_ += f.payload.size();
  set_aside_.push_back(std::move(f));
  if (set_aside_bytes_ > kMaxSetAsideBytes) {
    read_error_ = Status(Code::kMalformed, "the guest sent more than 64 MiB while a host function ran");
    closed_ = true;
    waiting_.clear();
  }
  cv_.notify_all();
  return read_error_.ok();
}

void GuestLink::Call(const HostCall& call) {
  uint64_t id;
  {
    std::lock_guard l(mu_);
    if (closed_ || inner_ == nullptr) return;
    id = next_call_++;
    waiting_.insert(id);
  }
  callers_.fetch_add(1, std::memory_order_acq_rel);
  proto::HostFuncCallRequest req;
  req.call = id;
  req.fn = call.fn;
  req.user = call.user;
  req.kind = call.kind;
  req.stream = call.stream;
  req.status = call.status != nullptr ? call.status->load(std::memory_order_relaxed) : 0;
  std::string frame;
  if (call.mirrors != nullptr &&
      !call.mirrors->TakeStream(call.stream, call.landings_before, [this](const std::string& f) { return Write(f); })
           .ok())
    Close();
  proto::AppendRequest(&frame, req, 0);
  if (!Write(frame).ok()) Close();
  for (;;) {
    {
      std::unique_lock l(mu_);
      if (closed_ || waiting_.count(id) == 0) break;
    }
    // Read the guest's frames while the serve loop does not; otherwise it
    // reads them, and completes this call when the HostFuncDone comes.
    std::unique_lock rl(read_mu_, std::try_to_lock);
    if (rl.owns_lock()) {
      if (!ReadAndRoute(20)) break;
    } else {
      std::unique_lock l(mu_);
      cv_.wait_for(l, std::chrono::milliseconds(20), [&] { return closed_ || waiting_.count(id) == 0; });
    }
  }
  callers_.fetch_sub(1, std::memory_order_acq_rel);
}

}  // namespace smolvm
