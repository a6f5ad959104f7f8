//! The Mann-Whitney U test on binned samples (issue 20): does the canary's distribution sit
//! higher or lower than the baseline's?
//!
//! # The statistic
//!
//! The canary's samples are `x` (`n₁` of them), the baseline's `y` (`n₂`). All samples of one
//! bucket are tied at the bucket's bound; tied samples get the mean of the ranks they span.
//! `U₁ = R₁ − n₁(n₁+1)/2` where `R₁` is the canary's rank sum; equivalently
//! `U₁ = Σ over canary samples of (baseline samples below + ½ · baseline samples equal)`,
//! which is how it is computed here, exactly, as the integer `2·U₁` in `u128`.
//!
//! # The p-value
//!
//! The normal approximation with tie correction and continuity correction, exactly as
//! `scipy.stats.mannwhitneyu(x, y, alternative=..., method='asymptotic', use_continuity=True)`
//! (SciPy ≥ 1.7) computes it:
//!
//! - `μ = n₁n₂/2`, `n = n₁ + n₂`, `σ = √(n₁n₂/12 · ((n+1) − Σ(t³−t)/(n(n−1))))` where `t` runs
//!   over the sizes of the groups of tied samples (here: the merged buckets);
//! - `U = U₁` for `greater` (the canary is stochastically larger), `U₂ = n₁n₂ − U₁` for
//!   `less`, `max(U₁, U₂)` for `two-sided`;
//! - `z = (U − μ − ½) / σ` (the continuity correction always subtracts ½ because the upper
//!   tail is used), `p = sf(z)`, doubled for `two-sided`, clipped to `[0, 1]`. When every
//!   sample is tied (`σ = 0`) `p = 1`, as SciPy's `−∞` z-score gives.
//!
//! # Effect size
//!
//! Cliff's delta `δ = (U₁ − U₂)/(n₁n₂) = P(x > y) − P(x < y)` ∈ [−1, 1]: positive when the
//! canary tends to be higher. For success samples (two buckets) it is exactly the difference
//! of the success rates as a fraction; for latency it is rank-based, so it does not depend on
//! the bucket bounds, only on their order.
//!
//! # Determinism
//!
//! The verdict is replicated: every node must compute the same bits. The integer sums are
//! exact; the floating-point part uses only `+ − × ÷` and `sqrt` (correctly rounded by IEEE
//! 754, no fused multiply-add) in a fixed order, with this module's own `exp` and `erfc`
//! instead of the platform's libm, whose last bits may differ between systems.

use std::collections::BTreeMap;

use super::samples::Histogram;

/// Which difference the test looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alternative {
    /// The canary's values are larger (SciPy `greater`).
    Greater,
    /// The canary's values are smaller (SciPy `less`).
    Less,
    /// Either (SciPy `two-sided`).
    TwoSided,
}

/// The result of the test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MannWhitney {
    /// Canary samples.
    pub n_canary: u64,
    /// Baseline samples.
    pub n_baseline: u64,
    /// `U₁`, the canary's statistic (what SciPy returns as `statistic`).
    pub u_canary: f64,
    /// The standardized statistic of the chosen alternative, continuity-corrected.
    pub z: f64,
    /// The p-value.
    pub p_value: f64,
    /// Cliff's delta, `P(canary > baseline) − P(canary < baseline)`.
    pub cliffs_delta: f64,
}

/// Runs the test on `canary` against `baseline`. `None` when either has no samples. The
/// histograms should be validated ([`Histogram::validate`]); buckets are merged by bound, so
/// order and repeated bounds do not matter, and counts beyond the validated limits saturate
/// rather than overflow.
pub fn mann_whitney(
    canary: &Histogram,
    baseline: &Histogram,
    alternative: Alternative,
) -> Option<MannWhitney> {
    // Bound → (canary count, baseline count).
    let mut merged: BTreeMap<i64, (u128, u128)> = BTreeMap::new();
    for b in &canary.bins {
        merged.entry(b.le).or_default().0 += u128::from(b.count);
    }
    for b in &baseline.bins {
        merged.entry(b.le).or_default().1 += u128::from(b.count);
    }
    let mut n1: u128 = 0;
    let mut n2: u128 = 0;
    // 2·U₁ = Σ c · (2·(baseline below) + b), and Σ (t³ − t).
    let mut two_u1: u128 = 0;
    let mut tie_term: u128 = 0;
    for &(c, b) in merged.values() {
        two_u1 = two_u1.saturating_add(c.saturating_mul(n2.saturating_mul(2).saturating_add(b)));
        let t = c.saturating_add(b);
        tie_term = tie_term.saturating_add(t.saturating_mul(t).saturating_mul(t).saturating_sub(t));
        n1 = n1.saturating_add(c);
        n2 = n2.saturating_add(b);
    }
    if n1 == 0 || n2 == 0 {
        return None;
    }
    let n1n2 = n1.saturating_mul(n2);
    // In range: 2·U₁ ≤ 2·n₁n₂, both far below 2^127 for validated histograms.
    let delta_num =
        i128::try_from(two_u1).unwrap_or(i128::MAX) - i128::try_from(n1n2).unwrap_or(i128::MAX);
    let (f1, f2) = (n1 as f64, n2 as f64);
    let u1 = two_u1 as f64 / 2.0;
    let u2 = f1 * f2 - u1;
    let (u, factor) = match alternative {
        Alternative::Greater => (u1, 1.0),
        Alternative::Less => (u2, 1.0),
        Alternative::TwoSided => (if u1 >= u2 { u1 } else { u2 }, 2.0),
    };
    let mu = f1 * f2 / 2.0;
    let n = f1 + f2;
    let var = f1 * f2 / 12.0 * ((n + 1.0) - tie_term as f64 / (n * (n - 1.0)));
    let numerator = u - mu - 0.5;
    let (z, sf) = if var > 0.0 {
        let z = numerator / var.sqrt();
        (z, normal_sf(z))
    } else {
        // Every sample tied: U = μ, SciPy's z is −∞ and its p-value 1.
        (f64::NEG_INFINITY, 1.0)
    };
    let p = (factor * sf).clamp(0.0, 1.0);
    Some(MannWhitney {
        n_canary: u64::try_from(n1).unwrap_or(u64::MAX),
        n_baseline: u64::try_from(n2).unwrap_or(u64::MAX),
        u_canary: u1,
        z,
        p_value: p,
        cliffs_delta: delta_num as f64 / n1n2 as f64,
    })
}

