// `bench plot`: aggregate tok/s vs N and peak memory vs N, one line per
// (arm, share, model, batch×seq) series, drawn by gnuplot (Debian's
// gnuplot-nox, pngcairo terminal) from the summarized cells' medians.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "bench/summarize.h"

namespace smolvm::bench {

struct PlotSeries {
  std::string label;
  std::vector<const CellSummary*> points;  // ascending N
};
std::vector<PlotSeries> PlotSeriesOf(const std::vector<CellSummary>& cells);

// The gnuplot script drawing `series` whose data files are
// <data_dir>/series_<i>.dat ("N agg_tok_s peak_mib span_tok_s" per line),
// with the incomplete cells' "k/N done" drawn above their points from
// <data_dir>/labels_<column>.dat. The throughput panel draws span_tok_s when
// every series has it, else agg_tok_s.
// "N value \"k/N done\"" per incomplete cell whose value in `column` is
// finite (gnuplot 5.4 crashes on a labels plot with no defined point).
std::string LabelRows(const std::vector<PlotSeries>& series, int column);

std::string GnuplotScript(const std::vector<PlotSeries>& series, const std::string& data_dir,
                          const std::string& out_png);

// Writes the data files and the script into a temporary directory, runs
// gnuplot, removes the directory. NotSupported when gnuplot is not installed.
Status Plot(const std::vector<CellSummary>& cells, const std::string& out_png);

}  // namespace smolvm::bench
