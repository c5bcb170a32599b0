// The torch learner of `bench run --learner torch` (issue 14):
// bench/peers/peft_dpo.py, smolvm-learner's twin in PyTorch (same data, lids,
// seeds, flags and events; docs/torch.md, "The torch learner in the bench"), run by a
// Python that imports torch, transformers and peft (--python).
//
//   native arm: `PYTHON SCRIPT <the learner's flags> --lid i` per learner, in
//               the same cgroups as smolvm-learner;
//   fork arm:   the golden machine runs `PYTHON /bench/bin/SCRIPT ... --fork`,
//               given the Python's venv (and the prefix of the interpreter it
//               was made from, when outside /usr) read-only at its own path;
//               the CUDA daemon's workers run the venv's cuBLAS/cuBLASLt/cuDNN
//               (SMOLVM_CUDA_LIBS, unless the caller set it).
//
// Called from the bench's main thread.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "machine/spec.h"

namespace smolvm::bench {

inline constexpr const char* kLearnerCpp = "smolvm-learner";
inline constexpr const char* kLearnerTorch = "torch";

// What `PYTHON SCRIPT --probe` says about the Python.
struct TorchProbe {
  std::string python, script;          // as run (absolute)
  std::string torch, transformers, peft;  // versions
  std::string purelib;                 // site-packages
  std::string prefix, base_prefix;     // sys.prefix (the venv), sys.base_prefix
};

// --python's default: /opt/torch/.venv/bin/python3 when it is executable, else "python3".
std::string DefaultTorchPython();

// The learner script: $SMOLVM_TORCH_LEARNER, else torch-learner/peft_dpo.py
// beside the smolvm binary (the build copies it there), else the source
// tree's bench/peers/peft_dpo.py.
std::string TorchLearnerScript();

// Runs `python script --probe`. NotFound naming the Python and what it could
// not import when torch, transformers or peft is missing (the script exits
// 3), or when the Python or the script does not exist.
Result<TorchProbe> ProbeTorch(const std::string& python, const std::string& script);

// The directories a machine needs to run `probe.python`: sys.prefix and
// sys.base_prefix, read-only at their own paths, unless the machine sees them
// anyway (under /usr, or /).
std::vector<machine::Volume> TorchVolumes(const TorchProbe& probe);

// SMOLVM_CUDA_LIBS for the CUDA daemon: the venv's nvidia/cu13/lib and
// nvidia/cudnn/lib that exist, ':'-joined ("" when none).
std::string TorchCudaLibs(const TorchProbe& probe);

// The golden machine of the fork arm: TorchVolumes, PYTHONUNBUFFERED=1 (its
// events and log lines as they happen) and SMOLVM_TORCH_DRY_RUN when the bench
// has it (peft_dpo.py's no-torch mode, for tests of the plumbing).
void AddTorchToMachine(const TorchProbe& probe, machine::MachineSpec* spec);

}  // namespace smolvm::bench