/// The upper tail of the standard normal distribution, `P(Z > z) = erfc(z/√2)/2`.
pub fn normal_sf(z: f64) -> f64 {
    if z.is_nan() {
        return f64::NAN;
    }
    let x = z * std::f64::consts::FRAC_1_SQRT_2;
    if x >= 0.0 {
        0.5 * erfc_nonneg(x)
    } else {
        1.0 - 0.5 * erfc_nonneg(-x)
    }
}

/// `erfc(x)` for `x ≥ 0`: below 3 as `1 − erf(x)` with erf's series of positive terms
/// (`erf x = 2/√π · e^(−x²) · Σ 2ⁿ x^(2n+1) / (1·3···(2n+1))`), from 3 on with the continued
/// fraction `erfc x = e^(−x²)/√π · 1/(x + ½/(x + 1/(x + 3/2/(x + …))))`, evaluated bottom-up
/// from a fixed depth. Relative error below 1e-13 (checked against SciPy in the tests).
fn erfc_nonneg(x: f64) -> f64 {
    const TWO_OVER_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;
    let x2 = x * x;
    if x < 3.0 {
        let mut term = x;
        let mut sum = x;
        let mut k = 0.0;
        // Terms fall once 2x²/(2k+3) < 1; 200 terms reach 1e-17 for x < 3.
        for _ in 0..200 {
            k += 1.0;
            term *= 2.0 * x2 / (2.0 * k + 1.0);
            sum += term;
            if term < sum * 1e-17 {
                break;
            }
        }
        return 1.0 - TWO_OVER_SQRT_PI * exp(-x2) * sum;
    }
    if x > 27.0 {
        return 0.0;
    }
    let mut t = x;
    let mut k = 80.0_f64;
    while k >= 1.0 {
        t = x + (k / 2.0) / t;
        k -= 1.0;
    }
    exp(-x2) / (t * std::f64::consts::PI.sqrt())
}

/// `eˣ` with only IEEE basic operations: `x = k·ln2 + r`, `|r| ≤ ln2/2`, `eʳ` by its Taylor
/// series to degree 17, scaled by `2ᵏ` built from the exponent bits.
fn exp(x: f64) -> f64 {
    // fdlibm's split of ln 2: the high part has trailing zero bits, so k·LN2_HI is exact.
    const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
    const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
    if x.is_nan() {
        return x;
    }
    if x < -745.0 {
        return 0.0;
    }
    if x > 709.0 {
        return f64::INFINITY;
    }
    let k = (x * std::f64::consts::LOG2_E).round();
    let r = (x - k * LN2_HI) - k * LN2_LO;
    let mut term = 1.0;
    let mut sum = 1.0;
    for i in 1..=17 {
        term *= r / f64::from(i);
        sum += term;
    }
    // |k| ≤ 1075 here (checked bounds above).
    let k = k as i32;
    scale_pow2(sum, k)
}

/// `v · 2ᵏ`, exactly (up to subnormal rounding), for `|k| ≤ 1100`.
fn scale_pow2(mut v: f64, mut k: i32) -> f64 {
    let pow2 = |e: i32| f64::from_bits(((e + 1023) as u64) << 52);
    while k < -1000 {
        v *= pow2(-1000);
        k += 1000;
    }
    while k > 1000 {
        v *= pow2(1000);
        k -= 1000;
    }
    v * pow2(k)
}

#[cfg(test)]
#[path = "mann_whitney_tests.rs"]
mod tests;
