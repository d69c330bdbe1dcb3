// CPU probe plausibility, host facts against an independent source, --device parsing.
#include "tandem/error.h"
#include "tandem/measure/host_info.h"
#include "tandem/measure/probe.h"

#include <gtest/gtest.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace ex = tandem::experiments;

// A /proc/meminfo field read here independently of host_info.cpp (kB); 0 when absent.
static std::int64_t meminfo_from_proc(const std::string& field) {
    std::FILE* f = std::fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char key[64];
    long long kb = 0;
    std::int64_t out = 0;
    while (std::fscanf(f, "%63s %lld kB", key, &kb) == 2)
        if (std::string(key) == field) out = kb * 1024;
    std::fclose(f);
    return out;
}
static std::int64_t mem_total_from_proc() { return meminfo_from_proc("MemTotal:"); }

TEST(Probe, BufferRuleIsBeyondTheCacheAndCappedByAvailableMemory) {
    constexpr std::int64_t MiB = 1LL << 20, GiB = 1LL << 30;
    // Plenty of memory: max(256 MiB, 8 x LLC).
    EXPECT_EQ(ex::cpu_probe_buffer(32 * MiB, 64 * GiB).bytes, 256 * MiB);
    EXPECT_EQ(ex::cpu_probe_buffer(480 * MiB, 64 * GiB).bytes, 3840 * MiB);  // the 3.8 GiB of a 480 MiB LLC
    // Little memory: each buffer at most MemAvailable / 8 (both: a quarter), named in the rule.
    const ex::CpuProbeBuffer capped = ex::cpu_probe_buffer(480 * MiB, 8 * GiB);
    EXPECT_EQ(capped.bytes, 1 * GiB);
    EXPECT_NE(capped.rule.find("capped at MemAvailable"), std::string::npos) << capped.rule;
    EXPECT_EQ(ex::cpu_probe_buffer(32 * MiB, 1 * GiB).bytes, 128 * MiB);
    // Never below 16 MiB; unknown memory (0): no cap.
    EXPECT_EQ(ex::cpu_probe_buffer(32 * MiB, 64 * MiB).bytes, 16 * MiB);
    EXPECT_EQ(ex::cpu_probe_buffer(480 * MiB, 0).bytes, 3840 * MiB);
    EXPECT_EQ(ex::cpu_probe_buffer(480 * MiB, 0).rule.find("capped"), std::string::npos);
}

TEST(Probe, CpuMemcpyIsPositiveAndPlausible) {
    const ex::ProbeResult r = ex::probe_cpu();
    EXPECT_EQ(r.device, "cpu");
    // The default size is the rule's applied to the MemAvailable the probe itself read (recorded beside the
    // size: MemAvailable moves between any two reads on a busy machine), and the record says which size was used.
    ASSERT_GT(r.memory_available_bytes, 0) << "the rule's MemAvailable is not recorded";
    EXPECT_LE(r.memory_available_bytes, mem_total_from_proc()) << "recorded MemAvailable exceeds MemTotal";
    const ex::CpuProbeBuffer rule = ex::cpu_probe_buffer(ex::last_level_cache_bytes(), r.memory_available_bytes);
    EXPECT_EQ(r.bytes, rule.bytes);
    EXPECT_NE(r.method.find(ex::format_bytes(r.bytes) + " each (" + rule.rule + ")"), std::string::npos) << r.method;
    const std::int64_t want = std::max<std::int64_t>(256LL << 20, 8 * ex::last_level_cache_bytes());
    if (r.memory_available_bytes / 8 >= want) {
        EXPECT_GE(r.bytes, want / 4096 * 4096) << "buffer is not well beyond the last-level cache";
    } else {
        // Two buffers take at most a quarter of the memory that was available.
        EXPECT_LE(2 * r.bytes, r.memory_available_bytes / 4) << r.method;
        EXPECT_NE(r.method.find("capped at MemAvailable"), std::string::npos) << r.method;
    }
    EXPECT_EQ(r.repeats, 10);
    ASSERT_EQ(r.directions.size(), 1u);
    const auto& d = r.directions[0];
    EXPECT_EQ(d.name, "memcpy");
    EXPECT_EQ(d.bytes_counted, 2 * r.bytes) << "read + write are both counted";
    EXPECT_GT(d.best_seconds, 0);
    EXPECT_LE(d.best_seconds, d.median_seconds);
    EXPECT_NEAR(d.gbps, static_cast<double>(d.bytes_counted) / d.best_seconds / 1e9, 1e-9 * d.gbps);
    EXPECT_GE(d.gbps, 0.5) << "implausibly slow memcpy";
    EXPECT_LE(d.gbps, 500.0) << "implausibly fast memcpy (was the copy optimised away?)";
    EXPECT_FALSE(r.timestamp.empty());
    std::printf("CPU memcpy: %.2f GB/s best, %.2f GB/s median (%lld bytes, read+write counted)\n", d.gbps,
                static_cast<double>(d.bytes_counted) / d.median_seconds / 1e9, static_cast<long long>(r.bytes));
}

TEST(Probe, SmallExplicitBufferStillCountsReadAndWrite) {
    ex::CpuProbeOptions o;
    o.bytes = 1 << 20;
    o.repeats = 3;
    o.warmup = 1;
    const ex::ProbeResult r = ex::probe_cpu(o);
    EXPECT_EQ(r.bytes, 1 << 20);
    EXPECT_EQ(r.directions[0].bytes_counted, 2 << 20);
    EXPECT_THROW(ex::probe_cpu({1 << 20, 0, 0}), tandem::Error);
}

TEST(HostInfo, AgreesWithSysinfo) {
    const ex::HostInfo h = ex::collect_host_info();
    struct sysinfo s {};
    ASSERT_EQ(sysinfo(&s), 0);
    const double total = static_cast<double>(s.totalram) * s.mem_unit;
    EXPECT_NEAR(static_cast<double>(h.memory_total_bytes), total, 0.01 * total);
    EXPECT_FALSE(h.cpu_model.empty());
    EXPECT_GE(h.logical_cores, 1);
    EXPECT_EQ(h.logical_cores, get_nprocs());
    EXPECT_FALSE(h.tandem_version.empty());
    EXPECT_FALSE(h.kernel.empty());
}

TEST(Probe, DeviceValuesAreResolvedOrRejectedByName) {
    EXPECT_EQ(ex::resolve_probe_devices("cpu"), std::vector<std::string>{"cpu"});
    const auto all = ex::resolve_probe_devices("all");
    ASSERT_FALSE(all.empty());
    EXPECT_EQ(all[0], "cpu");
    EXPECT_EQ(all.size(), 1u + static_cast<std::size_t>(ex::cuda_device_count()));
    for (const std::string& bad : std::vector<std::string>{"gpu", "cuda:", "cuda:x", "cuda:-1", "CPU", ""}) {
        try {
            ex::resolve_probe_devices(bad);
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const tandem::Error& e) {
            EXPECT_NE(std::string(e.what()).find("'" + bad + "'"), std::string::npos) << e.what();
        }
    }
    const std::string absent = "cuda:" + std::to_string(ex::cuda_device_count());
    try {
        ex::resolve_probe_devices(absent);
        ADD_FAILURE() << "accepted " << absent;
    } catch (const tandem::Error& e) {
        EXPECT_NE(std::string(e.what()).find(absent), std::string::npos) << e.what();
    }
}
