#include "tandem/views/tandem_binary.h"

#include <QDir>
#include <QFileInfo>

#ifndef TANDEM_INSTALL_BINDIR
#define TANDEM_INSTALL_BINDIR "/usr/local/bin"
#endif

namespace tandem::views {

QString installed_bindir() { return QStringLiteral(TANDEM_INSTALL_BINDIR); }

QString TandemBinary::not_found_message() const {
    if (!path.isEmpty()) return QStringLiteral("Using the tandem CLI at %1.").arg(path);
    return QStringLiteral("Cannot find the tandem CLI (the launcher runs `tandem run`). Tried: %1. "
                          "Build it (cmake --build build --target tandem), install it, put it on PATH, "
                          "or start the workbench with --tandem FILE.")
        .arg(tried.join(QStringLiteral(", ")));
}

TandemBinary find_tandem_binary(const QString& gui_dir, const QString& installed, const QString& path_env,
                                const QString& explicit_path) {
    TandemBinary result;
    auto usable = [](const QString& file) {
        const QFileInfo info(file);
        return info.isFile() && info.isExecutable();
    };
    auto try_path = [&](const QString& file) {
        const QString clean = QDir::cleanPath(file);
        if (result.tried.contains(clean)) return false;
        result.tried << clean;
        if (!usable(clean)) return false;
        result.path = clean;
        return true;
    };
    if (!explicit_path.isEmpty()) {
        try_path(QFileInfo(explicit_path).absoluteFilePath());
        return result;
    }
    const QString name = QStringLiteral("tandem");
    if (!gui_dir.isEmpty()) {
        if (try_path(QDir(gui_dir).filePath(name))) return result;             // installed side by side
        if (try_path(QDir(gui_dir).filePath(QStringLiteral("../") + name))) return result;  // build/app/tandem
    }
    if (!installed.isEmpty() && try_path(QDir(installed).filePath(name))) return result;
    for (const auto& dir : path_env.split(QLatin1Char(':'), Qt::SkipEmptyParts))
        if (try_path(QDir(dir).filePath(name))) return result;
    return result;
}

}  // namespace tandem::views
