// The proto hash: FNV-1a 64 of the frame version and the guest op table's
// text (ops.h), and the control hash: the same over the control table
// (control_ops.h). Each covers its own table only, so a change to the
// daemon's internal links never changes what guests must match.
//
// The table text is produced by stringizing each op's arguments, so it is the
// schema as written (numbers, names, kinds, field types and names) with
// comments removed and whitespace collapsed by the preprocessor.
#pragma once

#include <cstdint>
#include <string>

#include "proto/control_ops.h"
#include "proto/fork_manifest.h"
#include "proto/ops.h"
#include "proto/wire.h"

namespace smolvm::proto {

#define SMOLVM_OP_TEXT(num, name, kind, req, rep) #num " " #name " " #kind " " #req " " #rep ";"
inline constexpr const char kSchemaText[] = SMOLVM_OPS(SMOLVM_OP_TEXT);
inline constexpr const char kControlSchemaText[] = SMOLVM_CONTROL_OPS(SMOLVM_OP_TEXT);
#undef SMOLVM_OP_TEXT
#define SMOLVM_RECORD_TEXT(name, fields) #name " " #fields ";"
inline constexpr const char kManifestSchemaText[] = SMOLVM_MANIFEST_RECORDS(SMOLVM_RECORD_TEXT);
#undef SMOLVM_RECORD_TEXT

constexpr uint64_t Fnv1a64(const char* s, uint64_t h = 0xcbf29ce484222325ull) {
  for (; *s; ++s) h = (h ^ static_cast<uint8_t>(*s)) * 0x100000001b3ull;
  return h;
}

// SMOLVM_WIRE_SALT: a string literal folded into the hash, only for tests
// that need a peer speaking a different wire (the handshake-mismatch test
// builds a salted shim). Empty by default, which leaves the hash unchanged.
#ifndef SMOLVM_WIRE_SALT
#define SMOLVM_WIRE_SALT ""
#endif

// The hash of one table's text under the frame version.
constexpr uint64_t SchemaHash(const char* schema_text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint32_t v = kFrameVersion, i = 0; i < 4; ++i, v >>= 8)
    h = (h ^ (v & 0xff)) * 0x100000001b3ull;
  return Fnv1a64(schema_text, h);
}

constexpr uint64_t ComputeProtoHash() { return Fnv1a64(SMOLVM_WIRE_SALT, SchemaHash(kSchemaText)); }

// What `smolvm --proto-hash` prints and Hello carries: the guest table only.
inline constexpr uint64_t kProtoHash = ComputeProtoHash();
// The admin and daemon <-> worker links' table and the fork manifest's
// records they carry (shown by `smolvm cuda status`).
inline constexpr uint64_t kControlHash = Fnv1a64(kManifestSchemaText, SchemaHash(kControlSchemaText));

// The two tables never share an op number: a frame's number says which
// table it belongs to, and the guest's dispatch never sees a control op.
#define SMOLVM_OP_IS_GUEST(num, name, kind, req, rep) &&(num < 200)
#define SMOLVM_OP_IS_CONTROL(num, name, kind, req, rep) &&(num >= 200)
static_assert(true SMOLVM_OPS(SMOLVM_OP_IS_GUEST), "guest ops are numbered below 200");
static_assert(true SMOLVM_CONTROL_OPS(SMOLVM_OP_IS_CONTROL), "control ops are numbered from 200");
#undef SMOLVM_OP_IS_GUEST
#undef SMOLVM_OP_IS_CONTROL

// 16 lowercase hex digits.
std::string HashHex(uint64_t hash);

}  // namespace smolvm::proto
