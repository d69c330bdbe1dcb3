// Tables as text, Markdown, CSV and LaTeX (tandem/table.h; docs/report.md "LaTeX tables").
#include "tandem/table.h"
#include "tandem/table_numbers.h"

#include "tandem/error.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <sstream>
#include <utility>

namespace tandem {

ReportFormat parse_report_format(const std::string& name) {
    if (name == "text" || name == "txt") return ReportFormat::Text;
    if (name == "md" || name == "markdown") return ReportFormat::Markdown;
    if (name == "csv") return ReportFormat::Csv;
    if (name == "tex" || name == "latex") return ReportFormat::Latex;
    throw Error("report format '" + name + "' is not one of text, md, csv, tex");
}

std::string latex_escape(const std::string& s) {
    // The characters LaTeX reads as markup, each with how it is written as text.
    static constexpr std::pair<char, const char*> kSpecial[] = {
        {'&', "\\&"}, {'%', "\\%"}, {'$', "\\$"}, {'#', "\\#"}, {'_', "\\_"}, {'{', "\\{"}, {'}', "\\}"},
        {'~', "\\textasciitilde{}"}, {'^', "\\textasciicircum{}"}, {'\\', "\\textbackslash{}"}, {'|', "\\textbar{}"},
        {'<', "\\textless{}"}, {'>', "\\textgreater{}"}};
    std::string o;
    for (char ch : s) {
        const auto* special = std::find_if(std::begin(kSpecial), std::end(kSpecial), [ch](const auto& e) { return e.first == ch; });
        if (special != std::end(kSpecial))
            o += special->second;
        else
            o += ch;
    }
    return o;
}

std::string csv_escape(const std::string& s) {
    if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
    std::string o = "\"";
    for (char ch : s) {
        if (ch == '"') o += '"';
        o += ch;
    }
    return o + "\"";
}

namespace {

// ---- LaTeX layout (docs/report.md "LaTeX tables") ------------------------------------------------
// A cell that starts with a number ("-1.177e-07", "3.2 (40)", "12.5%", "1.2 GiB"): the number and
// the rest. siunitx typesets the number (\num), so exponents read 1.177×10^-7, not e-07.
bool split_number(const std::string& cell, std::string& number, std::string& rest) {
    size_t i = 0;
    if (i < cell.size() && (cell[i] == '-' || cell[i] == '+')) ++i;
    const size_t digits_from = i;
    while (i < cell.size() && std::isdigit(static_cast<unsigned char>(cell[i]))) ++i;
    if (i < cell.size() && cell[i] == '.') {
        ++i;
        while (i < cell.size() && std::isdigit(static_cast<unsigned char>(cell[i]))) ++i;
    }
    if (i == digits_from || (i == digits_from + 1 && cell[digits_from] == '.')) return false;
    if (i < cell.size() && (cell[i] == 'e' || cell[i] == 'E')) {
        size_t j = i + 1;
        if (j < cell.size() && (cell[j] == '-' || cell[j] == '+')) ++j;
        const size_t exp_from = j;
        while (j < cell.size() && std::isdigit(static_cast<unsigned char>(cell[j]))) ++j;
        if (j > exp_from) i = j;
    }
    if (i < cell.size() && cell[i] != ' ' && cell[i] != '%') return false;  // "4x", "2026-11-29": not a number
    number = cell.substr(0, i);
    rest = cell.substr(i);
    return true;
}

bool missing_cell(const std::string& cell) { return cell.empty() || cell == "n/a" || cell == "-" || cell == "none"; }

std::string latex_cell(const std::string& cell) {
    std::string number, rest;
    if (split_number(cell, number, rest)) return "\\num{" + number + "}" + latex_escape(rest);
    return latex_escape(cell);
}

// Header words stacked on lines of about 12 characters, so narrow numeric columns stay narrow.
std::string latex_header(const std::string& text, char align) {
    std::vector<std::string> lines;
    std::string line;
    size_t start = 0;
    while (start <= text.size()) {
        size_t end = text.find(' ', start);
        if (end == std::string::npos) end = text.size();
        const std::string word = text.substr(start, end - start);
        if (!line.empty() && line.size() + 1 + word.size() > 12) {
            lines.push_back(line);
            line = word;
        } else {
            line += (line.empty() ? "" : " ") + word;
        }
        start = end + 1;
    }
    if (!line.empty()) lines.push_back(line);
    if (lines.size() <= 1) return latex_escape(text);
    std::string out = std::string("\\shortstack[") + align + "]{";
    for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\\\\" : "") + latex_escape(lines[i]);
    return out + "}";
}

// The LaTeX body of a table: at most 6 columns stay as they are; a wider table is set transposed
// (its leading text columns become the column headers, its other columns the rows) in blocks of at
// most 3 value columns, so it fits an article's text width at \footnotesize.
std::string latex_tabulars(const Table& t) {  // (t.transpose_when_wide: see report.h)
    const size_t ncols = t.columns.size();
    std::vector<bool> numeric(ncols, false);
    for (size_t c = 0; c < ncols; ++c) {
        bool any = false, all = true;
        for (const auto& r : t.rows) {
            const std::string cell = c < r.size() ? r[c] : "";
            std::string n, rest;
            if (split_number(cell, n, rest)) any = true;
            else if (!missing_cell(cell)) all = false;
        }
        numeric[c] = any && all;
    }
    std::ostringstream o;
    auto row_line = [&](const std::vector<std::string>& cells) {
        for (size_t i = 0; i < cells.size(); ++i) o << (i ? " & " : "") << cells[i];
        o << " \\\\\n";
    };
    if (ncols <= 6 || t.rows.empty() || !t.transpose_when_wide) {
        o << "\\begin{tabular}{@{}";
        for (size_t c = 0; c < ncols; ++c) o << (numeric[c] ? 'r' : 'l');
        o << "@{}}\n\\toprule\n";
        std::vector<std::string> header;
        for (size_t c = 0; c < ncols; ++c) header.push_back(latex_header(t.columns[c], numeric[c] ? 'r' : 'l'));
        row_line(header);
        o << "\\midrule\n";
        for (const auto& r : t.rows) {
            std::vector<std::string> cells;
            for (size_t c = 0; c < r.size(); ++c) cells.push_back(numeric[c] ? latex_cell(r[c]) : latex_escape(r[c]));
            row_line(cells);
        }
        o << "\\bottomrule\n\\end{tabular}\n";
        return o.str();
    }
    // Transposed: keys = the leading non-numeric columns (at least one).
    size_t keys = 0;
    while (keys < ncols && !numeric[keys]) ++keys;
    keys = std::max<size_t>(1, std::min(keys, ncols - 1));
    constexpr size_t kBlock = 3;
    for (size_t first = 0; first < t.rows.size(); first += kBlock) {
        const size_t last = std::min(t.rows.size(), first + kBlock);
        if (first) o << "\\par\\medskip\n";
        o << "\\begin{tabular}{@{}l" << std::string(last - first, 'r') << "@{}}\n\\toprule\n";
        std::vector<std::string> header{""};
        for (size_t r = first; r < last; ++r) {
            std::string key;
            for (size_t k = 0; k < keys; ++k) key += (k ? " " : "") + (k < t.rows[r].size() ? t.rows[r][k] : std::string());
            header.push_back(latex_header(key, 'r'));
        }
        row_line(header);
        o << "\\midrule\n";
        for (size_t c = keys; c < ncols; ++c) {
            std::vector<std::string> cells{latex_escape(t.columns[c])};
            for (size_t r = first; r < last; ++r) {
                const auto& cell = c < t.rows[r].size() ? t.rows[r][c] : std::string();
                cells.push_back(latex_cell(cell));
            }
            row_line(cells);
        }
        o << "\\bottomrule\n\\end{tabular}\n";
    }
    return o.str();
}

}  // namespace

std::string markdown_escape(const std::string& s) {
    std::string o;
    for (char ch : s) {
        if (ch == '|') o += "\\";
        o += ch;
    }
    return o;
}

std::string render_table(const Table& t, ReportFormat f) {
    std::ostringstream o;
    switch (f) {
        case ReportFormat::Text: {
            if (!t.banner.empty()) o << t.banner << "\n";
            std::vector<size_t> w(t.columns.size(), 0);
            for (size_t i = 0; i < t.columns.size(); ++i) w[i] = t.columns[i].size();
            for (const auto& r : t.rows)
                for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
            o << t.title << "\n";
            auto line = [&](const std::vector<std::string>& cells) {
                for (size_t i = 0; i < cells.size(); ++i) {
                    o << (i ? "  " : "  ") << cells[i];
                    if (i + 1 < cells.size()) o << std::string(w[i] - cells[i].size(), ' ');
                }
                o << "\n";
            };
            line(t.columns);
            for (const auto& r : t.rows) line(r);
            for (const auto& n : t.notes) o << "  * " << n << "\n";
            break;
        }
        case ReportFormat::Markdown: {
            if (!t.banner.empty()) o << "**" << markdown_escape(t.banner) << "**\n\n";
            o << "### " << markdown_escape(t.title) << "\n\n|";
            for (const auto& c : t.columns) o << " " << markdown_escape(c) << " |";
            o << "\n|";
            for (size_t i = 0; i < t.columns.size(); ++i) o << " --- |";
            o << "\n";
            for (const auto& r : t.rows) {
                o << "|";
                for (const auto& c : r) o << " " << markdown_escape(c) << " |";
                o << "\n";
            }
            if (!t.notes.empty()) o << "\n";
            for (const auto& n : t.notes) o << "- " << markdown_escape(n) << "\n";
            break;
        }
        case ReportFormat::Csv: {
            if (!t.banner.empty()) o << "# " << t.banner << "\n";
            const Table plain = plain_number_table(t);  // numbers in the cells, units in the header (table_numbers.h)
            for (size_t i = 0; i < plain.columns.size(); ++i) o << (i ? "," : "") << csv_escape(plain.columns[i]);
            o << "\n";
            for (const auto& r : plain.rows) {
                for (size_t i = 0; i < r.size(); ++i) o << (i ? "," : "") << csv_escape(r[i]);
                o << "\n";
            }
            break;
        }
        case ReportFormat::Latex: {
            // booktabs rules, siunitx numbers, \footnotesize, text columns left and numbers right;
            // the notes (what "pass" means, "differences are a - b") stay under the table.
            o << "\\begin{table}[htbp]\n\\centering\n\\footnotesize\n\\setlength{\\tabcolsep}{4pt}\n\\caption{"
              << latex_escape(t.title) << "}\n\\label{tab:tandem-" << t.id << "}\n";
            if (!t.banner.empty())  // visible in the typeset table, not a comment
                o << "\\begin{minipage}{\\linewidth}\\raggedright\\textbf{" << latex_escape(t.banner)
                  << "}\\end{minipage}\\par\\smallskip\n";
            o << latex_tabulars(t);
            if (!t.notes.empty()) {
                o << "\\par\\smallskip\n\\begin{minipage}{\\linewidth}\\raggedright\\scriptsize\n";
                for (const auto& n : t.notes) o << latex_escape(n) << "\\par\n";
                o << "\\end{minipage}\n";
            }
            o << "\\end{table}\n";
            break;
        }
    }
    return o.str();
}

}  // namespace tandem
