#include "bench/model_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "bench/child.h"
#include "bench/options.h"

namespace smolvm::bench {

namespace fs = std::filesystem;

Result<std::string> ResolveModel(const std::string& home, const std::string& model, const std::string& learner) {
  std::error_code ec;
  if (fs::is_directory(model, ec)) {
    if (!fs::exists(fs::path(model) / "config.json", ec))
      return InvalidArgument("--model " + model + ": no config.json there (make one with 'smolvm-learner make-model')");
    return fs::absolute(model).lexically_normal().string();
  }
  if (!IsPreset(model))
    return InvalidArgument("--model '" + model +
                           "' is neither a model directory nor a preset (tiny, qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b)");
  std::string dir = home + "/bench/models/" + model;
  if (fs::exists(dir + "/config.json", ec)) return dir;
  fs::create_directories(home + "/bench/models", ec);
  if (ec) return ErrnoStatus("cannot create " + home + "/bench/models", ec.value());
  std::string tmp = dir + ".making-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  std::fprintf(stderr, "bench: making the %s model (once) in %s\n", model.c_str(), dir.c_str());
  ASSIGN_OR_RETURN(CommandOutput r,
                   RunCommand({learner, "make-model", "--preset", model, "--seed", "0", "--out", tmp}, 30 * 60 * 1000));
  if (r.rc != 0) {
    fs::remove_all(tmp, ec);
    std::string why = r.err.substr(0, r.err.find('\n'));
    return Internal("make-model --preset " + model + " failed (exit " + std::to_string(r.rc) + "): " + why);
  }
  if (std::rename(tmp.c_str(), dir.c_str()) != 0) {
    int e = errno;
    fs::remove_all(tmp, ec);
    if (!fs::exists(dir + "/config.json", ec)) return ErrnoStatus("cannot move the model into " + dir, e);
  }
  return dir;
}

Status WarmPageCache(const std::string& dir) {
  std::error_code ec;
  std::vector<char> buf(1 << 20);
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("cannot read " + e.path().string(), errno);
    while (::read(fd, buf.data(), buf.size()) > 0) {
    }
    ::close(fd);
  }
  if (ec) return ErrnoStatus("cannot list " + dir, ec.value());
  return Status::Ok();
}

Status DropPageCache() {
  ::sync();
  int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("--cold: cannot open /proc/sys/vm/drop_caches (needs root)", errno);
  ssize_t w = ::write(fd, "3\n", 2);
  int e = errno;
  ::close(fd);
  if (w != 2) return ErrnoStatus("--cold: cannot drop the page cache", e);
  return Status::Ok();
}

}  // namespace smolvm::bench
