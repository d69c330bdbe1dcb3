#include "device_sharing.h"

#include "tandem/join.h"

#include <algorithm>
#include <set>
#include <thread>

namespace tandem::experiments::run_steps {

std::vector<std::string> devices_of(const LegPlan& plan) {
    return plan.devices.empty() ? std::vector<std::string>{plan.device} : plan.devices;
}

namespace {
bool local_gpu_leg(const LegPlan& p) { return p.executor != "slurm" && p.device != "cpu"; }

}  // namespace

std::map<std::string, std::vector<std::string>> shared_gpus(const std::vector<LegPlan>& plans) {
    std::map<std::string, std::vector<std::string>> users;
    for (const auto& p : plans) {
        if (!local_gpu_leg(p)) continue;
        for (const auto& d : devices_of(p))
            if (d != "cpu") users[d].push_back(p.name);
    }
    for (auto it = users.begin(); it != users.end();) it = it->second.size() < 2 ? users.erase(it) : std::next(it);
    return users;
}

std::string sharing_line(const std::string& device, const std::vector<std::string>& legs, bool share_devices) {
    if (share_devices)
        return device + " is shared by legs " + join(legs, ", ") + ": they run at the same time (--share-devices); "
               "their timing rows say so, since each slows the other";
    return device + " is used by legs " + join(legs, ", ") + ": they run one after the other, so each leg's timing is "
           "its own (--share-devices runs them at the same time)";
}

std::vector<std::string> device_shared_with(const LegPlan& leg, const std::vector<LegPlan>& plans, bool share_devices) {
    std::vector<std::string> out;
    if (!share_devices || !local_gpu_leg(leg)) return out;
    const auto mine = devices_of(leg);
    for (const auto& p : plans) {
        if (p.name == leg.name || !local_gpu_leg(p)) continue;
        for (const auto& d : devices_of(p))
            if (d != "cpu" && std::find(mine.begin(), mine.end(), d) != mine.end()) {
                out.push_back(p.name);
                break;
            }
    }
    return out;
}

std::vector<int> threads_per_leg(const std::vector<LegPlan>& plans, int cpu_threads, int max_concurrent,
                                 bool share_devices) {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    const int total = cpu_threads > 0 ? cpu_threads : static_cast<int>(hw);
    int cpu_legs = 0, gpu_legs = 0;
    std::set<std::string> gpus;
    for (const auto& p : plans) {
        if (p.device == "cpu") {
            ++cpu_legs;
            continue;
        }
        ++gpu_legs;
        gpus.insert(p.device);
    }
    // Slurm legs count as if they ran here: the same count under either executor gives bit-identical
    // CPU trajectories (docs/cluster.md); a Slurm CPU leg asks its job for that many CPUs.
    int cpu_at_once = cpu_legs, gpu_at_once = share_devices ? gpu_legs : static_cast<int>(gpus.size());
    if (max_concurrent > 0) {
        cpu_at_once = std::min(cpu_at_once, max_concurrent);
        gpu_at_once = std::min(gpu_at_once, max_concurrent);
    }
    const int cpu_share = std::max(1, total / std::max(1, cpu_at_once));
    const int gpu_share = std::max(1, total / std::max(1, cpu_at_once + gpu_at_once));
    std::vector<int> out;
    for (const auto& p : plans) out.push_back(p.device == "cpu" ? cpu_share : gpu_share);
    return out;
}

}  // namespace tandem::experiments::run_steps
