// CUDA bandwidth probe (label gpu). Skips with a message when built without CUDA or no device.
#include "tandem/measure/probe.h"

#include <gtest/gtest.h>

namespace ex = tandem::experiments;

TEST(ProbeGpu, HostDeviceAndDeviceDeviceBandwidthArePlausible) {
    if (!ex::built_with_cuda()) GTEST_SKIP() << "built without CUDA: the CUDA probe cannot run";
    const int devices = ex::cuda_device_count();
    if (devices == 0) GTEST_SKIP() << "no CUDA device on this machine";
    const auto env = ex::cuda_environment();
    EXPECT_FALSE(env.driver_version.empty());
    EXPECT_EQ(static_cast<int>(env.devices.size()), devices);
    for (int i = 0; i < devices; ++i) {
        const ex::ProbeResult r = ex::probe_cuda(i);
        EXPECT_EQ(r.device, "cuda:" + std::to_string(i));
        EXPECT_EQ(r.bytes, 256000000);
        EXPECT_EQ(r.repeats, 20);
        ASSERT_EQ(r.directions.size(), 3u);
        for (const auto& d : r.directions) {
            EXPECT_GT(d.best_seconds, 0);
            EXPECT_LE(d.best_seconds, d.median_seconds);
            std::printf("%s %s: %.2f GB/s best, %.2f GB/s median%s\n", r.device.c_str(), d.name.c_str(), d.gbps,
                        static_cast<double>(d.bytes_counted) / d.median_seconds / 1e9,
                        r.pcie_link.empty() ? "" : (", PCIe " + r.pcie_link + " via " + r.pcie_source).c_str());
        }
        // Through PCIe (Gen3 x4 .. Gen6 x16) or NVLink-C2C: 1..1000 GB/s; on-device copies: 50..20000 GB/s.
        EXPECT_GE(r.direction("h2d")->gbps, 1.0);
        EXPECT_LE(r.direction("h2d")->gbps, 1000.0);
        EXPECT_GE(r.direction("d2h")->gbps, 1.0);
        EXPECT_LE(r.direction("d2h")->gbps, 1000.0);
        EXPECT_GE(r.direction("d2d")->gbps, 50.0);
        EXPECT_LE(r.direction("d2d")->gbps, 20000.0);
        EXPECT_EQ(r.direction("d2d")->bytes_counted, 2 * r.bytes);
    }
}
