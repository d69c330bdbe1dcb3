#pragma once
// Turning a recorded series into the points a chart draws. Display transforms only (no statistics
// about the run): the min/max envelope that keeps every recorded point visible when more points
// than pixel columns fall into the view, the optional display smoothing, and the nearest point for
// the hover read-out.
#include "tandem/views/run_snapshot.h"

#include <QList>
#include <QPointF>

#include <optional>

namespace tandem::views {

// The points of `series` with update in [x_min, x_max] (plus one neighbour on each side so the
// line reaches the edges). When more than 2 * columns points fall inside, each of the `columns`
// equal-width x buckets contributes its minimum and its maximum point (in update order), so every
// recorded value still lies on the drawn line: no point is dropped from the picture.
QList<QPointF> envelope_points(const Series& series, double x_min, double x_max, int columns);

// TensorBoard-style exponential moving average for display (weight in [0, 1); 0 = unchanged),
// debiased like TensorBoard so the first points are not pulled towards zero.
Series smoothed_for_display(const Series& series, double weight);

// The recorded point whose update is nearest to `update` (nullopt for an empty series).
std::optional<SeriesPoint> nearest_point(const Series& series, double update);

// The value recorded at exactly `update` (nullopt when the series has no point there).
std::optional<double> value_at(const Series& series, double update);

// Of every update recorded in any of `series`, the one nearest to `update` (nullopt when all are
// empty): the update the hover read-out shows, so every leg is read at the same update.
std::optional<double> nearest_update(const std::vector<const Series*>& series, double update);

}  // namespace tandem::views
