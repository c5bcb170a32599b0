#include "base/stderr_lines.h"

#include <cstdio>

namespace smolvm {

void StderrWholeLines() {
  static char buffer[64 << 10];
  std::setvbuf(stderr, buffer, _IOLBF, sizeof buffer);
}

}  // namespace smolvm
