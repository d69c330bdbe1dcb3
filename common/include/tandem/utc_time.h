#pragma once
// The one clock text of records (run files, the catalog, probes, journals): UTC, ISO-8601.
#include <string>

namespace tandem {

// Current UTC time as ISO-8601 with a Z suffix ("2026-11-29T09:30:00Z").
std::string utc_timestamp_now();

}  // namespace tandem
