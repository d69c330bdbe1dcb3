// CPU probe plausibility, host facts against an independent source, --device parsing.
#include "tandem/error.h"
#include "tandem/store/host_info.h"
#include "tandem/store/probe.h"

#include <gtest/gtest.h>
#include <sys/sysinfo.h>

#include <cmath>

namespace ex = tandem::experiments;

TEST(Probe, CpuMemcpyIsPositiveAndPlausible) {
    const ex::ProbeResult r = ex::probe_cpu();
    EXPECT_EQ(r.device, "cpu");
    EXPECT_GE(r.bytes, 256LL << 20);
    EXPECT_GE(r.bytes, 8 * ex::last_level_cache_bytes()) << "buffer is not well beyond the last-level cache";
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
