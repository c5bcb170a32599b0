#include "machine/lease_frame.h"

#include <errno.h>
#include <sys/socket.h>

#include <cstring>
#include <nlohmann/json.hpp>

namespace smolvm::machine {
namespace {

void PutLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// Counts nesting; refuses past kLeaseMaxDepth. Builds nothing.
class DepthCheck : public nlohmann::json::json_sax_t {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override { return Open(true); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(false); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) override {
    error = e.what();
    return false;
  }
  bool top_object = false;
  std::string error;

 private:
  bool Open(bool object) {
    if (depth_ == 0 && seen_top_) return false;
    if (depth_ == 0) {
      top_object = object;
      seen_top_ = true;
    }
    if (++depth_ > kLeaseMaxDepth) {
      error = "nested deeper than " + std::to_string(kLeaseMaxDepth);
      return false;
    }
    return true;
  }
  bool Close() {
    --depth_;
    return true;
  }
  int depth_ = 0;
  bool seen_top_ = false;
};

}  // namespace

std::string EncodeLeaseFrame(uint8_t kind, std::string_view body, uint64_t seq, uint64_t payload) {
  std::string out;
  out.reserve(kLeaseHeader + body.size());
  out.push_back(static_cast<char>(kind));
  out.append(3, '\0');
  PutLe(out, body.size(), 4);
  PutLe(out, seq, 8);
  PutLe(out, payload, 8);
  out.append(body);
  return out;
}

Result<LeaseFrameHeader> DecodeLeaseHeader(const char* p) {
  LeaseFrameHeader h;
  h.kind = static_cast<uint8_t>(p[0]);
  if (p[1] != 0 || p[2] != 0 || p[3] != 0) return Malformed("lease frame: flags/reserved bytes are not zero");
  if (h.kind < SMOLVM_LEASE_PAYLOAD || h.kind > SMOLVM_LEASE_FAULT)
    return Malformed("lease frame: unknown kind " + std::to_string(h.kind));
  h.length = static_cast<uint32_t>(GetLe(p + 4, 4));
  if (h.length > kLeaseMaxJson)
    return Malformed("lease frame of " + std::to_string(h.length) + " bytes (at most " +
                     std::to_string(kLeaseMaxJson) + ")");
  h.seq = GetLe(p + 8, 8);
  h.payload = GetLe(p + 16, 8);
  return h;
}

Status CheckLeaseJson(std::string_view text, bool object_only) {
  if (text.size() > kLeaseMaxJson) return Malformed("JSON of " + std::to_string(text.size()) + " bytes (at most 1 MiB)");
  DepthCheck check;
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(text, &check, nlohmann::json::input_format_t::json, /*strict=*/true,
                                   /*ignore_comments=*/false);
  } catch (const std::exception& e) {
    return Malformed(std::string("not JSON: ") + e.what());
  }
  if (!ok) return Malformed("not strict JSON" + (check.error.empty() ? std::string() : ": " + check.error));
  if (object_only && !check.top_object) return Malformed("not a JSON object");
  return Status::Ok();
}

Result<std::optional<LeaseFrameReader::Frame>> LeaseFrameReader::ReadSome(int fd) {
  for (;;) {
    size_t want;
    if (buf_.size() < kLeaseHeader) {
      want = kLeaseHeader - buf_.size();
    } else {
      ASSIGN_OR_RETURN(LeaseFrameHeader h, DecodeLeaseHeader(buf_.data()));
      want = kLeaseHeader + h.length - buf_.size();
      if (want == 0) {
        Frame f;
        f.header = h;
        f.body = buf_.substr(kLeaseHeader);
        buf_.clear();
        return std::optional<Frame>(std::move(f));
      }
    }
    char chunk[65536];
    ssize_t n;
    do {
      n = ::recv(fd, chunk, std::min(want, sizeof chunk), MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return std::optional<Frame>();
      return ErrnoStatus("lease link", errno);
    }
    if (n == 0) return Unavailable("lease link closed");
    buf_.append(chunk, static_cast<size_t>(n));
    // The header is checked as soon as it is whole: a bad one ends here.
    if (buf_.size() == kLeaseHeader) RETURN_IF_ERROR(DecodeLeaseHeader(buf_.data()).status());
  }
}

}  // namespace smolvm::machine
