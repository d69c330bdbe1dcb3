// Host facts from /proc, /sys, /etc/os-release and uname(2).
#include "tandem/measure/host_info.h"

#include "tandem/version.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>

namespace tandem::experiments {
namespace {

std::string trim(std::string s) {
    const char* ws = " \t\r\n\"";
    s.erase(0, s.find_first_not_of(ws));
    auto end = s.find_last_not_of(ws);
    s.erase(end == std::string::npos ? 0 : end + 1);
    return s;
}

std::string read_first_line(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return trim(line);
}

// sysfs cache sizes look like "32K", "1024K", "36M".
std::int64_t parse_cache_size(const std::string& text) {
    if (text.empty()) return 0;
    std::size_t used = 0;
    long long value = 0;
    try {
        value = std::stoll(text, &used);
    } catch (...) {
        return 0;
    }
    std::string unit = text.substr(used);
    if (unit == "K") return value * 1024;
    if (unit == "M") return value * 1024 * 1024;
    if (unit == "G") return value * 1024LL * 1024 * 1024;
    return value;
}

std::int64_t meminfo_bytes(const std::string& key) {
    std::ifstream in("/proc/meminfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(key + ":", 0) == 0) {
            std::istringstream fields(line.substr(key.size() + 1));
            long long kib = 0;
            fields >> kib;
            return kib * 1024;
        }
    }
    return 0;
}

}  // namespace

std::int64_t last_level_cache_bytes() {
    std::int64_t largest = 0;
    int largest_level = -1;
    std::error_code ec;
    const std::filesystem::path cache_dir("/sys/devices/system/cpu/cpu0/cache");
    for (const auto& entry : std::filesystem::directory_iterator(cache_dir, ec)) {
        if (entry.path().filename().string().rfind("index", 0) != 0) continue;
        const std::string type = read_first_line(entry.path() / "type");
        if (type == "Instruction") continue;
        int level = 0;
        try {
            level = std::stoi(read_first_line(entry.path() / "level"));
        } catch (...) {
            continue;
        }
        const std::int64_t size = parse_cache_size(read_first_line(entry.path() / "size"));
        if (level > largest_level || (level == largest_level && size > largest)) {
            largest_level = level;
            largest = size;
        }
    }
    return largest;
}

HostInfo collect_host_info() {
    HostInfo info;
    {
        std::ifstream in("/proc/cpuinfo");
        std::string line;
        std::set<std::pair<std::string, std::string>> cores;
        std::string package;
        while (std::getline(in, line)) {
            const auto colon = line.find(':');
            if (colon == std::string::npos) continue;
            const std::string key = trim(line.substr(0, colon));
            const std::string value = trim(line.substr(colon + 1));
            if (key == "model name" && info.cpu_model.empty()) info.cpu_model = value;
            if (key == "physical id") package = value;
            if (key == "core id") cores.emplace(package, value);
        }
        info.physical_cores = static_cast<std::int64_t>(cores.size());
    }
    info.logical_cores = std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
    info.memory_total_bytes = meminfo_bytes("MemTotal");
    info.memory_available_bytes = meminfo_bytes("MemAvailable");
    info.llc_bytes = last_level_cache_bytes();
    {
        std::ifstream in("/etc/os-release");
        std::string line;
        while (std::getline(in, line))
            if (line.rfind("PRETTY_NAME=", 0) == 0) info.os = trim(line.substr(12));
    }
    utsname names{};
    if (uname(&names) == 0) {
        info.kernel = std::string(names.sysname) + " " + names.release;
        info.machine = names.machine;
        info.hostname = names.nodename;
    }
    info.tandem_version = TANDEM_VERSION;
    info.built_with_cuda = TANDEM_HAVE_CUDA != 0;
    return info;
}

std::string format_bytes(std::int64_t bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double value = static_cast<double>(bytes);
    int unit = 0;
    while (value >= 1024 && unit < 4) {
        value /= 1024;
        ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
    return text;
}

}  // namespace tandem::experiments
