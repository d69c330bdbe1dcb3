// Report export: every table in every format; LaTeX is escaped and uses booktabs rules.
#include "tandem/error.h"
#include "tandem/compare/report.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace tandem::experiments;

TEST(ReportExport, LatexEscapesSpecialCharacters) {
    EXPECT_EQ(latex_escape("a_b & 50% #1 $x {y} ~ ^ \\"),
              "a\\_b \\& 50\\% \\#1 \\$x \\{y\\} \\textasciitilde{} \\textasciicircum{} \\textbackslash{}");
    EXPECT_EQ(csv_escape("plain"), "plain");
    EXPECT_EQ(csv_escape("a,b"), "\"a,b\"");
    EXPECT_EQ(csv_escape("say \"hi\""), "\"say \"\"hi\"\"\"");
}

TEST(ReportExport, TablesRenderInEveryFormat) {
    Table t{"l1", "L1: x_y & z", {"legs", "rel diff"}, {{"engine vs ref_1", "1.0e-08"}, {"a|b", "50%"}}, {"note #1"}};
    std::string tex = render_table(t, ReportFormat::Latex);
    // Text column left, number column right; numbers through siunitx; the notes under the table.
    EXPECT_NE(tex.find("\\begin{tabular}{@{}lr@{}}"), std::string::npos);
    EXPECT_NE(tex.find("\\toprule"), std::string::npos);
    EXPECT_NE(tex.find("\\midrule"), std::string::npos);
    EXPECT_NE(tex.find("\\bottomrule"), std::string::npos);
    EXPECT_NE(tex.find("engine vs ref\\_1 & \\num{1.0e-08} \\\\"), std::string::npos);
    EXPECT_NE(tex.find("\\num{50}\\%"), std::string::npos);
    EXPECT_NE(tex.find("note \\#1"), std::string::npos);
    EXPECT_NE(tex.find("\\caption{L1: x\\_y \\& z}"), std::string::npos);
    // No unescaped special character survives in the body.
    EXPECT_EQ(tex.find(" & z}"), std::string::npos);

    std::string md = render_table(t, ReportFormat::Markdown);
    EXPECT_NE(md.find("| legs | rel diff |"), std::string::npos);
    EXPECT_NE(md.find("| --- | --- |"), std::string::npos);
    EXPECT_NE(md.find("a\\|b"), std::string::npos);

    std::string csv = render_table(t, ReportFormat::Csv);
    EXPECT_EQ(csv, "legs,rel diff\nengine vs ref_1,1.0e-08\na|b,50%\n");

    std::string text = render_table(t, ReportFormat::Text);
    EXPECT_NE(text.find("engine vs ref_1"), std::string::npos);
}

TEST(ReportExport, WholeReportHasEveryLevelAndTheVerdict) {
    Comparison c;
    c.legs = {"a", "b"};
    c.failures = {"L3 a~b: record x: token ids differ"};
    c.completeness_judged = true;  // complete legs (judge_completeness found nothing missing)
    for (auto f : {ReportFormat::Text, ReportFormat::Markdown, ReportFormat::Csv, ReportFormat::Latex}) {
        std::string r = render_report("run_1", c, f);
        for (const char* title : {"L1", "L2", "L3", "L4", "Two distances", "gradient norm", "Timing and memory", "bandwidth"})
            EXPECT_NE(r.find(title), std::string::npos) << title;
        EXPECT_NE(r.find("different: L3 a"), std::string::npos);  // "~" is escaped in LaTeX
    }
    EXPECT_THROW(parse_report_format("pdf"), tandem::Error);
}

TEST(ReportExport, L4NotesGiveTheLargestResidualPercent) {
    Comparison c;
    c.legs = {"engine", "reference"};
    L4Entry e;
    e.leg_a = "engine";
    e.leg_b = "reference";
    e.residual_leg = "engine";
    e.residual_reference = "reference";
    // 100 * (2.5 - 2.0) / 2.0 = 25 % at update 0; 100 * (0.9 - 1.0) / 1.0 = -10 % at update 4.
    e.eval_percent = residual_percent({{0, 2.5, 2.0, 0.5}, {4, 0.9, 1.0, -0.1}}, false);
    e.grad_percent = residual_percent({{3, 0.5, 0.0, 0.5}}, false);  // reference 0: undefined
    c.l4.push_back(e);
    const auto tables = report_tables(c);
    const auto l4 = std::find_if(tables.begin(), tables.end(), [](const Table& t) { return t.id == "l4"; });
    ASSERT_NE(l4, tables.end());
    ASSERT_FALSE(l4->notes.empty());
    EXPECT_NE(l4->notes[0].find("largest |engine - reference| 2.500e+01% (update 0) held-out CE, n/a training loss, n/a pre-clip grad norm"),
              std::string::npos)
        << l4->notes[0];
}
