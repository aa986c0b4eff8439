//! Maximum flow and minimum cut (Dinic's algorithm) over `f64` capacities, for the layer
//! partition (`lop::baseline::min_cut`) and the fluid bound (`lop::sim::fluid_bound`).

/// A flow network with `f64` capacities (infinite ones allowed) and Dinic's maximum flow.
pub struct Network {
    /// Per node: indices into `to` / `cap` of its outgoing edges (each with its reverse at `^ 1`).
    adj: Vec<Vec<usize>>,
    to: Vec<usize>,
    cap: Vec<f64>,
}

impl Network {
    /// A network of `nodes` nodes, numbered from 0, and no edges.
    pub fn new(nodes: usize) -> Network {
        Network { adj: vec![Vec::new(); nodes], to: Vec::new(), cap: Vec::new() }
    }

    /// An edge `from` -> `to` of capacity `cap` (`f64::INFINITY` for one that is never cut); a
    /// capacity of 0 or less adds nothing.
    pub fn edge(&mut self, from: usize, to: usize, cap: f64) {
        if cap <= 0.0 {
            return;
        }
        self.adj[from].push(self.to.len());
        self.to.push(to);
        self.cap.push(cap);
        self.adj[to].push(self.to.len());
        self.to.push(from);
        self.cap.push(0.0);
    }

    /// Saturates the network and returns, per node, whether it stays on the source side (reachable
    /// from `source` through edges with residual capacity), and the maximum flow (the cut's
    /// capacity).
    pub fn min_cut(&mut self, source: usize, sink: usize) -> (Vec<bool>, f64) {
        // Residuals below this are rounding left-overs of sums of finite capacities.
        let finite: f64 = self.cap.iter().filter(|c| c.is_finite()).sum();
        let eps = finite.max(f64::MIN_POSITIVE) * 1e-12;
        let mut flow = 0.0;
        loop {
            let level = self.levels(source, eps);
            if level[sink] == usize::MAX {
                return (level.iter().map(|&l| l != usize::MAX).collect(), flow);
            }
            let mut next = vec![0usize; self.adj.len()];
            loop {
                let pushed = self.push(source, sink, f64::INFINITY, &level, &mut next, eps);
                if pushed <= 0.0 {
                    break;
                }
                flow += pushed;
            }
        }
    }

    /// Breadth-first distances from `source` over residual edges (`usize::MAX`: unreachable).
    fn levels(&self, source: usize, eps: f64) -> Vec<usize> {
        let mut level = vec![usize::MAX; self.adj.len()];
        level[source] = 0;
        let mut queue = std::collections::VecDeque::from([source]);
        while let Some(u) = queue.pop_front() {
            for &e in &self.adj[u] {
                let v = self.to[e];
                if self.cap[e] > eps && level[v] == usize::MAX {
                    level[v] = level[u] + 1;
                    queue.push_back(v);
                }
            }
        }
        level
    }

    /// One augmenting path in the level graph (depth-first, with the current-edge pointers
    /// `next`); the flow pushed, 0 when none is left.
    fn push(&mut self, u: usize, sink: usize, limit: f64, level: &[usize], next: &mut [usize], eps: f64) -> f64 {
        if u == sink {
            return limit;
        }
        while next[u] < self.adj[u].len() {
            let e = self.adj[u][next[u]];
            let v = self.to[e];
            if self.cap[e] > eps && level[v] == level[u].wrapping_add(1) {
                let pushed = self.push(v, sink, limit.min(self.cap[e]), level, next, eps);
                if pushed > 0.0 {
                    self.cap[e] -= pushed;
                    self.cap[e ^ 1] += pushed;
                    return pushed;
                }
            }
            next[u] += 1;
        }
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::Network;

    /// The six-node network of Cormen et al.'s maximum-flow chapter: its maximum flow is 23, and
    /// the minimum cut leaves the source, v1, v2 and v4 on the source side.
    #[test]
    fn the_textbook_network_gives_its_known_flow_and_cut() {
        let mut n = Network::new(6);
        for (a, b, c) in
            [(0, 1, 16.0), (0, 2, 13.0), (2, 1, 4.0), (1, 3, 12.0), (3, 2, 9.0), (2, 4, 14.0), (4, 3, 7.0), (3, 5, 20.0), (4, 5, 4.0)]
        {
            n.edge(a, b, c);
        }
        let (side, flow) = n.min_cut(0, 5);
        assert!((flow - 23.0).abs() < 1e-9, "flow {flow}");
        assert_eq!(side, vec![true, true, true, false, true, false]);
    }

    /// An infinite edge is never cut: the cut goes through the finite one behind it.
    #[test]
    fn an_infinite_edge_is_never_cut() {
        let mut n = Network::new(3);
        n.edge(0, 1, f64::INFINITY);
        n.edge(1, 2, 2.5);
        n.edge(0, 2, 0.0);
        let (side, flow) = n.min_cut(0, 2);
        assert!((flow - 2.5).abs() < 1e-12, "flow {flow}");
        assert_eq!(side, vec![true, true, false]);
    }
}
