//! Where an edge forwards an inference it cannot serve in time (EPARA's forwarding): to the
//! edge of its own fleet view, outside the request's path, whose reported queue still leaves the
//! inference its deadline, the one with the most idle goodput. The edge service applies the
//! rules that keep forwarding finite (`lop_runtime`'s `edge::Forwarding`) over the view it hears
//! (`lop_runtime::fleet::FleetView`); this module only chooses.

use std::time::Duration;

use lop_msgs::load::EdgeLoad;

/// One edge as a fleet view sees it: its last load report and how old that report is.
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeSeen {
    /// Its last report.
    pub load: EdgeLoad,
    /// How old that report is.
    pub age: Duration,
}

/// The edge to forward to: among `edges` not in `exclude` that hold `model` warm, those whose
/// queued work (less the report's age) plus one inference's server time fits in `budget_s`; of
/// these, the one with the most idle goodput (ties: the lower id). `None` when none fits.
pub fn pick_edge(edges: &[EdgeSeen], model: &str, budget_s: f64, exclude: &[String]) -> Option<String> {
    edges
        .iter()
        .filter(|e| !exclude.contains(&e.load.edge))
        .filter_map(|e| {
            let m = e.load.model(model).filter(|m| m.warm)?;
            let queued_s = (f64::from(m.queued_s) - e.age.as_secs_f64()).max(0.0);
            (queued_s + f64::from(m.server_s) <= budget_s).then_some((&e.load, f64::from(m.idle_goodput)))
        })
        .max_by(|(a, ga), (b, gb)| ga.total_cmp(gb).then_with(|| b.edge.cmp(&a.edge)))
        .map(|(l, _): (&EdgeLoad, f64)| l.edge.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lop_msgs::load::ModelLoad;

    fn seen(edge: &str, queued_s: f32, server_s: f32, idle_goodput: f32, warm: bool, age_ms: u64) -> EdgeSeen {
        EdgeSeen {
            load: EdgeLoad {
                edge: edge.into(),
                seq: 1,
                utilisation: 0.5,
                gpu_free_bytes: None,
                models: vec![ModelLoad { model: "m".into(), queued_s, idle_goodput, server_s, in_flight: 1, warm }],
            },
            age: Duration::from_millis(age_ms),
        }
    }

    #[test]
    fn picks_the_idlest_edge_that_fits_outside_the_path() {
        let edges = [
            seen("a", 0.0, 0.01, 90.0, true, 0),
            seen("b", 0.0, 0.01, 50.0, true, 0),
            seen("c", 0.5, 0.01, 99.0, true, 0),
            seen("d", 0.0, 0.01, 99.0, false, 0),
        ];
        // c is busier than the budget, d is cold: a has the most idle goodput.
        assert_eq!(pick_edge(&edges, "m", 0.1, &[]), Some("a".into()));
        // a forwarded it already (or is this edge): b.
        assert_eq!(pick_edge(&edges, "m", 0.1, &["a".into()]), Some("b".into()));
        assert_eq!(pick_edge(&edges, "m", 0.1, &["a".into(), "b".into()]), None);
        // A budget that leaves no edge its own time: none.
        assert_eq!(pick_edge(&edges, "m", 0.005, &[]), None);
        // Another model: none.
        assert_eq!(pick_edge(&edges, "other", 1.0, &[]), None);
        // c's queue, reported 450 ms ago, has mostly drained: it fits now and wins.
        let aged = [seen("a", 0.0, 0.01, 90.0, true, 0), seen("c", 0.5, 0.01, 99.0, true, 450)];
        assert_eq!(pick_edge(&aged, "m", 0.1, &[]), Some("c".into()));
        // Equal goodput: the lower id, whatever the order.
        let tied = [seen("y", 0.0, 0.01, 5.0, true, 0), seen("x", 0.0, 0.01, 5.0, true, 0)];
        assert_eq!(pick_edge(&tied, "m", 0.1, &[]), Some("x".into()));
    }
}
