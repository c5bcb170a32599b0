#include "bench/plot.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

extern char** environ;

namespace smolvm::bench {
namespace {

// gnuplot's string syntax: single quotes, '' for a quote.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// Distinct colours for up to 14 series, then again.
constexpr const char* kColours[] = {"#9400d3", "#009e73", "#56b4e9", "#e69f00", "#f0e442", "#0072b2", "#e51e10",
                                    "#000000", "#8b4513", "#ff69b4", "#808000", "#00ced1", "#696969", "#4b0082"};

std::string DataValue(double v) { return std::isfinite(v) ? std::to_string(v) : "NaN"; }

// The data files' columns: 1 N, 2 agg_tok_s, 3 peak memory, 4 span_tok_s.
double Column(const CellSummary& c, int column) {
  return column == 2 ? c.agg_tok_s.median : column == 3 ? c.peak_gpu_mib.median : c.span_tok_s.median;
}

// span_tok_s when every series has it somewhere (results recorded before
// learners' t_done have none), else the seed's agg_tok_s for all.
int ThroughputColumn(const std::vector<PlotSeries>& series) {
  for (const auto& s : series) {
    bool any = false;
    for (const auto* p : s.points) any |= std::isfinite(p->span_tok_s.median);
    if (!any) return 2;
  }
  return 4;
}

}  // namespace

std::string LabelRows(const std::vector<PlotSeries>& series, int column) {
  std::string rows;
  for (const auto& s : series)
    for (const auto* p : s.points)
      if (p->incomplete && std::isfinite(Column(*p, column)))
        rows += std::to_string(p->key.n) + " " + DataValue(Column(*p, column)) + " \"" +
                std::to_string(p->min_done) + "/" + std::to_string(p->expected) + " done\"\n";
  return rows;
}

std::vector<PlotSeries> PlotSeriesOf(const std::vector<CellSummary>& cells) {
  std::map<std::string, PlotSeries> by_label;
  for (const auto& c : cells) {
    const CellKey& k = c.key;
    std::string arm = k.mps == "on" ? k.arm + " + MPS" : k.mps == "off" ? k.arm : k.arm + " + MPS (trusted)";
    std::string label = (k.learner == "torch" ? "torch " : "") + arm +
                        (k.arm == "fork" ? " share " + k.share_mode : "") + ", " + k.model +
                        (k.load_in_4bit ? " 4bit" : " bf16") + " " + k.method + " " + std::to_string(k.batch) + "x" +
                        std::to_string(k.maxseq) + ", " + std::to_string(k.steps) + " steps" +
                        (k.device == "cpu" ? " (cpu)" : "");
    PlotSeries& s = by_label[label];
    s.label = label;
    s.points.push_back(&c);
  }
  std::vector<PlotSeries> out;
  for (auto& [label, s] : by_label) {
    std::sort(s.points.begin(), s.points.end(), [](const CellSummary* a, const CellSummary* b) {
      return a->key.n < b->key.n;
    });
    out.push_back(std::move(s));
  }
  return out;
}

std::string GnuplotScript(const std::vector<PlotSeries>& series, const std::string& data_dir,
                          const std::string& out_png) {
  bool any_gpu = false;
  for (const auto& s : series)
    for (const auto* p : s.points) any_gpu |= p->key.device != "cpu";
  std::string mem = any_gpu ? "peak GPU memory (MiB)" : "peak resident memory (MiB)";
  std::string s =
      "set terminal pngcairo size 1400,560 font 'sans,10'\n"
      "set output " + Quote(out_png) + "\n"
      "set multiplot layout 1,2\n"
      "set grid\nset key font 'sans,8'\nset xlabel 'learners (N)'\n"
      "set logscale x 2\nset xtics (1,2,4,8,16,24,32,48,64,96,128)\n"
      "set offsets graph 0.05, graph 0.05, graph 0.05, 0\nset yrange [0:*]\n";
  // One key, on the memory panel (the series and their colours are the same
  // in both): above the lines, which grow with N, with headroom over the
  // highest point so that it covers no line and no label. The throughput
  // panel has lines at every height (the torch learner's below the rest).
  auto panel = [&](const std::string& title, const std::string& ylabel, int column) {
    std::string p = "set title " + Quote(title) + "\nset ylabel " + Quote(ylabel) + "\n" +
                    (column == 3 ? "set key top left Left reverse samplen 2\n"
                                   "set offsets graph 0.05, graph 0.05, graph 0.45, 0"
                                 : "unset key") +
                    "\nplot ";
    for (size_t i = 0; i < series.size(); ++i) {
      if (i) p += ", \\\n     ";
      // A colour of its own per series (gnuplot's default cycle repeats after
      // 8); the torch learner's series dashed, with squares.
      bool torch = series[i].points.front()->key.learner == "torch";
      p += Quote(data_dir + "/series_" + std::to_string(i) + ".dat") + " using 1:" + std::to_string(column) +
           " with linespoints lw 2 lc rgb '" + kColours[i % std::size(kColours)] + "' " +
           (torch ? "dt 2 pt 5" : "pt 7") + " title " + Quote(series[i].label);
    }
    if (!LabelRows(series, column).empty())
      p += ", \\\n     " + Quote(data_dir + "/labels_" + std::to_string(column) + ".dat") +
           " using 1:2:3 with labels offset 0,1 font 'sans,8' notitle";
    return p + "\n";
  };
  if (ThroughputColumn(series) == 4)
    s += panel("aggregate throughput vs N (all tokens / time the learners trained)", "span tok/s", 4);
  else
    s += panel("aggregate throughput vs N (sum of the learners' own tok/s)", "aggregate tok/s", 2);
  s += panel(mem + " vs N", mem, 3);
  return s + "unset multiplot\n";
}

Status Plot(const std::vector<CellSummary>& cells, const std::string& out_png) {
  namespace fs = std::filesystem;
  if (cells.empty()) return InvalidArgument("no results to plot");
  std::vector<PlotSeries> series = PlotSeriesOf(cells);
  char tmpl[] = "/tmp/smolvm-plot-XXXXXX";
  if (!::mkdtemp(tmpl)) return ErrnoStatus("mkdtemp", errno);
  std::string dir = tmpl;
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  for (size_t i = 0; i < series.size(); ++i) {
    std::ofstream f(dir + "/series_" + std::to_string(i) + ".dat");
    for (const auto* p : series[i].points)
      f << p->key.n << " " << DataValue(Column(*p, 2)) << " " << DataValue(Column(*p, 3)) << " "
        << DataValue(Column(*p, 4)) << "\n";
    if (!f) return ErrnoStatus("cannot write plot data in " + dir, errno);
  }
  for (int column : {2, 3, 4}) {
    std::ofstream f(dir + "/labels_" + std::to_string(column) + ".dat");
    f << LabelRows(series, column);
    if (!f) return ErrnoStatus("cannot write plot labels in " + dir, errno);
  }
  std::string script = dir + "/plot.gp";
  {
    std::ofstream f(script);
    f << GnuplotScript(series, dir, fs::absolute(out_png).string());
    if (!f) return ErrnoStatus("cannot write " + script, errno);
  }
  std::string err = dir + "/gnuplot.err";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const char* argv[] = {"gnuplot", script.c_str(), nullptr};
  pid_t pid;
  int rc = posix_spawnp(&pid, "gnuplot", &fa, nullptr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc == ENOENT)
    return NotSupported("not supported: bench plot needs gnuplot (apt-get install gnuplot-nox; scripts/setup.sh installs it)");
  if (rc != 0) return ErrnoStatus("cannot run gnuplot", rc);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    // gnuplot's message: its non-empty lines (it starts with a blank one).
    std::ifstream in(err);
    std::string line, message;
    while (std::getline(in, line))
      if (line.find_first_not_of(" \t") != std::string::npos) message += (message.empty() ? "" : " | ") + line;
    return Internal("gnuplot failed: " + (message.empty() ? "exit status " + std::to_string(status) : message));
  }
  if (!fs::exists(out_png)) return Internal("gnuplot wrote no " + out_png);
  return Status::Ok();
}

}  // namespace smolvm::bench
