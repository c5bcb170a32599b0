// `smolvm bench run|summarize|census|matrix|highn|plot|tables` (docs/bench.md): thin
// glue over src/bench.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "bench/census.h"
#include "bench/interrupt.h"
#include "bench/learner_failures.h"
#include "bench/plot.h"
#include "bench/run.h"
#include "bench/summarize.h"
#include "bench/sweep.h"
#include "bench/tables.h"
#include "cli/commands.h"
#include "machine/errors.h"

namespace smolvm::cli {
namespace {

constexpr const char* kResultsHelp = "results directory (default: $SMOLVM_HOME/bench/results; the committed H200 set is bench/results)";

// Exit codes (docs/bench.md): 0 ok, 1 learners exited before finishing (the
// result is written) or the host failed, 2 invalid argument, 3 not found,
// 6 timed out waiting (machine layer), 7 needs root, 130 interrupted.
int ReportBenchError(const Status& s) {
  if (s.ok()) return 0;
  std::fprintf(stderr, "smolvm bench: %s\n", s.message().c_str());
  if (s.code() == bench::kInterrupted) return 130;
  if (s.code() == bench::kLearnersFailed) return 1;
  return machine::ExitCodeFor(s);
}

std::string ResultsDir(const std::string& given) { return given.empty() ? bench::DefaultResultsDir() : given; }

// The flags `run`, `matrix` and `highn` share.
void AddRunFlags(CLI::App* c, bench::RunOptions* o) {
  c->add_option("--steps", o->steps, "training steps per learner")->capture_default_str();
  c->add_option("--reps", o->reps, "runs of each configuration")->capture_default_str();
  c->add_option("--cpus", o->cpus, "CPUs per learner / clone machine (quota + cpuset); 0 = unlimited")
      ->capture_default_str();
  c->add_flag("--cold", o->cold, "drop the page cache before each run (else read the model once first)");
  c->add_option("--share", o->share, "fork arm: on | off | default (machine fork's default)")->capture_default_str();
  c->add_option("--batch", o->batch, "batch (preference pairs per step)")->capture_default_str();
  c->add_option("--maxseq", o->maxseq, "tokens per row")->capture_default_str();
  c->add_option("--timeout", o->timeout_s, "seconds per run before it is stopped")->capture_default_str();
  c->add_option("--model", o->model, "model directory or preset (default: qwen2.5-0.5b on cuda, tiny on cpu)");
  c->add_flag("--load-in-4bit", o->load_in_4bit, "NF4-quantize the base weights at load");
  c->add_option("--method", o->method, "dpo | sft")->capture_default_str();
  c->add_option("--device", o->device, "cuda | cpu (default: cuda when a GPU is present)");
  c->add_option("--results", o->results,
                "directory for the result JSON files, logs beside it in ../logs (default: $SMOLVM_HOME/bench/results)");
  c->add_option("--gpu-mem", o->gpu_mem_mib, "fork arm on cuda: device memory cap per machine, MiB (0 = none)");
  c->add_flag("--mps", o->mps,
              "native arm: learners run under the bench's own MPS control daemon (private pipe/log dirs, "
              "stopped at the end of the run); recorded in the result's env.mps");
  c->add_option("--learner", o->learner,
                "smolvm-learner | torch (bench/peers/peft_dpo.py: the same data, lids and events in PyTorch)")
      ->capture_default_str();
  c->add_option("--python", o->python,
                "--learner torch: a Python with torch, transformers and peft (default: /opt/torch/.venv/bin/python3 "
                "if present, else python3); the fork arm gives its venv to the machines read-only");
  c->add_flag("--mps-trusted-shared-faults", o->mps_trusted_shared_faults,
              "fork arm, trusted learners only: the CUDA daemon's workers run under MPS, where a fault in one "
              "MPS client takes down the others (the golden and every clone)");
}

// The runs that summarize and plot show: as `bench tables` shows them (a
// cell re-measured by a schema-2 build drops its hand-marked schema-1 runs),
// so `summarize --markdown` and `plot` of bench/results give what the
// committed RESULTS.md and bench.png show.
Result<std::vector<bench::RunResult>> Load(const std::string& dir) {
  ASSIGN_OR_RETURN(auto runs, bench::LoadRunResults(dir));
  if (runs.empty()) return NotFound("no result files (*.json) in " + dir);
  return bench::SupersedeHandTDone(std::move(runs));
}

int Summarize(const std::string& dir, const std::string& markdown) {
  auto runs = Load(dir);
  if (!runs.ok()) return ReportBenchError(runs.status());
  auto cells = bench::Summarize(*runs);
  auto ratios = bench::Ratios(cells);
  std::fputs(bench::FormatSummaryText(cells, ratios).c_str(), stdout);
  if (!markdown.empty()) {
    std::ofstream out(markdown, std::ios::trunc);
    out << bench::FormatSummaryMarkdown(cells, ratios, dir);
    if (!out) return ReportBenchError(ErrnoStatus("cannot write " + markdown, errno));
  }
  return 0;
}

int Census(const std::string& dir) {
  auto loaded = bench::LoadResultDir(dir);
  if (!loaded.ok()) return ReportBenchError(loaded.status());
  if (loaded->empty()) return ReportBenchError(NotFound("no result files (*.json) in " + dir));
  std::fputs(bench::FormatCensus(*loaded).c_str(), stdout);
  return 0;
}

int Plot(const std::string& dir, const std::string& out) {
  auto runs = Load(dir);
  if (!runs.ok()) return ReportBenchError(runs.status());
  Status s = bench::Plot(bench::Summarize(*runs), out);
  if (!s.ok()) return ReportBenchError(s);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

int Tables(const std::string& root, bool check) {
  std::vector<std::string> stale;
  Status s = bench::UpdateTables(root, check, &stale);
  if (!s.ok()) return ReportBenchError(s);
  for (const auto& f : stale) std::printf("%s %s\n", check ? "stale:" : "wrote", f.c_str());
  if (check && !stale.empty()) {
    std::fprintf(stderr,
                 "smolvm bench tables: the tables above do not match the committed records; run "
                 "scripts/gen-tables.sh and commit the result\n");
    return 1;
  }
  if (stale.empty()) std::printf("tables are current\n");
  return 0;
}

void AddSweep(CLI::App* bench_app, const char* name, const char* help, bench::SweepPlan (*plan)(), int* exit_code) {
  auto o = std::make_shared<bench::RunOptions>();
  struct Overrides {
    std::vector<int> ns;
    std::vector<std::string> arms;
    std::string shapes;
    double budget_s = 0;
  };
  auto v = std::make_shared<Overrides>();
  CLI::App* c = bench_app->add_subcommand(name, help);
  AddRunFlags(c, o.get());
  c->add_option("--ns", v->ns, "only these N (e.g. --ns 4,8)")->delimiter(',');
  c->add_option("--arms", v->arms, "only these arms (native,fork)")->delimiter(',')->check(CLI::IsMember({"native", "fork"}));
  c->add_option("--shapes", v->shapes, "only these BATCHxMAXSEQ shapes (e.g. 2x256)");
  c->add_option("--budget", v->budget_s, "seconds after which no new run starts (resume later)");
  c->callback([o, v, plan, exit_code] {
    bench::SweepPlan p = plan();
    if (!v->ns.empty()) p.ns = v->ns;
    if (!v->arms.empty()) p.arms = v->arms;
    if (!v->shapes.empty()) {
      auto shapes = bench::ParseShapes(v->shapes);
      if (!shapes.ok()) {
        *exit_code = ReportBenchError(shapes.status());
        return;
      }
      p.shapes = *shapes;
    }
    p.budget_s = v->budget_s;
    *exit_code = ReportBenchError(bench::RunSweep(p, *o));
  });
}

}  // namespace

void RegisterBenchCommands(CLI::App& app, int* exit_code) {
  CLI::App* b = app.add_subcommand("bench", "native vs fork learner benchmark: run, summarize, census, sweeps, plot");
  b->require_subcommand(1);
  b->footer("Exit codes: 0 ok, 1 learners exited before finishing (the result is written) or the host failed "
            "(tables --check: a table is stale), 2 invalid argument (every command-line error too), 3 no such "
            "results directory or learner (--learner torch: the Python cannot import torch), 6 timed out waiting "
            "(machine layer), 7 needs root, 130 interrupted. See docs/bench.md.");

  auto ro = std::make_shared<bench::RunOptions>();
  CLI::App* run = b->add_subcommand("run", "run one arm N learners wide, write one result JSON per rep");
  run->add_option("--arm", ro->arm, "native | fork")->required();
  run->add_option("--n", ro->n, "learners")->required();
  AddRunFlags(run, ro.get());
  run->callback([ro, exit_code] {
    std::vector<bench::RunResult> written;
    *exit_code = ReportBenchError(bench::RunBench(*ro, &written));
  });

  auto dir = std::make_shared<std::string>();
  auto md = std::make_shared<std::string>();
  CLI::App* sum = b->add_subcommand("summarize", "per-cell medians and spreads, INCOMPLETE cells, fork ÷ native ratios");
  sum->add_option("dir", *dir, kResultsHelp);
  sum->add_option("--markdown", *md, "also write the tables as markdown to FILE");
  sum->callback([dir, md, exit_code] { *exit_code = Summarize(ResultsDir(*dir), *md); });

  auto cdir = std::make_shared<std::string>();
  CLI::App* census = b->add_subcommand("census", "nan learners per run, then 'total nan learners: <k>'");
  census->add_option("dir", *cdir, kResultsHelp);
  census->callback([cdir, exit_code] { *exit_code = Census(ResultsDir(*cdir)); });

  AddSweep(b, "matrix", "N in {1,2,4,8,16} x both arms x batch*seq in {2x256, 8x512}; resumes", bench::MatrixPlan,
           exit_code);
  AddSweep(b, "highn", "N in {16,24,32,48,64} x both arms, native until it no longer fits; resumes",
           bench::HighnPlan, exit_code);

  auto pdir = std::make_shared<std::string>();
  auto png = std::make_shared<std::string>();
  CLI::App* plot = b->add_subcommand(
      "plot", "span tok/s (agg tok/s for results without t_done) vs N and peak memory vs N, both arms (gnuplot)");
  plot->add_option("dir", *pdir, kResultsHelp);
  plot->add_option("--out", *png, "PNG file to write")->required();
  plot->callback([pdir, png, exit_code] { *exit_code = Plot(ResultsDir(*pdir), *png); });

  auto root = std::make_shared<std::string>(".");
  auto check = std::make_shared<bool>(false);
  CLI::App* tables = b->add_subcommand(
      "tables", "regenerate the tables of README.md, docs/PERF.md and bench/RESULTS.md from bench/results and "
                "bench/records; --check: exit 1 when one is stale");
  tables->add_option("--root", *root, "repository root")->capture_default_str();
  tables->add_flag("--check", *check, "write nothing; exit 1 when a table differs from what the records give");
  tables->callback([root, check, exit_code] { *exit_code = Tables(*root, *check); });
}

}  // namespace smolvm::cli
