// Converters (docs/spec.md §Corpus): the real corpora in ../shared/data/corpora against the counts their README
// states (an independent description of the data), and synthetic edge cases.
#include "tandem/data/corpus_sources.h"
#include "tandem/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <functional>
#include <set>

#include <unistd.h>

namespace fs = std::filesystem;
using namespace tandem::data;

namespace {

fs::path shared_corpora() { return fs::path(TANDEM_TEST_SOURCE_DIR) / ".." / "shared" / "data" / "corpora"; }

// A fresh temporary sources folder for one test.
struct TempSources {
    fs::path dir;
    explicit TempSources(const std::string& name) {
        dir = fs::temp_directory_path() / ("tandem-test-sources-" + name + "-" + std::to_string(::getpid()));
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    ~TempSources() { fs::remove_all(dir); }
    void write(const std::string& rel, const std::string& text) const {
        fs::create_directories((dir / rel).parent_path());
        std::ofstream(dir / rel, std::ios::binary) << text;
    }
};

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const tandem::Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(CorpusSources, PubMedQAMatchesReadme) {
    const auto rows = read_pubmedqa(shared_corpora());
    ASSERT_EQ(rows.size(), 1000u);  // README: 1,000 rows, LONG_ANSWER on all of them
    size_t rejected = 0;
    std::set<std::string> ids;
    for (const auto& r : rows) {
        rejected += r.rejected.has_value();
        ids.insert(r.id);
        if (r.rejected) continue;
        ASSERT_EQ(r.messages.size(), 2u);
        EXPECT_EQ(r.messages[0].role, "user");
        EXPECT_EQ(r.messages[1].role, "assistant");
        EXPECT_EQ(r.messages[1].content, r.target);
        EXPECT_EQ(r.messages[0].content.rfind(r.question, 0), 0u) << r.id;  // question first
    }
    EXPECT_EQ(rejected, 0u);
    EXPECT_EQ(ids.size(), 1000u);
    // README example row: the first entry of ori_pqal.json.
    EXPECT_EQ(rows[0].id, "pubmedqa:21645374");
    EXPECT_EQ(rows[0].question,
              "Do mitochondria play a role in remodelling lace plant leaves during programmed cell death?");
    EXPECT_NE(rows[0].messages[0].content.find("\n\nContext:\nBACKGROUND: Programmed cell death (PCD) is the regulated"),
              std::string::npos);
    EXPECT_NE(rows[0].messages[0].content.find("\nRESULTS: "), std::string::npos);
}

TEST(CorpusSources, MedMCQAMatchesReadme) {
    const auto rows = read_medmcqa(shared_corpora());
    ASSERT_EQ(rows.size(), 4283u);  // README: 4,183 dev rows + 100 train rows
    std::map<std::string, size_t> by_split_with_exp, by_split;
    std::set<std::string> ids;
    for (const auto& r : rows) {
        ids.insert(r.id);
        const std::string split = r.id.substr(r.id.find(':') + 1, r.id.find('/') - r.id.find(':') - 1);
        ++by_split[split];
        if (!r.rejected) ++by_split_with_exp[split];
        else EXPECT_EQ(*r.rejected, "no explanation") << r.id;
    }
    EXPECT_EQ(ids.size(), rows.size());
    EXPECT_EQ(by_split["validation"], 4183u);
    EXPECT_EQ(by_split["train"], 100u);
    EXPECT_EQ(by_split_with_exp["validation"], 2206u);  // README: exp on 2,206 of 4,183 dev rows
    EXPECT_EQ(by_split_with_exp["train"], 100u);
    // Files in name order: the train file sorts first.
    EXPECT_EQ(rows.front().id, "medmcqa:train/openclaw_00000001");
    // README example, line 22 of the validation file.
    const SourceRow* row22 = nullptr;
    for (const auto& r : rows)
        if (r.id == "medmcqa:validation/openclaw_00000022") row22 = &r;
    ASSERT_NE(row22, nullptr);
    EXPECT_EQ(row22->line, 22u);
    ASSERT_FALSE(row22->rejected);
    EXPECT_EQ(row22->messages[0].content,
              "Highest concentration of oxygen is delivered through?\n\nA. Nasal cannula\nB. Venturi mask\n"
              "C. Bag and mask\nD. Mask with reservoir");
    EXPECT_EQ(row22->messages[1].content,
              "Bag and mask-100% O2 Venturi mask- 60% O2 Nasal cannula - 40% O2 Mask with reservoir- 80-90% O2");
}

TEST(CorpusSources, MedQATargetIsTheOptionTextAsASentence) {
    const auto rows = read_medqa(shared_corpora());
    ASSERT_EQ(rows.size(), 1273u);
    // Independent read of the same file: the target is the text of options[answer_idx] in the
    // documented sentence, never the letter alone.
    std::ifstream in(shared_corpora() / "medqa_usmle" / "test.jsonl");
    std::string line;
    size_t i = 0;
    while (std::getline(in, line)) {
        ASSERT_LT(i, rows.size());
        const auto j = nlohmann::json::parse(line);
        std::string answer = j["options"][j["answer_idx"].get<std::string>()];
        while (!answer.empty() && std::isspace(static_cast<unsigned char>(answer.back()))) answer.pop_back();  // trimmed
        const SourceRow& r = rows[i++];
        ASSERT_FALSE(r.rejected) << r.id << ": " << *r.rejected;
        EXPECT_EQ(r.id, "medqa:test/" + std::to_string(j["realidx"].get<int>()));
        const char last = answer.back();
        const std::string expected = "The correct answer is: " + answer + (last == '.' || last == '?' || last == '!' ? "" : ".");
        EXPECT_EQ(r.messages[1].content, expected) << r.id;
        EXPECT_NE(r.messages[1].content, j["answer_idx"].get<std::string>());
    }
    EXPECT_EQ(i, rows.size());
    EXPECT_EQ(rows[0].id, "medqa:test/0");
    EXPECT_EQ(rows[0].messages[1].content, "The correct answer is: Tell the attending that he cannot fail to disclose this mistake.");
    EXPECT_NE(rows[0].messages[0].content.find("\n\nA. Disclose the error to the patient and put it in the operative report\nB. "),
              std::string::npos);
}

TEST(CorpusSources, MedMCQAEdgeCases) {
    TempSources t("medmcqa");
    const std::string good = R"({"row_id": "r1", "question": "Q one?", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "cop": 0, "exp": " Because. "})";
    t.write("medmcqa/x.parsed.jsonl",
            good + "\n" +
            R"({"row_id": "r2", "question": "Q two?", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "cop": 0, "exp": null})" "\n"
            R"({"row_id": "r3", "question": "Q three?", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "cop": 0})" "\n"
            "\n"  // blank lines are not rows
            R"({"row_id": "r4", "question": "Q four?", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "exp": " \n "})" "\n"
            R"({"row_id": "r5", "question": "  ", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "exp": "E"})" "\n");
    const auto rows = read_medmcqa(t.dir);
    ASSERT_EQ(rows.size(), 5u);
    EXPECT_FALSE(rows[0].rejected);
    EXPECT_EQ(rows[0].id, "medmcqa:x/r1");  // a file name without train/dev/test: its stem is the split tag
    EXPECT_EQ(rows[0].messages[1].content, "Because.");
    EXPECT_EQ(rows[1].rejected.value_or(""), "no explanation");
    EXPECT_EQ(rows[2].rejected.value_or(""), "no explanation");
    EXPECT_EQ(rows[3].rejected.value_or(""), "no explanation");
    EXPECT_EQ(rows[3].line, 5u);
    EXPECT_EQ(rows[4].rejected.value_or(""), "empty question");

    // Malformed JSON: the error names the file and the line.
    t.write("medmcqa/x.parsed.jsonl", good + "\n" + good + "\n{\"row_id\": \"r9\", \"question\": \n");
    const std::string e1 = error_of([&] { read_medmcqa(t.dir); });
    EXPECT_NE(e1.find("medmcqa/x.parsed.jsonl: line 3: malformed JSON"), std::string::npos) << e1;
    // A missing field: file, line and field.
    t.write("medmcqa/x.parsed.jsonl", R"({"row_id": "r1", "question": "Q", "opa": "a", "opc": "c", "opd": "d", "exp": "E"})" "\n");
    const std::string e2 = error_of([&] { read_medmcqa(t.dir); });
    EXPECT_NE(e2.find("medmcqa/x.parsed.jsonl: line 1: field \"opb\": missing"), std::string::npos) << e2;
    // A field of the wrong type.
    t.write("medmcqa/x.parsed.jsonl", R"({"row_id": "r1", "question": "Q", "opa": "a", "opb": 3, "opc": "c", "opd": "d", "exp": "E"})" "\n");
    const std::string e3 = error_of([&] { read_medmcqa(t.dir); });
    EXPECT_NE(e3.find("line 1: field \"opb\": expected a string, got number"), std::string::npos) << e3;
}

TEST(CorpusSources, MedMCQAOfficialLayoutUsesTheUuid) {
    TempSources t("medmcqa-official");
    // The official release: dev.json is JSON Lines with `id`, 1-based `cop`, subject/topic fields.
    t.write("medmcqa/dev.json",
            R"({"question": "Q?", "exp": "Because.", "cop": 3, "opa": "a", "opb": "b", "opc": "c", "opd": "d", "subject_name": "S", "topic_name": null, "id": "45258d3d-b974-44dd-a161-c3fccbdadd88", "choice_type": "single"})" "\n");
    t.write("medmcqa/examples.jsonl", "not read\n");  // verbatim flattened copies are not read
    const auto rows = read_medmcqa(t.dir);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].id, "medmcqa:validation/45258d3d-b974-44dd-a161-c3fccbdadd88");
    EXPECT_FALSE(rows[0].rejected);
}

