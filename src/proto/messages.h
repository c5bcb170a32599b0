// Request / reply structs for every op of both tables, with their Encode and
// Decode, all expanded from the guest table (ops.h) and the control table
// (control_ops.h). Never edit the expansion: edit the tables.
//
// For op `Name` this declares:
//   struct NameRequest { static constexpr Op kOp (ControlOp for control ops);
//                        static constexpr uint16_t kNumber; kKind; kName; fields... };
//   struct NameReply   { fields... };
//   void Encode(Encoder&, const NameRequest&);  bool Decode(Decoder&, NameRequest*);
//   (and the same pair for NameReply). Decode returns false on any
//   truncation, oversize or trailing byte.
#pragma once

#include "proto/codec.h"
#include "proto/control_ops.h"
#include "proto/ops.h"

namespace smolvm::proto {

#define SMOLVM_EXPAND(...) __VA_ARGS__

#define F(type, name) type##_t name{};
#define SMOLVM_DECL_MSG(table, num, name, kind, req, rep) \
  struct name##Request {                              \
    static constexpr table kOp = table::k##name;      \
    static constexpr uint16_t kNumber = num;          \
    static constexpr OpKind kKind = OpKind::kind;     \
    static constexpr const char* kName = #name;       \
    SMOLVM_EXPAND req                                 \
  };                                                  \
  struct name##Reply {                                \
    SMOLVM_EXPAND rep                                 \
  };
#define SMOLVM_DECL_GUEST_MSG(...) SMOLVM_DECL_MSG(Op, __VA_ARGS__)
#define SMOLVM_DECL_CONTROL_MSG(...) SMOLVM_DECL_MSG(ControlOp, __VA_ARGS__)
SMOLVM_OPS(SMOLVM_DECL_GUEST_MSG)
SMOLVM_CONTROL_OPS(SMOLVM_DECL_CONTROL_MSG)
#undef SMOLVM_DECL_GUEST_MSG
#undef SMOLVM_DECL_CONTROL_MSG
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
SMOLVM_CONTROL_OPS(SMOLVM_ENCODE_MSG)
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
SMOLVM_CONTROL_OPS(SMOLVM_DECODE_MSG)
#undef SMOLVM_DECODE_MSG
#undef F

// Name of a guest op number, or nullptr when the number is not in the guest table.
const char* OpName(uint16_t op);
// Whether `op` is in the guest table, and its kind.
bool IsKnownOp(uint16_t op);
bool IsAsyncOp(uint16_t op);
// Name of a control op number, or nullptr when it is not in the control table.
const char* ControlOpName(uint16_t op);

}  // namespace smolvm::proto
