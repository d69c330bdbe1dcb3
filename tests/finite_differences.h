#pragma once
// The float64 yardsticks the op tests share (tests/engine/test_backend_ops.cpp, test_ops_gradcheck.cpp):
// central finite differences, the relative error they are judged by, the float32 rounding of an
// input, and the normal draws the op tests feed (tests/ is on every suite's include path).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <random>
#include <vector>

namespace tandem::test {

using Vec = std::vector<double>;

// max |got - want| / max |want| (the absolute error when want is all zeros)
inline double rel_err(const Vec& got, const Vec& want) {
    double d = 0, m = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        d = std::max(d, std::abs(got[i] - want[i]));
        m = std::max(m, std::abs(want[i]));
    }
    return m == 0 ? d : d / m;
}

inline double dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

// n draws of N(0, scale^2) from rng, in order (float or double: the distribution of that type).
template <typename T, class Rng>
std::vector<T> normal_draws(size_t n, Rng& rng, T scale) {
    std::normal_distribution<T> d(T(0), scale);
    std::vector<T> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// What a float32 op sees: the inputs rounded to float (the float64 reference computes on the same values).
inline Vec rounded(Vec v) {
    for (auto& x : v) x = double(float(x));
    return v;
}

// What a finite-difference check allows, relative to the largest gradient entry: h = 1e-6 in double
// leaves ~1e-9 (truncation ~h^2*f''', rounding ~1e-16/h on O(1) quantities), and any wrong term (a
// missing factor, a sign, a transposed index) exceeds 1e-6 by orders of magnitude.
inline constexpr double kFdTol = 1e-6;

// Central-difference gradient of f with respect to every entry of x (float64).
inline Vec numeric_grad(Vec& x, const std::function<double()>& f, double h = 1e-6) {
    Vec g(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const double keep = x[i];
        x[i] = keep + h;
        const double fp = f();
        x[i] = keep - h;
        const double fm = f();
        x[i] = keep;
        g[i] = (fp - fm) / (2 * h);
    }
    return g;
}

}  // namespace tandem::test
