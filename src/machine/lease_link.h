// LeaseLink: the host's end of one clone's lease link, the message channel
// between a clone's program and the host (the frames are in
// guest/lease_wire.h; docs/machines.md "Parked clones and the lease link").
//
//   host (serve, `machine lease-*`)          golden's supervisor                  clone's program
//   LeaseLink::Send(payload) ── PAYLOAD ──►  (parked: sends the clone's init GO) ─► smolvmLeasePayload()
//                                            holds what the clone sent until        smolvmNextPayload()
//   LeaseLink::Next()        ◄── REPLY ────  a reader ACKs it                  ◄──  smolvmReply()
//                            ◄── COMPLETE ─                                    ◄──  smolvmComplete()
//                            ◄── EXIT ─────  the clone's init reported the program's wait status
//                            ◄── FAULT ────  the clone broke the protocol (its link only)
//
// Contract:
//  * One reader at a time per clone. Open() of a clone that already has a
//    reader REPLACES it: the supervisor closes the older reader's connection
//    (its Next() then fails with kUnavailable), so a restarted service gets
//    its clones back even while its dead predecessor's sockets linger.
//  * Nothing is lost across readers: the supervisor keeps every message the
//    clone sent (and the EXIT) until a reader Ack()s it. A new reader first
//    receives every message not yet acked, oldest first, with the seq it had,
//    then new ones. So a reader may see a message twice (it was read but not
//    acked before the reader went away): seq tells. Within one reader, each
//    message comes once, in seq order.
//  * Bounded: the supervisor holds at most 64 messages / 4 MiB per clone not
//    yet acked (plus the one being read); beyond that it stops reading the
//    clone (whose smolvmReply() then blocks), never drops. Payloads not yet
//    taken by the clone are held likewise (4 MiB), beyond which it stops
//    reading this reader (Send then blocks, and fails after 10 s).
//  * The clone is hostile: every frame it sends is checked by the supervisor
//    (kind, length <= 1 MiB, strict JSON with nesting <= 128); one that fails
//    ends that clone's link with a kFault message, nothing else. Next() checks
//    the supervisor's frames again (length, kind, JSON for kExit).
//  * After a clone's EXIT is acked, the supervisor forgets the clone; Open()
//    then fails with kNotFound. It also forgets a clone whose machine was
//    removed, and all of them when the golden stops (readers see kUnavailable).
//  * Parked clones (ForkOptions::park): the clone's program waits inside its
//    forkpoint, its CUDA session attached, until the first Send(); a clone
//    forked without park runs at once and takes its payloads when it asks.
//
// Needs root on the host (the golden's ctl.sock is 0600). Movable, not
// copyable; thread-compatible (one thread at a time per object). The object
// owns its connection; destroying it detaches the reader (the lease goes on).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/unique_fd.h"
#include "machine/lease_frame.h"

namespace smolvm::machine {

struct CloneMessage {
  enum Kind {
    kReply,     // json: the clone's answer to payload number `payload`
    kComplete,  // json: the clone's result; the lease is over (EXIT follows when the program ends)
    kExit,      // wait_status: the clone's program ended; always the clone's last message
    kFault,     // json: {"error": "..."}; the clone broke the protocol, its link is closed
  } kind = kReply;
  std::string json;      // kReply/kComplete: strict JSON (any value), <= 1 MiB; kFault: {"error": ...}; kExit: ""
  int wait_status = -1;  // kExit: the program's wait status (waitpid's); -1 unknown (its init was killed)
  uint64_t seq = 0;      // 1, 2, ... per clone, the same across readers (for Ack and de-duplication)
  uint64_t payload = 0;  // kReply/kComplete: the payload number it answers (1 = the first), as the clone says
};

class LeaseLink {
 public:
  // Largest JSON text of a payload or of a clone's message.
  static constexpr size_t kMaxJson = 1u << 20;

  // Attaches as the reader of `clone` (a clone machine of a running golden,
  // running or ended but not acked/removed). Errors: kInvalidArgument (bad
  // name), kNotFound (no such machine, or the supervisor has no link for it:
  // its EXIT was acked, or it is no clone of that golden), kWrongState (a
  // golden, or a clone still being forked), kUnavailable (the golden's
  // supervisor is gone), kPermissionDenied (not root).
  static Result<LeaseLink> Open(const std::string& home, const std::string& clone);

  // A link over a connection already past its "LEASE <clone>" / "OK"
  // exchange (tests; a caller that made the request itself).
  static LeaseLink Adopt(UniqueFd connected) { return LeaseLink(std::move(connected)); }

  // Sends a payload: `payload_json` must be a JSON object, at most kMaxJson
  // bytes (checked here: kInvalidArgument). The first one releases a parked
  // clone. Payloads are numbered 1, 2, ... in the order sent (across readers);
  // the clone takes them with smolvmLeasePayload / smolvmNextPayload. Sent to
  // a clone that completed or ended, a payload is dropped (Next tells why).
  // Blocks until the supervisor took the frame, at most 10 s (kTimeout; the
  // link is then broken: Open again).
  Status Send(std::string_view payload_json);

  // Ends the lease from the host side: once the clone has taken the payloads
  // sent before, its smolvmNextPayload() returns SMOLVM_LEASE_ENDED (Python:
  // next_payload() returns None). The clone's program decides what to do
  // then (usually smolvmComplete or exit). Blocks like Send.
  Status End();

  // The next message, waiting until `deadline` (a deadline in the past only
  // takes what has arrived). nullopt on timeout (also when only part of a
  // message has arrived). kUnavailable once the link is closed (the
  // supervisor ended, or another Open replaced this reader); kMalformed when
  // the supervisor's frame breaks lease_wire.h.
  Result<std::optional<CloneMessage>> Next(std::chrono::steady_clock::time_point deadline);

  // Tells the supervisor that every message up to `seq` is processed: it
  // forgets them, and no later reader sees them again. Acking the EXIT
  // forgets the clone.
  Status Ack(uint64_t seq);

  // Pollable: readable when the supervisor has sent bytes Next() has not
  // consumed (poll it, then call Next with a deadline of now). Valid while
  // the object lives.
  int fd() const { return fd_.get(); }

  LeaseLink(LeaseLink&&) = default;
  LeaseLink& operator=(LeaseLink&&) = default;

 private:
  explicit LeaseLink(UniqueFd fd) : fd_(std::move(fd)) {}
  Status Write(int kind, std::string_view body, uint64_t number);

  UniqueFd fd_;
  LeaseFrameReader reader_;  // the message being read (never more than one)
  bool broken_ = false;      // a write timed out half-way: the stream is out of step
};

}  // namespace smolvm::machine
