// CUDA arrays, texture and surface objects: the guest's ops onto the
// session's ArrayTable (array_table.h), which checks every value first.
#include <cuda.h>

#include <cstring>

#include "worker/cu_status.h"
#include "worker/worker.h"
#include "worker/worker_checks.h"

namespace smolvm {
namespace {

// What Memcpy3DToHost may answer in one reply (the shim copies more in slabs).
constexpr uint64_t kMaxCopyReplyBytes = 64ull << 20;

Result<CopyPlace> Side(uint32_t kind, uint64_t addr, uint64_t pitch, uint64_t height,
                       const std::vector<uint64_t>& pos, const char* what) {
  if (kind < static_cast<uint32_t>(CopySide::kDevice) || kind > static_cast<uint32_t>(CopySide::kHost))
    return Cu(CUDA_ERROR_INVALID_VALUE, std::string(what) + ": unknown kind");
  if (pos.size() != 3) return Cu(CUDA_ERROR_INVALID_VALUE, std::string(what) + ": a position is 3 numbers");
  return CopyPlace{static_cast<CopySide>(kind), addr, pitch, height, pos[0], pos[1], pos[2]};
}

Status Extent(const std::vector<uint64_t>& e, Copy3D* c) {
  if (e.size() != 3) return Cu(CUDA_ERROR_INVALID_VALUE, "copy: an extent is 3 numbers");
  c->width = e[0], c->height = e[1], c->depth = e[2];
  return Status::Ok();
}

}  // namespace

ArrayTable& Worker::Arrays() {
  if (!arrays_) arrays_ = std::make_unique<ArrayTable>(backend_.get());
  return *arrays_;
}

Status Worker::Handle(const proto::ArrayCreateRequest& q, proto::ArrayCreateReply*, Ctx*) {
  return Arrays().Create(q.array, ArrayDesc{q.format, q.channels, q.width, q.height, q.depth, q.flags});
}

Status Worker::Handle(const proto::ArrayDestroyRequest& q, proto::ArrayDestroyReply*, Ctx*) {
  // As cudaFreeArray: the work that may still read or write it finishes first.
  RETURN_IF_ERROR(backend_->CtxSynchronize());
  return Arrays().Destroy(q.array);
}

Status Worker::IssueCopy3D(Copy3D c, uint64_t guest_stream, std::string_view data) {
  ArrayTable::Span dst;
  RETURN_IF_ERROR(Arrays().CheckCopy(&c, data.size(), &dst));
  ASSIGN_OR_RETURN(uint64_t s, Stream(guest_stream));
  if (c.width == 0 || c.height == 0 || c.depth == 0) return Status::Ok();
  if (!captures_.empty()) {
    Result<bool> capturing = backend_->StreamIsCapturing(s);
    if (capturing.ok() && *capturing)
      return Cu(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "a copy with a CUDA array or host rows on a capturing stream");
  }
  if (c.src.kind == CopySide::kHost) c.src.addr = reinterpret_cast<uint64_t>(data.data());
  if (c.src.kind == CopySide::kDevice) c.src.addr = Moved(c.src.addr, 1);
  if (c.dst.kind == CopySide::kDevice) {
    RETURN_IF_ERROR(memory_->PrepareWrite(dst.start, dst.bytes).status());
    memory_->NoteOtherWrite(dst.start, dst.bytes);
    c.dst.addr = Moved(c.dst.addr, 1);
  }
  return backend_->Memcpy3D(c, s);
}

Status Worker::Handle(const proto::Memcpy3DRequest& q, proto::Memcpy3DReply*, Ctx*) {
  Copy3D c;
  ASSIGN_OR_RETURN(c.dst, Side(q.dst_kind, q.dst, q.dst_pitch, q.dst_height, q.dst_pos, "copy destination"));
  ASSIGN_OR_RETURN(c.src, Side(q.src_kind, q.src, q.src_pitch, q.src_height, q.src_pos, "copy source"));
  RETURN_IF_ERROR(Extent(q.extent, &c));
  if (c.dst.kind == CopySide::kHost) return Cu(CUDA_ERROR_INVALID_VALUE, "copy: into host memory is Memcpy3DToHost");
  return IssueCopy3D(c, q.stream, q.data);
}

Status Worker::Handle(const proto::Memcpy3DToHostRequest& q, proto::Memcpy3DToHostReply* r, Ctx*) {
  Copy3D c;
  ASSIGN_OR_RETURN(c.src, Side(q.src_kind, q.src, q.src_pitch, q.src_height, q.src_pos, "copy source"));
  RETURN_IF_ERROR(Extent(q.extent, &c));
  if (c.src.kind == CopySide::kHost) return Cu(CUDA_ERROR_INVALID_VALUE, "copy: both sides are host memory");
  if (c.width == 0 || c.height == 0 || c.depth == 0) return Status::Ok();
  const unsigned __int128 bytes = static_cast<unsigned __int128>(c.width) * c.height * c.depth;
  if (bytes > kMaxCopyReplyBytes) return Cu(CUDA_ERROR_INVALID_VALUE, "copy: more than one reply holds");
  scratch_.assign(static_cast<size_t>(bytes), '\0');
  c.dst = CopyPlace{CopySide::kHost, reinterpret_cast<uint64_t>(scratch_.data()), c.width, c.height, 0, 0, 0};
  // CheckCopy sees the host side's bytes as the extent's: the reply's buffer.
  ArrayTable::Span unused;
  Copy3D checked = c;
  RETURN_IF_ERROR(Arrays().CheckCopy(&checked, scratch_.size(), &unused));
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  if (checked.src.kind == CopySide::kDevice) checked.src.addr = Moved(checked.src.addr, 1);
  RETURN_IF_ERROR(backend_->Memcpy3D(checked, s));
  RETURN_IF_ERROR(backend_->StreamSynchronize(s));
  r->data = scratch_;
  return Status::Ok();
}

Status Worker::Handle(const proto::TexObjectCreateRequest& q, proto::TexObjectCreateReply* r, Ctx*) {
  ASSIGN_OR_RETURN(TexDesc tex, DecodeTexDesc(q.tex));
  TexResource res{q.res_kind, q.res, q.format, q.channels, q.width, q.height, q.pitch};
  if (res.kind != CU_RESOURCE_TYPE_ARRAY) res.handle = Moved(res.handle, 1);
  ASSIGN_OR_RETURN(r->object, Arrays().CreateTexture(res, tex));
  return Status::Ok();
}

Status Worker::Handle(const proto::SurfObjectCreateRequest& q, proto::SurfObjectCreateReply* r, Ctx*) {
  ASSIGN_OR_RETURN(r->object, Arrays().CreateSurface(q.array));
  return Status::Ok();
}

Status Worker::Handle(const proto::ObjectDestroyRequest& q, proto::ObjectDestroyReply*, Ctx*) {
  if (q.surface > 1) return Cu(CUDA_ERROR_INVALID_VALUE, "object kind must be 0 (texture) or 1 (surface)");
  return Arrays().DestroyObject(q.object, q.surface == 1);
}

}  // namespace smolvm
