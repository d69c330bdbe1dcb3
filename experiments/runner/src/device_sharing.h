#pragma once
// Legs that use one GPU (docs/cli.md "Legs on one GPU"): by default the runner starts one leg at a time
// per GPU, so each leg's timings are its own; with --share-devices (RunnerOptions::share_devices) they run
// at once and their timing rows say which legs shared the device. Also the CPU threads each leg gets.
// Private to tandem_runner.
#include "tandem/runner/runner_options.h"

#include <map>
#include <string>
#include <vector>

namespace tandem::experiments::run_steps {

// The devices a leg uses: its ranks' devices, else its one device.
std::vector<std::string> devices_of(const LegPlan& plan);

// GPU -> the local legs that use it, for every GPU that two or more local legs use (Slurm legs are
// placed by the cluster's scheduler and never counted).
std::map<std::string, std::vector<std::string>> shared_gpus(const std::vector<LegPlan>& plans);

// The line `tandem run` says at the start for each shared GPU: who shares it and whether they run at once.
std::string sharing_line(const std::string& device, const std::vector<std::string>& legs, bool share_devices);

// The legs that run at the same time as `leg` on one of its GPUs (empty unless share_devices).
std::vector<std::string> device_shared_with(const LegPlan& leg, const std::vector<LegPlan>& plans, bool share_devices);

// CPU threads per leg (recorded in legs.json: a resumed leg uses the same count, which keeps a CPU leg's
// trajectory bit-identical). `cpu_threads` is --threads (0: every core). CPU legs that run at once (all,
// or at most max_concurrent) split it evenly, as before GPU legs got threads of their own. A GPU leg's
// host threads feed its device and run its data pipeline: it gets an even share of --threads among the
// legs that run beside it (the CPU legs and the GPU legs that run at once: one per GPU, or every GPU leg
// with share_devices); a CPU leg's share never depends on the GPU legs.
std::vector<int> threads_per_leg(const std::vector<LegPlan>& plans, int cpu_threads, int max_concurrent,
                                 bool share_devices);

}  // namespace tandem::experiments::run_steps
