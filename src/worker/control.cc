#include "worker/control.h"

#include <algorithm>

#include "proto/frame.h"

namespace smolvm {

Status SendChunkFds(Channel& ch, const std::vector<int>& fds) {
  for (size_t first = 0; first < fds.size(); first += proto::kMaxFdsPerFrame) {
    uint32_t n = static_cast<uint32_t>(std::min<size_t>(proto::kMaxFdsPerFrame, fds.size() - first));
    std::string out;
    proto::AppendRequest(&out, proto::ForkFdsRequest{static_cast<uint32_t>(first), n}, 0, n);
    RETURN_IF_ERROR(ch.Write(out, std::span<const int>(fds.data() + first, n)));
  }
  return Status::Ok();
}

namespace {

// Reads ForkFds frames until `count` descriptors have arrived, handing each
// batch to `take`.
template <typename Take>
Status ReadChunkFds(Channel& ch, uint32_t count, Take take) {
  size_t got = 0;
  while (got < count) {
    proto::FrameHeader h;
    std::string payload;
    std::vector<UniqueFd> fds;
    RETURN_IF_ERROR(ch.ReadFrame(&h, &payload, &fds));
    proto::ForkFdsRequest r;
    proto::Decoder dec(payload);
    if (h.op != proto::ForkFdsRequest::kNumber || !proto::Decode(dec, &r) || r.first != got ||
        r.count != fds.size() || got + fds.size() > count)
      return Malformed("expected chunk descriptors on the control link");
    got += fds.size();
    take(fds);
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<UniqueFd>> ReceiveChunkFds(Channel& ch, uint32_t count) {
  std::vector<UniqueFd> all;
  RETURN_IF_ERROR(ReadChunkFds(ch, count, [&all](std::vector<UniqueFd>& fds) {
    for (auto& fd : fds) all.push_back(std::move(fd));
  }));
  return all;
}

Status DiscardChunkFds(Channel& ch, uint32_t count) {
  return ReadChunkFds(ch, count, [](std::vector<UniqueFd>&) {});
}

}  // namespace smolvm
