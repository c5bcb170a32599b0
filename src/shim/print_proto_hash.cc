// Writes the wire's proto hash (16 hex digits and a newline) to the file
// named by argv[1], or to stdout: the build's shim/proto-hash.
#include <cstdio>

#include "proto/proto_hash.h"

int main(int argc, char** argv) {
  FILE* out = argc > 1 ? std::fopen(argv[1], "w") : stdout;
  if (out == nullptr) {
    std::perror(argv[1]);
    return 1;
  }
  std::fprintf(out, "%s\n", smolvm::proto::HashHex(smolvm::proto::kProtoHash).c_str());
  return std::fclose(out) == 0 ? 0 : 1;
}
