// tandem probe — bandwidth probes into an HDF5 run file and the catalog (docs/cli.md).
//
// Order matters: every input is validated and the catalog opened BEFORE any probe runs or any file
// is written, so bad input leaves every existing file as it was.
#include "commands.h"

#include "cli_inputs.h"

#include "tandem/error.h"
#include "tandem/overwrite_guard.h"
#include "tandem/store/catalog.h"
#include "tandem/measure/host_info.h"
#include "tandem/measure/probe.h"
#include "tandem/store/run_file.h"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <algorithm>
#include <thread>
#include <vector>

namespace tandem::cli {
namespace {

namespace fs = std::filesystem;
namespace ex = tandem::experiments;

// A malformed --device value is a usage error (exit 2); a well-formed one naming a device that is
// not there is found later (exit 1).
std::string device_form_error(const std::string& value) {
    if (value == "cpu" || value == "all") return {};
    if (value.rfind("cuda:", 0) == 0 && value.size() > 5 && value.size() <= 9 &&
        value.find_first_not_of("0123456789", 5) == std::string::npos)
        return {};
    return "invalid --device value '" + value + "' (expected cpu, cuda:N or all)";
}

// Checks that `path` can take the run file without modifying anything that exists: an existing
// file must be HDF5; and since the writer publishes by renaming a sibling over the target, the
// folder must let us create a file (tried with a uniquely named probe file, then removed).
// A probe file (what `tandem probe` wrote: /host and /probes only) is added to; any other existing
// HDF5 file — a run's run.h5 above all — is refused unless --force (docs/cli.md "Outputs").
void check_run_file_target(const fs::path& path, bool force) {
    const std::string name = path.string();
    std::error_code ec;
    if (fs::exists(path, ec)) {
        if (!fs::is_regular_file(path, ec)) throw Error(name + ": --out is not a regular file");
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
        if (H5Fis_hdf5(name.c_str()) <= 0) {
            refuse_protected_out("--out", name, force);  // a catalog, a run folder's file: exit 2
            throw Error(name + ": --out exists and is not an HDF5 file (left untouched)");
        }
        bool probe_file = enclosing_run_folder(path).empty();
        if (probe_file) {
            const hid_t f = H5Fopen(name.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
            if (f < 0) throw Error(name + ": --out is an HDF5 file that cannot be opened (left untouched)");
            H5G_info_t info{};
            probe_file = H5Gget_info(f, &info) >= 0;
            for (hsize_t i = 0; probe_file && i < info.nlinks; ++i) {
                char link[64] = {};
                if (H5Lget_name_by_idx(f, ".", H5_INDEX_NAME, H5_ITER_INC, i, link, sizeof link, H5P_DEFAULT) < 0) probe_file = false;
                else probe_file = std::string(link) == "host" || std::string(link) == "probes";
            }
            H5Fclose(f);
        }
        if (!probe_file && !force)
            throw CLI::ValidationError("--out " + name, "refusing to add probes to " +
                                                            (enclosing_run_folder(path).empty() ? std::string("an HDF5 file that is not a probe file")
                                                                                                : protected_file_reason(path)) +
                                                            " (give --force to write into it)");
    }
    const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
    if (!fs::is_directory(parent, ec)) throw Error(name + ": cannot write --out, folder " + parent.string() + " does not exist");
    const fs::path trial = parent / ("." + path.filename().string() + ".check." + std::to_string(::getpid()));
    const int fd = ::open(trial.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) throw Error(name + ": cannot write --out in folder " + parent.string() + " (" + std::strerror(errno) + ")");
    ::close(fd);
    ::unlink(trial.c_str());
}

void print_table(const std::vector<ex::ProbeResult>& results) {
    std::printf("%-8s %-10s %12s %10s %12s %14s  %s\n", "device", "direction", "copy size", "repeats", "best GB/s",
                "median GB/s", "name");
    for (const auto& r : results) {
        for (const auto& d : r.directions) {
            const double median_gbps = static_cast<double>(d.bytes_counted) / d.median_seconds / 1e9;
            std::printf("%-8s %-10s %12s %10d %12.2f %14.2f  %s\n", r.device.c_str(), d.name.c_str(),
                        ex::format_bytes(r.bytes).c_str(), r.repeats, d.gbps, median_gbps, r.device_name.c_str());
        }
        if (!r.pcie_link.empty())
            std::printf("%-8s PCIe link: %s (from %s)\n", r.device.c_str(), r.pcie_link.c_str(), r.pcie_source.c_str());
        for (const auto& s : r.sgemm)
            std::printf("%-8s sgemm %ld^3, %s: best %.1f GFLOP/s, median %.1f GFLOP/s\n", r.device.c_str(),
                        static_cast<long>(s.m), ex::sgemm_where(s).c_str(), s.flops_per_s / 1e9, s.median_flops_per_s / 1e9);
    }
    std::printf("GB/s = bytes counted / seconds / 1e9; memcpy and d2d count read+write (2 x copy size), "
                "h2d and d2h count the copy size.\n");
}

}  // namespace

void add_probe_command(CLI::App& app, int& exit_code) {
    auto* cmd = app.add_subcommand("probe", "Measure memory bandwidth (CPU memcpy; CUDA h2d, d2h, d2d) into a run file and the catalog");
    struct Options {
        std::string device = "all";
        std::string out = "probes.h5";
        std::string catalog = "tandem.db";
        bool force = false;
    };
    auto options = std::make_shared<Options>();
    cmd->add_option("--device", options->device, "cpu, cuda:N or all (every device found)")
        ->capture_default_str()
        ->check(CLI::Validator(device_form_error, "cpu|cuda:N|all", "device"));
    cmd->add_option("--out", options->out, "HDF5 run file to create or add /host and /probes/<device> to")
        ->capture_default_str();
    cmd->add_option("--catalog", options->catalog, "SQLite catalog to add one row per probed device to")
        ->capture_default_str();
    add_force_flag(cmd, options->force);
    cmd->callback([options, &exit_code] {
        // 1. Validate everything, open the catalog. Nothing else is touched yet.
        const std::vector<std::string> devices = ex::resolve_probe_devices(options->device);
        const fs::path out = fs::absolute(options->out);
        check_run_file_target(out, options->force);
        ex::Catalog catalog(options->catalog);

        // 2. Measure.
        std::vector<ex::ProbeResult> results;
        for (const auto& device : devices) {
            std::fprintf(stderr, "probing %s ...\n", device.c_str());
            if (device == "cpu") {
                results.push_back(ex::probe_cpu());
                // the float32 GEMM peak beside memcpy, at 1 thread and at every core
                const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
                std::vector<int> threads{1};
                if (cores > 1) threads.push_back(cores);
                ex::probe_cpu_sgemm(results.back(), threads);
            } else
                results.push_back(ex::probe_cuda(std::stoi(device.substr(5))));
        }
        print_table(results);

        // 3. Write the run file, then the catalog rows.
        const ex::HostInfo host = ex::collect_host_info();
        {
            ex::RunFileWriter writer(out);
            writer.write_host(host);
            for (const auto& r : results) writer.write_probe(r);
        }
        for (const auto& r : results) catalog.add_probe(r, out.string(), host.hostname);
        std::printf("wrote /host and /probes/{");
        for (std::size_t i = 0; i < results.size(); ++i) std::printf("%s%s", i ? "," : "", results[i].device.c_str());
        std::printf("} to %s; %zu row(s) added to catalog %s\n", out.string().c_str(), results.size(),
                    catalog.path().string().c_str());
        exit_code = kOk;
    });
}

}  // namespace tandem::cli
