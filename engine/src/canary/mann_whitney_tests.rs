//! Reference values computed independently with SciPy 1.17.1 (`/work/venv-judge`), from the
//! samples the bins stand for (every sample of a bucket at the bucket's bound):
//!
//! ```python
//! import numpy as np
//! from scipy.stats import mannwhitneyu, norm
//! def expand(bins):
//!     return np.repeat([b for b, _ in bins], [c for _, c in bins]).astype(float)
//! cases = {
//!  "heavy_ties": ([(5,10),(10,40),(25,30),(50,15),(100,5)], [(5,20),(10,50),(25,20),(50,8),(100,2)]),
//!  "unequal_sizes": ([(1,3),(2,7),(4,12),(8,6),(16,2)], [(1,40),(2,90),(4,110),(8,45),(16,15)]),
//!  "disjoint_bins": ([(3,4),(7,9),(11,5)], [(2,6),(5,8),(9,3),(13,2)]),
//!  "success_rates": ([(0,5),(100000,95)], [(0,10),(100000,990)]),
//!  "equal": ([(5,12),(10,30),(20,8)], [(5,12),(10,30),(20,8)]),
//!  "all_tied": ([(7,25)], [(7,40)]),
//!  "large": ([(1,400000),(2,300000),(4,200000),(8,100000)],
//!            [(1,410000),(2,300000),(4,195000),(8,95000)]),
//! }
//! for name, (c, b) in cases.items():
//!     x, y = expand(c), expand(b)
//!     for alt in ["greater", "less", "two-sided"]:
//!         r = mannwhitneyu(x, y, alternative=alt, method='asymptotic', use_continuity=True)
//!         print(name, alt, r.statistic, repr(r.pvalue))
//! for z in [-5.0, -1.0, 0.0, 0.5, 1.96, 2.5, 3.0, 4.2, 4.5, 6.0, 8.5, 10.0, 20.0, 37.0]:
//!     print(z, repr(norm.sf(z)))
//! ```

use super::*;

type Bins = &'static [(i64, u64)];

/// (name, canary bins, baseline bins, U₁, p greater, p less, p two-sided), from SciPy.
const CASES: &[(&str, Bins, Bins, f64, f64, f64, f64)] = &[
    (
        "heavy_ties",
        &[(5, 10), (10, 40), (25, 30), (50, 15), (100, 5)],
        &[(5, 20), (10, 50), (25, 20), (50, 8), (100, 2)],
        6205.0,
        0.0008964147227031505,
        0.999111448189151,
        0.001792829445406301,
    ),
    (
        "unequal_sizes",
        &[(1, 3), (2, 7), (4, 12), (8, 6), (16, 2)],
        &[(1, 40), (2, 90), (4, 110), (8, 45), (16, 15)],
        5035.0,
        0.13143735696048925,
        0.8690086263278296,
        0.2628747139209785,
    ),
    (
        "disjoint_bins",
        &[(3, 4), (7, 9), (11, 5)],
        &[(2, 6), (5, 8), (9, 3), (13, 2)],
        235.0,
        0.02489952779567604,
        0.9768461985182139,
        0.04979905559135208,
    ),
    (
        "success_rates",
        &[(0, 5), (100_000, 95)],
        &[(0, 10), (100_000, 990)],
        48000.0,
        0.9994951527493999,
        0.0005078022317809483,
        0.0010156044635618966,
    ),
    (
        "equal",
        &[(5, 12), (10, 30), (20, 8)],
        &[(5, 12), (10, 30), (20, 8)],
        1250.0,
        0.5015710141672344,
        0.5015710141672344,
        1.0,
    ),
    ("all_tied", &[(7, 25)], &[(7, 40)], 500.0, 1.0, 1.0, 1.0),
    (
        "large",
        &[(1, 400_000), (2, 300_000), (4, 200_000), (8, 100_000)],
        &[(1, 410_000), (2, 300_000), (4, 195_000), (8, 95_000)],
        506750000000.0,
        1.7698115550232113e-68,
        1.0,
        3.5396231100464226e-68,
    ),
];

fn close(actual: f64, expected: f64, what: &str) {
    let tolerance = 1e-9 * expected.abs().max(f64::MIN_POSITIVE);
    assert!(
        (actual - expected).abs() <= tolerance,
        "{what}: {actual:e} differs from SciPy's {expected:e}"
    );
}

