// `smolvm bench tables`: every table of figures in README.md, docs/PERF.md
// and bench/RESULTS.md, generated from the committed records under a
// repository root:
//   bench/results/*.json   bench run results (results.h)
//   bench/records/*.json   one record per device run of a measuring script
//                          (micro-benchmarks, warm forks, --cuda machine
//                          forks, peers): {"kind", "date", "card", "build",
//                          "command", "summary": {name: number|string},
//                          "samples": {...}} (docs/bench.md, "Records")
// A generated part of a markdown file sits between
//   <!-- BEGIN generated: NAME (smolvm bench tables) -->
//   <!-- END generated: NAME -->
// and bench/RESULTS.md is generated whole. CI runs `--check`, so a record
// changed without regenerating the tables fails.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "bench/results.h"
#include "bench/summarize.h"

namespace smolvm::bench {

// A device run's record (bench/records/*.json).
struct DeviceRecord {
  std::string file, kind, date, card, build, command;
  std::vector<std::pair<std::string, std::string>> summary;  // in the file's order, values as text
};
Result<std::vector<DeviceRecord>> LoadDeviceRecords(const std::string& dir);
// The summary's value of `key` as text, "-" when the record has none.
std::string SummaryValue(const DeviceRecord& r, const std::string& key);

// PERF.md shows each kind's current records: those made by the build of the
// kind's newest record (by date). The rest are history (PERF-log.md).
struct SplitRecords {
  std::vector<DeviceRecord> current, history;
};
SplitRecords SplitCurrentRecords(const std::vector<DeviceRecord>& records);

// A cell re-measured by a build that writes t_done itself (schema >= 2)
// drops its schema-1 runs, whose t_done was added by hand (issue 17).
std::vector<RunResult> SupersedeHandTDone(std::vector<RunResult> runs);

// True when a rep of the cell carries a span from t_done its build did not
// write (schema 1); such spans are marked † with kHandTDone under the table.
bool HandTDone(const std::vector<RunResult>& runs, const CellKey& key);
extern const char* const kHandTDone;

// The generated blocks, by name (README's `comparison`: comparison.h; its
// `torch`: torch_table.h).
std::string HeadlineTable(const std::vector<RunResult>& runs);   // README: headline
std::string BenchRatioTable(const std::vector<RunResult>& runs);  // PERF: bench-ratios
std::string BenchForkTable(const std::vector<RunResult>& runs);   // PERF: bench-forks
// PERF: device-records (current), PERF-log: device-records-history; `none`
// is the text when there is no record.
std::string DeviceRecordTables(const std::vector<DeviceRecord>& records, const std::string& none);

// Replaces the text between the markers of block `name` in `text`.
Result<std::string> SpliceBlock(const std::string& text, const std::string& name, const std::string& content);

// Regenerates every table under `root`. check=false writes the files that
// changed; check=true writes nothing. Either way *stale lists "FILE (BLOCK)"
// for each part that was (or would be) rewritten.
Status UpdateTables(const std::string& root, bool check, std::vector<std::string>* stale);

}  // namespace smolvm::bench
