#pragma once
// A table for machines: the CSV form of every table (render_table, so `tandem report --format csv`, the
// workbench's table export) has plain numbers in its cells and their units in its headers.
// Per column, when every cell that is not missing ("", "n/a", "-", "none") is a number with one unit
// ("493.8 MiB", "100.0%", "12 s"), the unit moves into the header ("peak host [MiB]") and the cell
// keeps the number — sizes in one unit per column (MiB), at the precision the report printed; a number
// with a parenthesised note ("1.960 (6-29)", "4.5e-06 (0)") keeps the number and the note goes into a
// column of its own, named by the header's parenthesis ("median s/update" and "window"). Missing
// cells become empty. Columns of words or of mixed kinds stay as they are.
#include "tandem/table.h"

namespace tandem {

Table plain_number_table(const Table& table);

}  // namespace tandem
