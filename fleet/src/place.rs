//! Which models an edge keeps warm under its memory budget (EPARA's service placement): chosen
//! greedily from the recent request history, so that the memory goes to the models asked for
//! most per byte. Pure; the edge service (`lop_runtime::edge`) measures the demand, loads and
//! unloads the replicas, and reports `warm` so that routing avoids a cold server.
//!
//! For one server the utility (requests it can serve from warm models) is additive, so the
//! submodular greedy of EPARA is the knapsack greedy by demand per byte; taking the better of
//! that and the single most demanded model that fits keeps it within half of the optimum.
//! Models with no recent demand fill what memory is left in configuration order (preloading).

/// One model an edge can serve, as placement sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlaceCandidate {
    /// Bytes its warm replicas take.
    pub bytes: u64,
    /// Recent demand (requests per second, decayed).
    pub demand: f64,
    /// Whether it is warm now.
    pub warm: bool,
    /// Whether it must stay warm whatever the budget (inferences in flight on it).
    pub pinned: bool,
}

/// A warm model's demand counts this many times when it competes for memory, so that a model is
/// not unloaded for one asked for only a little more (loading costs seconds).
pub const WARM_BONUS: f64 = 1.5;

/// Demand below this (requests per second) counts as none: the model is only preloaded.
pub const NO_DEMAND: f64 = 1e-3;

/// The models to keep warm (one flag per candidate, in order) within `budget` bytes. Pinned
/// models stay warm even past the budget; a model larger than the whole budget never is.
pub fn place(models: &[PlaceCandidate], budget: u64) -> Vec<bool> {
    let value = |m: &PlaceCandidate| if m.warm { m.demand * WARM_BONUS } else { m.demand };
    let pinned: Vec<bool> = models.iter().map(|m| m.pinned).collect();
    let used_pinned: u64 = models.iter().filter(|m| m.pinned).map(|m| m.bytes).sum();
    let wanted: Vec<usize> = (0..models.len()).filter(|&i| !models[i].pinned && models[i].demand >= NO_DEMAND).collect();

    // Greedy by value per byte (ties: the lower index).
    let mut by_density = wanted.clone();
    by_density.sort_by(|&a, &b| {
        let d = |i: usize| value(&models[i]) / models[i].bytes.max(1) as f64;
        d(b).total_cmp(&d(a)).then(a.cmp(&b))
    });
    let fill = |order: &[usize], mut chosen: Vec<bool>, mut used: u64| {
        for &i in order {
            if !chosen[i] && used.saturating_add(models[i].bytes) <= budget {
                chosen[i] = true;
                used += models[i].bytes;
            }
        }
        (chosen, used)
    };
    let (greedy, _) = fill(&by_density, pinned.clone(), used_pinned);
    let total = |c: &[bool]| wanted.iter().filter(|&&i| c[i]).map(|&i| value(&models[i])).sum::<f64>();
    // The single most valuable model that fits beside the pinned ones, then the greedy rest.
    let best_single = wanted
        .iter()
        .copied()
        .filter(|&i| used_pinned.saturating_add(models[i].bytes) <= budget)
        .max_by(|&a, &b| value(&models[a]).total_cmp(&value(&models[b])).then(b.cmp(&a)));
    let mut chosen = greedy;
    if let Some(i) = best_single {
        let mut seeded = pinned;
        seeded[i] = true;
        let (alt, _) = fill(&by_density, seeded, used_pinned + models[i].bytes);
        if total(&alt) > total(&chosen) {
            chosen = alt;
        }
    }
    // Preloading: what memory is left goes to the models nobody asked for lately, warm ones
    // first (no churn), then in order.
    let used: u64 = (0..models.len()).filter(|&i| chosen[i]).map(|i| models[i].bytes).sum();
    let idle: Vec<usize> = (0..models.len()).filter(|&i| !models[i].pinned && models[i].demand < NO_DEMAND).collect();
    let idle_order: Vec<usize> =
        idle.iter().copied().filter(|&i| models[i].warm).chain(idle.iter().copied().filter(|&i| !models[i].warm)).collect();
    fill(&idle_order, chosen, used).0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(bytes: u64, demand: f64, warm: bool, pinned: bool) -> PlaceCandidate {
        PlaceCandidate { bytes, demand, warm, pinned }
    }

    #[test]
    fn nothing_asked_preloads_in_order_within_the_budget() {
        let ms = [m(60, 0.0, false, false), m(50, 0.0, false, false), m(30, 0.0, false, false)];
        assert_eq!(place(&ms, 100), [true, false, true]);
        assert_eq!(place(&ms, 1000), [true, true, true]);
        assert_eq!(place(&ms, 10), [false, false, false]);
    }

    #[test]
    fn demand_per_byte_decides_and_the_budget_holds() {
        // b is asked for most per byte, then c; a does not fit beside them.
        let ms = [m(60, 1.0, true, false), m(50, 4.0, false, false), m(40, 2.0, false, false)];
        let chosen = place(&ms, 100);
        assert_eq!(chosen, [false, true, true]);
        let used: u64 = ms.iter().zip(&chosen).filter(|(_, c)| **c).map(|(m, _)| m.bytes).sum();
        assert!(used <= 100);
    }

    #[test]
    fn the_single_best_model_beats_a_greedy_of_small_ones() {
        // Small models have the best density but together are worth less than the big one.
        let ms = [m(10, 1.5, false, false), m(10, 1.5, false, false), m(95, 10.0, false, false)];
        assert_eq!(place(&ms, 100), [false, false, true]);
    }

    #[test]
    fn a_warm_model_is_kept_against_a_slightly_busier_cold_one() {
        let ms = [m(60, 1.0, true, false), m(60, 1.2, false, false)];
        assert_eq!(place(&ms, 100), [true, false], "1.2 < 1.5 x 1.0: no churn");
        let ms = [m(60, 1.0, true, false), m(60, 2.0, false, false)];
        assert_eq!(place(&ms, 100), [false, true], "twice the demand: swapped");
    }

    #[test]
    fn pinned_models_stay_and_oversized_ones_never_load() {
        let ms = [m(80, 0.0, true, true), m(50, 9.0, false, false), m(500, 99.0, false, false)];
        assert_eq!(place(&ms, 100), [true, false, false], "b does not fit beside the pinned a; c never fits");
        let ms = [m(150, 0.0, true, true)];
        assert_eq!(place(&ms, 100), [true], "pinned past the budget");
    }
}
