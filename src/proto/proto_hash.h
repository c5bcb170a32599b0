// The proto hash: FNV-1a 64 of the frame version and the op table's text.
//
// The table text is produced by stringizing each op's arguments, so it is the
// schema as written (numbers, names, kinds, field types and names) with
// comments removed and whitespace collapsed by the preprocessor.
#pragma once

#include <cstdint>
#include <string>

#include "proto/ops.h"
#include "proto/wire.h"

namespace smolvm::proto {

#define SMOLVM_OP_TEXT(num, name, kind, req, rep) #num " " #name " " #kind " " #req " " #rep ";"
inline constexpr const char kSchemaText[] = SMOLVM_OPS(SMOLVM_OP_TEXT);
#undef SMOLVM_OP_TEXT

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

constexpr uint64_t ComputeProtoHash() {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint32_t v = kFrameVersion, i = 0; i < 4; ++i, v >>= 8)
    h = (h ^ (v & 0xff)) * 0x100000001b3ull;
  return Fnv1a64(SMOLVM_WIRE_SALT, Fnv1a64(kSchemaText, h));
}

inline constexpr uint64_t kProtoHash = ComputeProtoHash();

// 16 lowercase hex digits.
std::string HashHex(uint64_t hash);

}  // namespace smolvm::proto
