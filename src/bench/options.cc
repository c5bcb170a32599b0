#include "bench/options.h"

#include <cmath>
#include <cstdio>

#include "machine/paths.h"

namespace smolvm::bench {

bool IsPreset(const std::string& m) {
  return m == "tiny" || m == "qwen2.5-0.5b" || m == "qwen2.5-1.5b" || m == "qwen2.5-7b";
}

Status ValidateRunOptions(const RunOptions& o) {
  if (o.arm != "native" && o.arm != "fork") return InvalidArgument("--arm must be native or fork (got '" + o.arm + "')");
  if (o.n < 1 || o.n > 512) return InvalidArgument("--n must be between 1 and 512");
  if (o.steps < 1) return InvalidArgument("--steps must be at least 1");
  if (o.reps < 1) return InvalidArgument("--reps must be at least 1");
  if (o.batch < 1) return InvalidArgument("--batch must be at least 1");
  if (o.maxseq < 1) return InvalidArgument("--maxseq must be at least 1");
  if (!(o.cpus >= 0) || !std::isfinite(o.cpus)) return InvalidArgument("--cpus must be 0 (unlimited) or positive");
  if (!(o.timeout_s > 0)) return InvalidArgument("--timeout must be positive (seconds)");
  if (o.share != "on" && o.share != "off" && o.share != "default")
    return InvalidArgument("--share must be on, off or default (got '" + o.share + "')");
  if (o.method != "dpo" && o.method != "sft") return InvalidArgument("--method must be dpo or sft");
  if (!o.device.empty() && o.device != "cuda" && o.device != "cpu")
    return InvalidArgument("--device must be cuda or cpu");
  if (o.gpu_mem_mib < 0) return InvalidArgument("--gpu-mem must be 0 (no cap) or positive MiB");
  if (o.learner != "smolvm-learner" && o.learner != "torch")
    return InvalidArgument("--learner must be smolvm-learner or torch (got '" + o.learner + "')");
  if (o.learner == "torch" && o.load_in_4bit)
    return InvalidArgument("--learner torch loads the base in bf16; --load-in-4bit is smolvm-learner's");
  if (o.learner == "torch" && o.method != "dpo") return InvalidArgument("--learner torch runs --method dpo only");
  if (o.learner != "torch" && !o.python.empty()) return InvalidArgument("--python is for --learner torch");
  if (o.mps && o.arm == "fork")
    return InvalidArgument("--mps runs the native arm under MPS; the fork arm under MPS is the trusted mode "
                           "--mps-trusted-shared-faults (a fault in one MPS client takes down the others)");
  if (o.mps_trusted_shared_faults && o.arm == "native")
    return InvalidArgument("--mps-trusted-shared-faults is the fork arm's MPS mode; the native arm's is --mps");
  return Status::Ok();
}

std::string MpsMode(const RunOptions& o) {
  if (o.arm == "native" && o.mps) return "on";
  if (o.arm == "fork" && o.mps_trusted_shared_faults) return "trusted-shared-faults";
  return "off";
}

std::string NumberText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

Status CheckCpusOnHost(double cpus, size_t host_cpus) {
  if (cpus == 0 || (cpus >= 0.01 && cpus <= static_cast<double>(host_cpus))) return Status::Ok();
  return InvalidArgument("--cpus " + NumberText(cpus) + " does not fit this host: use 0 (no limit) or a number from 0.01 to " +
                         std::to_string(host_cpus) + " (its usable CPUs)");
}

std::string DefaultResultsDir() { return machine::SmolvmHome() + "/bench/results"; }

}  // namespace smolvm::bench
