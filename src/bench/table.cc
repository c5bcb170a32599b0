#include "bench/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace smolvm::bench {
namespace {

// Display width of UTF-8 text: code points, not bytes ("×", "–").
size_t Width(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

}  // namespace

std::string RenderTable(const TableRow& header, const std::vector<TableRow>& rows, bool markdown,
                        size_t text_columns) {
  std::vector<size_t> width(header.size(), 0);
  auto widen = [&](const TableRow& r) {
    for (size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], Width(r[i]));
  };
  widen(header);
  for (const auto& r : rows) widen(r);
  auto line = [&](const TableRow& r) {
    std::string out = markdown ? "|" : "";
    for (size_t i = 0; i < width.size(); ++i) {
      std::string cell = i < r.size() ? r[i] : "";
      std::string pad(width[i] - std::min(width[i], Width(cell)), ' ');
      std::string aligned = i < text_columns ? cell + pad : pad + cell;
      out += markdown ? " " + aligned + " |" : (i ? "  " : "") + aligned;
    }
    while (!markdown && !out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(header);
  if (markdown) {
    out += "|";
    for (size_t i = 0; i < width.size(); ++i)
      out += (i < text_columns ? " :" : " ") + std::string(std::max<size_t>(width[i], 2) - 1, '-') +
             (i < text_columns ? " |" : ": |");
    out += "\n";
  }
  for (const auto& r : rows) out += line(r);
  return out;
}

std::string Fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string Thousands(double v) {
  if (!std::isfinite(v)) return "-";
  std::string d = std::to_string(static_cast<long long>(std::llround(v)));
  for (int i = static_cast<int>(d.size()) - 3; i > 0; i -= 3) d.insert(static_cast<size_t>(i), 1, ',');
  return d;
}

std::string GiB(double mib) { return std::isfinite(mib) ? Fixed(mib / 1024, 1) + " GiB" : "-"; }

}  // namespace smolvm::bench
