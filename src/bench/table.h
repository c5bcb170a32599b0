// A small table renderer shared by summarize and census: fixed-width text
// for terminals, or GitHub markdown.
#pragma once

#include <string>
#include <vector>

namespace smolvm::bench {

using TableRow = std::vector<std::string>;

// Left-aligns the first `text_columns` columns, right-aligns the rest.
std::string RenderTable(const TableRow& header, const std::vector<TableRow>& rows, bool markdown,
                        size_t text_columns = 1);

// "%.*f" of v, or "-" when v is not finite.
std::string Fixed(double v, int decimals);

// 2744.3 -> "2,744"; "-" when v is not finite.
std::string Thousands(double v);

// MiB as "12.3 GiB"; "-" when not finite.
std::string GiB(double mib);

}  // namespace smolvm::bench
