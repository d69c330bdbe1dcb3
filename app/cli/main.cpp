// `tandem` — one binary, many subcommands. Wiring only; see docs/cli.md.
#include "commands.h"

#include "tandem/error.h"
#include "tandem/version.h"

#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>

int main(int argc, char** argv) {
    using namespace tandem::cli;
    CLI::App app{"tandem — checks whether independently implemented training stacks compute the same "
                 "fine-tuning run.\nExit codes: 0 ok, 1 error, 2 usage, 3 check failed, 130 interrupted.",
                 "tandem"};
    app.set_version_flag("--version", std::string("tandem ") + TANDEM_VERSION);
    app.require_subcommand(1);
    app.fallthrough(false);

    int exit_code = kOk;
    add_doctor_command(app, exit_code);
    add_probe_command(app, exit_code);
    add_tokens_commands(app, exit_code);
    add_template_commands(app, exit_code);
    add_bench_commands(app, exit_code);
    add_corpus_commands(app, exit_code);
    add_inspect_command(app, exit_code);
    add_run_command(app, exit_code);
    add_report_command(app, exit_code);
    add_envelope_command(app, exit_code);
    add_leg_commands(app, exit_code);
    add_import_commands(app, exit_code);
    add_export_commands(app, exit_code);
    add_compare_command(app, exit_code);
    add_localise_command(app, exit_code);
    add_faults_command(app, exit_code);
    add_env_commands(app, exit_code);

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        app.exit(e);
        return kUsage;
    } catch (const tandem::Error& e) {
        std::fprintf(stderr, "tandem: error: %s\n", e.what());
        return kError;
    } catch (const std::filesystem::filesystem_error& e) {
        // A path the user gave cannot be used (a file where a folder is needed, no space, no
        // permission): the library's message names the operation, the reason and the path(s).
        std::fprintf(stderr, "tandem: error: %s\n", e.what());
        return kError;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "tandem: error: out of memory (an input asks for more memory than this machine has)\n");
        return kError;
    } catch (const std::exception& e) {
        // Reaching this is a bug in tandem (an input path without its own error message): the
        // bad-input suite (tests/cli) keeps the known paths away from here.
        std::fprintf(stderr, "tandem: internal error: %s\n", e.what());
        return kError;
    }
    return exit_code;
}