#[test]
fn matches_scipy_on_binned_samples() {
    for &(name, canary, baseline, u1, greater, less, two_sided) in CASES {
        let (c, b) = (
            Histogram::from_pairs(canary),
            Histogram::from_pairs(baseline),
        );
        for (alt, p) in [
            (Alternative::Greater, greater),
            (Alternative::Less, less),
            (Alternative::TwoSided, two_sided),
        ] {
            let r = mann_whitney(&c, &b, alt).expect("samples on both sides");
            assert_eq!(r.u_canary, u1, "{name} {alt:?}: U");
            close(r.p_value, p, &format!("{name} {alt:?}: p"));
            assert_eq!(r.n_canary, c.total());
            assert_eq!(r.n_baseline, b.total());
        }
    }
}

#[test]
fn cliffs_delta_is_the_dominance_difference() {
    // Equal samples: no effect.
    let h = Histogram::from_pairs(&[(5, 12), (10, 30), (20, 8)]);
    let r = mann_whitney(&h, &h, Alternative::TwoSided).unwrap();
    assert_eq!(r.cliffs_delta, 0.0);
    // Success samples: the difference of the success rates (0.95 − 0.99).
    let r = mann_whitney(
        &Histogram::success(5, 95),
        &Histogram::success(10, 990),
        Alternative::Less,
    )
    .unwrap();
    close(r.cliffs_delta, -0.04, "delta of success rates");
    // Every canary sample above every baseline sample: δ = 1, and the reverse −1.
    let (lo, hi) = (
        Histogram::from_pairs(&[(1, 5), (2, 5)]),
        Histogram::from_pairs(&[(3, 7)]),
    );
    assert_eq!(
        mann_whitney(&hi, &lo, Alternative::Greater)
            .unwrap()
            .cliffs_delta,
        1.0
    );
    assert_eq!(
        mann_whitney(&lo, &hi, Alternative::Greater)
            .unwrap()
            .cliffs_delta,
        -1.0
    );
}

#[test]
fn no_samples_no_test() {
    let h = Histogram::from_pairs(&[(1, 3)]);
    let empty = Histogram::from_pairs(&[(1, 0)]);
    assert!(mann_whitney(&h, &empty, Alternative::TwoSided).is_none());
    assert!(mann_whitney(&Histogram::default(), &h, Alternative::TwoSided).is_none());
}

#[test]
fn the_largest_histograms_do_not_overflow() {
    let full = Histogram::from_pairs(&[(1, crate::canary::MAX_BIN_TOTAL)]);
    let split = Histogram::from_pairs(&[
        (0, crate::canary::MAX_BIN_TOTAL / 2),
        (2, crate::canary::MAX_BIN_TOTAL / 2),
    ]);
    let r = mann_whitney(&full, &split, Alternative::TwoSided).unwrap();
    assert_eq!(r.cliffs_delta, 0.0);
    assert!(r.p_value > 0.99, "{r:?}");
    let r = mann_whitney(&full, &full, Alternative::Greater).unwrap();
    assert_eq!(r.p_value, 1.0);
}

#[test]
fn normal_tail_matches_scipy() {
    // scipy.stats.norm.sf(z)
    for (z, sf) in [
        (-5.0, 0.9999997133484281),
        (-1.0, 0.8413447460685429),
        (0.0, 0.5),
        (0.5, 0.3085375387259869),
        (1.96, 0.024997895148220435),
        (2.5, 0.006209665325776132),
        (3.0, 0.0013498980316300933),
        (4.2, 1.334574901590631e-05),
        (4.5, 3.3976731247300535e-06),
        (6.0, 9.865876450376946e-10),
        (8.5, 9.47953482220325e-18),
        (10.0, 7.61985302416047e-24),
        (20.0, 2.7536241186061556e-89),
        (37.0, 5.7255712225239266e-300),
    ] {
        close(normal_sf(z), sf, &format!("sf({z})"));
    }
    assert_eq!(normal_sf(40.0), 0.0);
    assert_eq!(normal_sf(f64::NEG_INFINITY), 1.0);
}

#[test]
fn exp_is_accurate() {
    for x in [-700.0, -50.0, -1.0, -1e-3, 0.0, 0.3, 1.0, 10.0, 700.0] {
        let (mine, std) = (exp(x), f64::exp(x));
        assert!(
            ((mine - std) / std).abs() < 1e-14,
            "exp({x}): {mine:e} vs {std:e}"
        );
    }
}
