// The lease link's frames: how a clone's program (libsmolvm-guest's lease
// calls, include/smolvm/guest.h) and a host reader (machine/lease_link.h)
// talk through the golden's supervisor. Shared by src/guest (plain C-style
// code, no smolvm libraries) and src/machine, so this header holds constants
// and the header layout only.
//
// Two legs, one frame format:
//   clone  <-> supervisor   the clone's own socket, machines/<clone>/lease.sock
//                           on the host, bound at /run/smolvm/lease.sock inside
//                           the clone (like its cuda.sock): a host Unix socket,
//                           no descriptor passing, so a gVisor clone can carry it
//                           as is. The supervisor accepts only peers in the
//                           clone's cgroup, one connection at a time.
//   reader <-> supervisor   the golden's ctl.sock (0600, host root): the line
//                           "LEASE <clone>\n", answered "OK\n" or
//                           "ERR <code> <message>\n"; frames both ways after OK.
//
// Frame (all integers little-endian), 24-byte header then `length` bytes:
//   0  u8   kind      SMOLVM_LEASE_*
//   1  u8   flags     0
//   2  u16  reserved  0
//   4  u32  length    body bytes, <= SMOLVM_LEASE_MAX_JSON
//   8  u64  seq       supervisor -> reader: the message's number for this clone
//                     (1, 2, ...; the same across readers); else 0
//   16 u64  payload   PAYLOAD: its number (1 = the lease payload, 2, ...);
//                     REPLY/COMPLETE: the payload it answers (as the clone
//                     says; 0 = none yet); else 0
//   24 body           JSON text (UTF-8), or empty
//
// Kinds and who sends them:
//   PAYLOAD  reader -> S -> clone   a JSON object. The first releases a parked
//                                   clone (S sends its init "GO"). S numbers them.
//   END      reader -> S -> clone   the host ends the lease: the clone's next
//                                   smolvmNextPayload() returns SMOLVM_LEASE_ENDED.
//                                   No body.
//   ACK      reader -> S            every message up to `seq` is processed; S
//                                   forgets them. No body.
//   REPLY    clone -> S -> reader   answers the payload `payload`; any JSON value.
//   COMPLETE clone -> S -> reader   ends the lease with a result; any JSON value.
//                                   S closes the clone's link after it.
//   EXIT     S -> reader            the clone's program ended; body
//                                   {"wait_status": N} (-1: unknown, the clone's
//                                   init ended without reporting). The last
//                                   message of a clone.
//   FAULT    S -> reader            the clone broke this protocol (a frame too
//                                   long, of the wrong kind, or not strict JSON);
//                                   body {"error": "..."}; S closed its link.
// A frame that breaks these rules from the clone is a FAULT of that clone
// only; from a reader (host root, trusted), it closes that reader.
#pragma once

#define SMOLVM_LEASE_HEADER 24
#define SMOLVM_LEASE_MAX_JSON (1u << 20)
#define SMOLVM_LEASE_GUEST_PATH "/run/smolvm/lease.sock"

#define SMOLVM_LEASE_PAYLOAD 1
#define SMOLVM_LEASE_END 2
#define SMOLVM_LEASE_ACK 3
#define SMOLVM_LEASE_REPLY 4
#define SMOLVM_LEASE_COMPLETE 5
#define SMOLVM_LEASE_EXIT 6
#define SMOLVM_LEASE_FAULT 7
