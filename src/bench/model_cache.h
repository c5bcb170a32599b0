// The bench's model: a directory given with --model, or a preset that
// `smolvm-learner make-model --preset P --seed 0` writes once into
// $SMOLVM_HOME/bench/models/<preset> (made in a temporary directory, then
// renamed, so a half-made model is never used).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace smolvm::bench {

// Absolute directory holding config.json.
Result<std::string> ResolveModel(const std::string& home, const std::string& model, const std::string& learner);

// Reads every regular file under `dir` once (page cache warm for both arms).
Status WarmPageCache(const std::string& dir);
// sync + drop the page cache (root).
Status DropPageCache();

}  // namespace smolvm::bench
