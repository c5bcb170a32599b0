// Request / reply structs for every op, with their Encode and Decode, all
// expanded from the op table in ops.h. Never edit the expansion: edit ops.h.
//
// For op `Name` this declares:
//   struct NameRequest { static constexpr Op kOp; static constexpr OpKind kKind; fields... };
//   struct NameReply   { fields... };
//   void Encode(Encoder&, const NameRequest&);  bool Decode(Decoder&, NameRequest*);
//   (and the same pair for NameReply). Decode returns false on any
//   truncation, oversize or trailing byte.
#pragma once

#include "proto/codec.h"
#include "proto/ops.h"

namespace smolvm::proto {

#define SMOLVM_EXPAND(...) __VA_ARGS__

#define F(type, name) type##_t name{};
#define SMOLVM_DECL_MSG(num, name, kind, req, rep)    \
  struct name##Request {                              \
    static constexpr Op kOp = Op::k##name;            \
    static constexpr OpKind kKind = OpKind::kind;     \
    static constexpr const char* kName = #name;       \
    SMOLVM_EXPAND req                                 \
  };                                                  \
  struct name##Reply {                                \
    SMOLVM_EXPAND rep                                 \
  };
SMOLVM_OPS(SMOLVM_DECL_MSG)
#undef SMOLVM_DECL_MSG
#undef F

#define F(type, name) enc.Put(m.name);
#define SMOLVM_ENCODE_MSG(num, name, kind, req, rep)                            \
  inline void Encode([[maybe_unused]] Encoder& enc,                            \
                     [[maybe_unused]] const name##Request& m) {                \
    SMOLVM_EXPAND req                                                          \
  }                                                                            \
  inline void Encode([[maybe_unused]] Encoder& enc,                            \
                     [[maybe_unused]] const name##Reply& m) {                  \
    SMOLVM_EXPAND rep                                                          \
  }
SMOLVM_OPS(SMOLVM_ENCODE_MSG)
#undef SMOLVM_ENCODE_MSG
#undef F

#define F(type, name) dec.Get(&m->name);
#define SMOLVM_DECODE_MSG(num, name, kind, req, rep)                            \
  inline bool Decode([[maybe_unused]] Decoder& dec,                            \
                     [[maybe_unused]] name##Request* m) {                      \
    SMOLVM_EXPAND req return dec.done();                                       \
  }                                                                            \
  inline bool Decode([[maybe_unused]] Decoder& dec,                            \
                     [[maybe_unused]] name##Reply* m) {                        \
    SMOLVM_EXPAND rep return dec.done();                                       \
  }
SMOLVM_OPS(SMOLVM_DECODE_MSG)
#undef SMOLVM_DECODE_MSG
#undef F

// Name of an op number, or nullptr when the number is not in the table.
const char* OpName(uint16_t op);
// Whether `op` is in the table, and its kind.
bool IsKnownOp(uint16_t op);
bool IsAsyncOp(uint16_t op);

}  // namespace smolvm::proto
