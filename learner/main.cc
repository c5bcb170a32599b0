// smolvm-learner: make-model | train | batches | memory. See docs/learner.md.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "learner/make_model.h"
#include "learner/print_batches.h"
#include "learner/print_memory.h"
#include "learner/train.h"

int main(int argc, char** argv) {
  using namespace smolvm::learner;
  CLI::App app{"smolvm-learner: a Qwen2 LoRA trainer (DPO/SFT) on CUDA or CPU"};
  app.require_subcommand(1);

  std::string preset, out;
  uint64_t mm_seed = 0;
  auto* mm = app.add_subcommand("make-model", "write a seeded synthetic Qwen2 model in Hugging Face format");
  mm->add_option("--preset", preset, "tiny|qwen2.5-0.5b|qwen2.5-1.5b|qwen2.5-7b")->required();
  mm->add_option("--seed", mm_seed, "weight seed")->capture_default_str();
  mm->add_option("--out", out, "output directory")->required();

  TrainOptions o;
  std::string method = "dpo";
  auto* tr = app.add_subcommand("train", "train LoRA adapters with DPO or SFT");
  tr->add_option("--model", o.model, "model directory (config.json + safetensors)")->envname("MODEL");
  tr->add_flag("--load-in-4bit", o.load_in_4bit, "quantize the projections to NF4 (block 64) at load");
  tr->add_option("--method", method, "dpo|sft")->check(CLI::IsMember({"dpo", "sft"}))->capture_default_str();
  tr->add_option("--steps", o.steps, "training steps")->envname("STEPS")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--batch", o.batch, "preference pairs (dpo) or rows (sft) per step")->envname("BATCH")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--maxseq", o.maxseq, "tokens per row")->envname("MAXSEQ")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--lid", o.lid, "learner id (seeds the data; names the event file)")->envname("LEARNER_ID")->capture_default_str();
  tr->add_option("--coord", o.coord, "directory for learner_<lid>.jsonl")->envname("COORD");
  tr->add_option("--arm", o.arm, "bench arm name echoed in events")->envname("ARM");
  tr->add_option("--device", o.device, "cuda|cpu (default: cuda when a GPU is present)")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  tr->add_option("--seed", o.seed, "seed of LoRA init and data")->capture_default_str();
  tr->add_option("--lr", o.lr, "AdamW learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--weight-decay", o.weight_decay, "AdamW weight decay")->check(CLI::NonNegativeNumber)->capture_default_str();
  tr->add_option("--lora-r", o.lora_r, "LoRA rank")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--lora-alpha", o.lora_alpha, "LoRA alpha (scale = alpha / r)")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--beta", o.beta, "DPO beta")->envname("DPO_BETA")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_flag("--fork", o.fork, "warm up, mark base weights frozen, wait at smolvmForkpoint()");
  bool no_prefix = false;
  tr->add_flag("--no-prefix-sharing", no_prefix, "DPO: run chosen and rejected as separate rows (2x the tokens)");
  tr->add_option("--save-adapter", o.save_adapter, "write the trained LoRA in PEFT format to DIR");
  tr->add_option("--dump-logits", o.dump_logits, "write one fixed row's tokens and logits (safetensors)");

  BatchesOptions bo;
  std::string bmethod = "dpo";
  auto* ba = app.add_subcommand("batches", "print the batches learner --lid would train on, one JSON line per step");
  ba->add_option("--seed", bo.seed, "data seed")->capture_default_str();
  ba->add_option("--lid", bo.lid, "learner id")->capture_default_str();
  ba->add_option("--method", bmethod, "dpo|sft")->check(CLI::IsMember({"dpo", "sft"}))->capture_default_str();
  ba->add_option("--steps", bo.steps, "batches")->check(CLI::PositiveNumber)->capture_default_str();
  ba->add_option("--batch", bo.batch, "pairs (dpo) or rows (sft)")->check(CLI::PositiveNumber)->capture_default_str();
  ba->add_option("--maxseq", bo.maxseq, "tokens per row")->check(CLI::PositiveNumber)->capture_default_str();
  ba->add_flag("--packed", bo.packed, "DPO: prefix sharing, as train runs by default");

  MemoryOptions mo;
  std::string mmethod = "dpo";
  bool mno_prefix = false;
  auto* me = app.add_subcommand("memory", "print what a CUDA learner holds on the device, buffer by buffer (no GPU needed)");
  me->add_option("--preset", mo.preset, "model preset (without --model)")->capture_default_str();
  me->add_option("--model", mo.model, "model directory (its config.json)");
  me->add_flag("--load-in-4bit", mo.load_in_4bit, "NF4 projections (a dequantization scratch)");
  me->add_option("--method", mmethod, "dpo|sft")->check(CLI::IsMember({"dpo", "sft"}))->capture_default_str();
  me->add_option("--steps", mo.steps, "batches the buffers grow over")->check(CLI::PositiveNumber)->capture_default_str();
  me->add_option("--batch", mo.batch, "pairs (dpo) or rows (sft)")->check(CLI::PositiveNumber)->capture_default_str();
  me->add_option("--maxseq", mo.maxseq, "tokens per row")->check(CLI::PositiveNumber)->capture_default_str();
  me->add_option("--lora-r", mo.lora_r, "LoRA rank")->check(CLI::PositiveNumber)->capture_default_str();
  me->add_option("--lora-alpha", mo.lora_alpha, "LoRA alpha")->check(CLI::PositiveNumber)->capture_default_str();
  me->add_option("--seed", mo.seed, "data seed")->capture_default_str();
  me->add_option("--lid", mo.lid, "learner id")->capture_default_str();
  me->add_flag("--no-prefix-sharing", mno_prefix, "DPO: chosen and rejected as separate rows");
  me->add_flag("--separate", mo.separate, "the layout before issue 18 (no shared arena, full LoRA bf16 copy and grads)");
  me->add_flag("--json", mo.json, "one JSON object instead of the table");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "smolvm-learner: %s (see --help)\n", e.what());
    return 2;
  }
  if (*mm) {
    smolvm::Status s = MakeModel(preset, mm_seed, out);
    if (!s.ok()) {
      std::fprintf(stderr, "smolvm-learner: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("wrote the %s preset (seed %llu) to %s\n", preset.c_str(), static_cast<unsigned long long>(mm_seed),
                out.c_str());
    return 0;
  }
  if (*ba) {
    bo.method = bmethod == "sft" ? Method::kSft : Method::kDpo;
    smolvm::Status s = PrintBatches(bo, stdout);
    if (!s.ok()) {
      std::fprintf(stderr, "smolvm-learner: %s\n", s.ToString().c_str());
      return s.code() == static_cast<int32_t>(smolvm::Code::kInvalidArgument) ? 2 : 1;
    }
    return 0;
  }
  if (*me) {
    mo.method = mmethod == "sft" ? Method::kSft : Method::kDpo;
    mo.prefix_sharing = !mno_prefix;
    smolvm::Status s = PrintMemory(mo, stdout);
    if (!s.ok()) {
      std::fprintf(stderr, "smolvm-learner: %s\n", s.ToString().c_str());
      return s.code() == static_cast<int32_t>(smolvm::Code::kInvalidArgument) ? 2 : 1;
    }
    return 0;
  }
  if (!o.model.empty() && !std::filesystem::is_directory(o.model)) {
    std::fprintf(stderr, "smolvm-learner: --model %s: no such directory (make one: smolvm-learner make-model)\n",
                 o.model.c_str());
    return 2;
  }
  o.method = method == "sft" ? Method::kSft : Method::kDpo;
  o.prefix_sharing = !no_prefix;
  return RunTrain(o);
}