TEST(CorpusSources, MedQAEdgeCases) {
    TempSources t("medqa");
    t.write("medqa_usmle/phrases_no_exclude_train.jsonl",
            R"({"question": "Q1", "answer": "Two", "options": {"B": "Two", "A": "One"}, "answer_idx": "B"})" "\n"
            R"({"question": "Q2", "answer": "One", "options": {"A": "One", "B": "Two"}, "answer_idx": "B"})" "\n"
            R"({"question": "Q3", "options": {"A": "One?", "B": "Two"}, "answer_idx": "E"})" "\n"
            R"({"question": "Q4", "options": {"A": "Is it one?", "B": "Two"}, "answer_idx": "A"})" "\n");
    const auto rows = read_medqa(t.dir);
    ASSERT_EQ(rows.size(), 4u);
    EXPECT_EQ(rows[0].id, "medqa:train/0");  // no realidx: the 0-based row number
    ASSERT_FALSE(rows[0].rejected);
    EXPECT_EQ(rows[0].messages[0].content, "Q1\n\nA. One\nB. Two");  // options in letter order
    EXPECT_EQ(rows[0].messages[1].content, "The correct answer is: Two.");
    EXPECT_EQ(rows[1].rejected.value_or(""), "answer text differs from options[answer_idx]");
    EXPECT_EQ(rows[2].rejected.value_or(""), "answer_idx \"E\" is not an option");
    EXPECT_EQ(rows[3].messages[1].content, "The correct answer is: Is it one?");  // no second full stop
}

