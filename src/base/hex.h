// Lowercase hex of bytes and back: digests in file names and logs, and the
// byte strings the worker writes into JSON (fork manifests, cuDNN's replay log).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace smolvm {

// Lowercase hex of `bytes` (two characters a byte).
std::string HexOfBytes(std::string_view bytes);
// The bytes of `hex` as HexOfBytes writes it; a character that is not a hex
// digit reads as 0 and a trailing odd character is ignored (never throws).
std::string BytesOfHex(std::string_view hex);
// An address or handle as logs show it: "0x" and lowercase hex digits.
std::string HexOfAddress(uint64_t v);

}  // namespace smolvm
