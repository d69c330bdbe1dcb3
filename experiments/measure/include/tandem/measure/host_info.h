#pragma once
// Facts about the machine: written to /host of every run file and shown by `tandem doctor`.
// Read from /proc, /sys, /etc/os-release and uname(2); fields that cannot be read stay empty / 0.
#include <cstdint>
#include <string>

namespace tandem::experiments {

struct HostInfo {
    std::string cpu_model;              // /proc/cpuinfo "model name"
    std::int64_t logical_cores = 0;     // online logical CPUs
    std::int64_t physical_cores = 0;    // distinct (package, core id) pairs; 0 when unknown
    std::int64_t memory_total_bytes = 0;      // /proc/meminfo MemTotal
    std::int64_t memory_available_bytes = 0;  // /proc/meminfo MemAvailable
    std::int64_t llc_bytes = 0;         // largest CPU cache (last level) from sysfs; 0 when unknown
    std::string os;                     // /etc/os-release PRETTY_NAME
    std::string kernel;                 // uname sysname + release
    std::string machine;                // uname machine ("x86_64")
    std::string hostname;
    std::string tandem_version;         // TANDEM_VERSION
    bool built_with_cuda = false;       // TANDEM_HAVE_CUDA at build time
};

HostInfo collect_host_info();

// The last-level cache size in bytes (largest cache under /sys/devices/system/cpu/cpu0/cache);
// 0 when sysfs does not say.
std::int64_t last_level_cache_bytes();

// "12.3 GiB", "512 MiB" — for tables.
std::string format_bytes(std::int64_t bytes);

}  // namespace tandem::experiments