TEST(CorpusSources, PubMedQAEdgeCases) {
    TempSources t("pubmedqa");
    t.write("pubmedqa/ori_pqal.json",
            R"({"2": {"QUESTION": "Q2?", "CONTEXTS": ["c1 ", "c2"], "LABELS": ["A", "B"], "LONG_ANSWER": "L."},
                "1": {"QUESTION": "Q1?", "CONTEXTS": ["c1"], "LABELS": ["A"], "LONG_ANSWER": "  "}})");
    auto rows = read_pubmedqa(t.dir);
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].id, "pubmedqa:2");  // file order, not key order
    EXPECT_EQ(rows[0].messages[0].content, "Q2?\n\nContext:\nA: c1\nB: c2");
    EXPECT_EQ(rows[1].rejected.value_or(""), "no long answer");

    t.write("pubmedqa/ori_pqal.json", R"({"7": {"QUESTION": "Q", "CONTEXTS": ["c1", "c2"], "LABELS": ["A"], "LONG_ANSWER": "L"}})");
    const std::string e = error_of([&] { read_pubmedqa(t.dir); });
    EXPECT_NE(e.find("pubmedqa/ori_pqal.json: entry \"7\": field \"LABELS\": 1 labels for 2 contexts"), std::string::npos) << e;

    // The HuggingFace layout exported as JSON Lines.
    fs::remove(t.dir / "pubmedqa/ori_pqal.json");
    t.write("pubmedqa/pqa_labeled.jsonl",
            R"({"pubid": 99, "question": "Q?", "context": {"contexts": ["c"], "labels": ["L"]}, "long_answer": "A.", "final_decision": "yes"})" "\n");
    rows = read_pubmedqa(t.dir);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].id, "pubmedqa:99");
    EXPECT_EQ(rows[0].messages[0].content, "Q?\n\nContext:\nL: c");
}

TEST(CorpusSources, DedupNormalisation) {
    EXPECT_EQ(normalise_for_dedup("  What IS\tthe\n\n answer?  "), "what is the answer?");
    EXPECT_EQ(normalise_for_dedup("Ünïcode  Stays"), "Ünïcode stays");  // only ASCII is case-folded
    SourceRow a, b;
    a.question = "What is X?";
    a.target = "X is Y.";
    b.question = "what  is x?";
    b.target = "x is y.";
    EXPECT_EQ(dedup_key(a), dedup_key(b));
    b.target = "x is y";
    EXPECT_NE(dedup_key(a), dedup_key(b));
    // The separator keeps question and target apart.
    a.question = "ab";
    a.target = "c";
    b.question = "a";
    b.target = "bc";
    EXPECT_NE(dedup_key(a), dedup_key(b));
}
