#include "tandem/table_numbers.h"

#include "tandem/number_text.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

namespace tandem {

namespace {

bool missing(const std::string& cell) { return cell.empty() || cell == "n/a" || cell == "-" || cell == "none"; }

// A cell read as: number, unit, parenthesised note; nullopt when it does not start with a number.
struct NumberCell {
    std::string number, unit, note;
};

std::optional<NumberCell> read_cell(const std::string& cell) {
    std::size_t i = 0;
    if (i < cell.size() && (cell[i] == '-' || cell[i] == '+')) ++i;
    const std::size_t digits = i;
    while (i < cell.size() && std::isdigit(static_cast<unsigned char>(cell[i]))) ++i;
    if (i < cell.size() && cell[i] == '.') {
        ++i;
        while (i < cell.size() && std::isdigit(static_cast<unsigned char>(cell[i]))) ++i;
    }
    if (i == digits || (i == digits + 1 && cell[digits] == '.')) return std::nullopt;
    if (i < cell.size() && (cell[i] == 'e' || cell[i] == 'E')) {
        std::size_t j = i + 1;
        if (j < cell.size() && (cell[j] == '-' || cell[j] == '+')) ++j;
        const std::size_t from = j;
        while (j < cell.size() && std::isdigit(static_cast<unsigned char>(cell[j]))) ++j;
        if (j > from) i = j;
    }
    NumberCell out;
    out.number = cell.substr(0, i);
    std::string rest = cell.substr(i);
    if (!rest.empty() && rest[0] == '%') {
        out.unit = "%";
        rest.erase(0, 1);
    }
    while (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
    // A unit: one word of letters and '/' ("MiB", "s", "tokens/s"), before any note.
    std::size_t u = 0;
    while (u < rest.size() && (std::isalpha(static_cast<unsigned char>(rest[u])) || rest[u] == '/')) ++u;
    if (u > 0 && out.unit.empty()) {
        out.unit = rest.substr(0, u);
        rest.erase(0, u);
        while (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
    }
    if (!rest.empty()) {
        if (rest.front() != '(' || rest.back() != ')') return std::nullopt;  // "4x faster", "2026-11-29": not a number cell
        out.note = rest.substr(1, rest.size() - 2);
    }
    return out;
}

// Bytes per unit of the size units format_bytes writes.
std::optional<double> size_unit(const std::string& unit) {
    static const std::map<std::string, double> units{{"B", 1.0}, {"KiB", 1024.0}, {"MiB", 1024.0 * 1024}, {"GiB", 1024.0 * 1024 * 1024},
                                                     {"TiB", 1024.0 * 1024 * 1024 * 1024}};
    auto it = units.find(unit);
    return it == units.end() ? std::nullopt : std::optional<double>(it->second);
}


}  // namespace

Table plain_number_table(const Table& t) {
    Table out = t;
    out.columns.clear();
    for (auto& r : out.rows) r.clear();
    for (std::size_t c = 0; c < t.columns.size(); ++c) {
        std::vector<std::optional<NumberCell>> cells;
        bool numbers = true, any = false, notes = false, sizes = true;
        std::string unit;
        bool unit_set = false;
        for (const auto& r : t.rows) {
            const std::string cell = c < r.size() ? r[c] : std::string();
            if (missing(cell)) {
                cells.emplace_back();
                continue;
            }
            auto n = read_cell(cell);
            if (!n) {
                numbers = false;
                break;
            }
            any = true;
            notes = notes || !n->note.empty();
            sizes = sizes && size_unit(n->unit).has_value();
            if (!unit_set) unit = n->unit, unit_set = true;
            else if (n->unit != unit && !(sizes && size_unit(unit))) numbers = false;
            cells.push_back(std::move(n));
        }
        const bool plain = numbers && any && (!unit.empty() || notes);
        if (!plain) {  // words, mixed kinds, or numbers that are already plain
            out.columns.push_back(t.columns[c]);
            for (std::size_t r = 0; r < t.rows.size(); ++r) out.rows[r].push_back(c < t.rows[r].size() ? t.rows[r][c] : std::string());
            continue;
        }
        // The header's parenthesis names the note column: "largest (update)" -> "largest", "update".
        std::string name = t.columns[c], note_name = "note";
        if (const auto open = name.rfind(" ("); open != std::string::npos && name.back() == ')') {
            note_name = name.substr(open + 2, name.size() - open - 3);
            name = name.substr(0, open);
        }
        const std::string shown_unit = sizes ? std::string("MiB") : unit;
        out.columns.push_back(shown_unit.empty() ? name : name + " [" + shown_unit + "]");
        if (notes) out.columns.push_back(note_name);
        for (std::size_t r = 0; r < t.rows.size(); ++r) {
            const auto& n = cells[r];
            std::string value;
            if (n) value = sizes ? number_text(std::stod(n->number) * *size_unit(n->unit) / (1024.0 * 1024), "%.10g") : n->number;
            out.rows[r].push_back(value);
            if (notes) out.rows[r].push_back(n ? n->note : std::string());
        }
    }
    return out;
}

}  // namespace tandem
