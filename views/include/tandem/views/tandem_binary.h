#pragma once
// Where the launcher finds the `tandem` CLI: next to the GUI binary, in the build tree (the GUI is
// build/app/workbench/tandem-workbench, the CLI build/app/tandem), in the installed bindir, then on
// PATH. Every place tried is kept, so "not found" can say exactly where it looked.
#include <QString>
#include <QStringList>

namespace tandem::views {

struct TandemBinary {
    QString path;       // the executable found; empty when none
    QStringList tried;  // every candidate, in the order tried (the found one last)
    // One message for the launcher: "found" or what was tried and how to fix it.
    QString not_found_message() const;
};

// `gui_dir`: the folder of the running GUI binary; `installed_bindir`: the install prefix's bin
// (compiled in); `path_env`: the PATH value (':'-separated). `explicit_path`, when not empty, is the
// only candidate (--tandem FILE).
TandemBinary find_tandem_binary(const QString& gui_dir, const QString& installed_bindir, const QString& path_env,
                                const QString& explicit_path = {});

// The compiled-in install bindir (CMAKE_INSTALL_FULL_BINDIR).
QString installed_bindir();

}  // namespace tandem::views
