//! The kernel-count arguments of the bound: rows' releases weighed together, each op cut into
//! the kernels that serve the weights best ([`group_rows`]), kernel time shared with the ops a
//! dominator's kernels release ([`dominated`]).

use super::Releases;
use crate::plan::Side;
use crate::sim::Simulator;
use crate::structure::NodeId;
use crate::structure::Structure;

/// Frank-Wolfe steps of [`Simulator::kernel_weights`] on the row weights before any kernel
/// time is shared.
const WEIGHT_STEPS: usize = 300;

/// Rounds of [`Simulator::kernel_weights`] that share kernel time with heirs, then move the
/// row weights again.
pub const SHARE_ROUNDS: usize = 10;

/// Frank-Wolfe steps on the shares per round.
const SHARE_STEPS_PER_ROUND: usize = 20;

/// Frank-Wolfe steps on the row weights per round after the first.
const WEIGHT_STEPS_PER_ROUND: usize = 30;

/// The least, over ways of cutting an op's rows into kernels (contiguous, top to bottom), of
/// each kernel's time (`a + b` rows) times `below[last]` of its last row, `last` giving each
/// row's last input row (never decreasing) and `below` each input row's weight at or below
/// it (never decreasing). Adds each kernel's time, in the best cut, to `charge[last of its
/// last row]`, and returns with the least the sum of the kernels' weights (`below[last]` of
/// each kernel's last row: what one more `a` per kernel would add). A convex-hull sweep: the
/// cost of a kernel ending at row `e` is linear in where it starts, with a slope that only
/// grows, at a weight that only grows.
pub fn group_rows(a: f64, b: f64, last: &[usize], below: &[f64], charge: &mut [f64]) -> (f64, f64) {
    let m = last.len();
    let w = |e: usize| below[last[e - 1]];
    // Rows of zero weight cost nothing: one kernel of them, charged to its own last row.
    let zero = (1..=m).take_while(|&e| w(e) == 0.0).last().unwrap_or(0);
    if zero > 0 {
        charge[last[zero - 1]] += a + b * zero as f64;
    }
    if zero == m {
        return (0.0, 0.0);
    }
    if b <= 0.0 {
        // Every kernel costs `a` alone: one kernel of the rest is the least.
        charge[last[m - 1]] += a;
        return (a * w(m), w(m));
    }
    // f[e]: least cost of rows zero..e; lines f[s] - b s x over starts s, queried at x = w(e).
    let mut f = vec![0.0; m + 1];
    let mut from = vec![zero; m + 1];
    let mut hull: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
    let line = |f: &[f64], s: usize, x: f64| f[s] - b * s as f64 * x;
    for e in zero + 1..=m {
        let s_new = e - 1;
        // Lines arrive with falling slopes (-b s); drop the last while the new one and the one
        // before it make it useless.
        while hull.len() >= 2 {
            let (l1, l2) = (hull[hull.len() - 2], hull[hull.len() - 1]);
            let (m1, m2, m3) = (-b * l1 as f64, -b * l2 as f64, -b * s_new as f64);
            let (c1, c2, c3) = (f[l1], f[l2], f[s_new]);
            if (c3 - c1) * (m1 - m2) <= (c2 - c1) * (m1 - m3) {
                hull.pop_back();
            } else {
                break;
            }
        }
        hull.push_back(s_new);
        let x = w(e);
        while hull.len() >= 2 && line(&f, hull[1], x) <= line(&f, hull[0], x) {
            hull.pop_front();
        }
        let s = hull[0];
        f[e] = line(&f, s, x) + (a + b * e as f64) * x;
        from[e] = s;
    }
    let (mut e, mut kernels) = (m, 0.0);
    while e > zero {
        let s = from[e];
        charge[last[e - 1]] += a + b * (e - s) as f64;
        kernels += w(e);
        e = s;
    }
    (f[m], kernels)
}

/// Per op of `ids`, the positions in `ids` of the other ops it dominates: every path from the
/// graph input to them passes through it. Every release of such an op's kernels is a release
/// of one of the dominator's (module docs, "Kernels are shared"). Node ids are topological.
fn dominated(g: &dyn Structure, input: NodeId, ids: &[NodeId]) -> Vec<Vec<usize>> {
    let nodes = g.node_count();
    let words = nodes.div_ceil(64);
    let bit = |set: &[u64], id: NodeId| set[id / 64] >> (id % 64) & 1 == 1;
    // dom[v]: the nodes on every path from the input to v; None where no path reaches v.
    let mut dom: Vec<Option<Vec<u64>>> = vec![None; nodes];
    let mut own = vec![0u64; words];
    own[input / 64] |= 1 << (input % 64);
    dom[input] = Some(own);
    for id in 0..nodes {
        if id == input || !g.node_is_op(id) {
            continue;
        }
        let mut common: Option<Vec<u64>> = None;
        for &v in g.node_inputs(id) {
            if let Some(dv) = &dom[v] {
                common = Some(match common {
                    None => dv.clone(),
                    Some(mut c) => {
                        c.iter_mut().zip(dv).for_each(|(x, y)| *x &= y);
                        c
                    }
                });
            }
        }
        if let Some(mut c) = common {
            c[id / 64] |= 1 << (id % 64);
            dom[id] = Some(c);
        }
    }
    let mut heirs = vec![Vec::new(); ids.len()];
    for (k, &j) in ids.iter().enumerate() {
        if let Some(dj) = &dom[j] {
            for (h, &i) in heirs.iter_mut().zip(ids) {
                if i != j && bit(dj, i) {
                    h.push(k);
                }
            }
        }
    }
    heirs
}

impl Simulator<'_> {
    /// The kernel-count bound of the module docs: for rows `i1 < i2` and weight `t`, what
    /// every plan takes at least, `t` times the bound of `i1` plus `1 - t` times that of `i2`,
    /// with each op's rows that depend on `i1` but not on `i2` either in the late kernel of
    /// `i2` or in a kernel of their own. `fixed[i]` is the arrival of row `i` and the download
    /// after. Searched over `i2` the row whose own bound is largest (`best_row`) or the last
    /// row and every `i1` below (at most 256, evenly); for each pair the value is concave and
    /// piecewise linear in `t`, so a sweep over its breakpoints finds the best `t` exactly.
    pub(super) fn kernel_mixture(&self, rel: &Releases, best_row: usize, fixed: &[f64]) -> f64 {
        let g = self.graph();
        let n = rel.rows;
        let ops: Vec<NodeId> = (0..g.node_count()).filter(|&id| g.node_is_op(id) && self.is_live(id)).collect();
        let cost = |id: NodeId, rows: usize| self.op_time(Side::Server, id, rows);
        let mut best = f64::NEG_INFINITY;
        let step = n.div_ceil(256).max(1);
        let mut breaks: Vec<(f64, f64)> = Vec::with_capacity(ops.len());
        for i2 in [best_row, n - 1] {
            for i1 in (0..i2).step_by(step) {
                let (d1, d2) = (&rel.deps[i1], &rel.deps[i2]);
                // At t = 0 the value is row i2's; each op's own rows between add `t` times
                // their kernel until that costs more than holding them late (from its break).
                let (mut value, mut slope) = (fixed[i2], fixed[i1] - fixed[i2]);
                breaks.clear();
                for &id in &ops {
                    let (z1, zt) = (d2[id], d1[id].saturating_sub(d2[id]));
                    if z1 > 0 {
                        value += cost(id, z1);
                    }
                    if zt > 0 {
                        let own = cost(id, zt);
                        slope += own;
                        if z1 > 0 && own > 0.0 {
                            breaks.push(((cost(id, z1 + zt) - cost(id, z1)) / own, own));
                        }
                    }
                }
                breaks.sort_by(|a, b| a.0.total_cmp(&b.0));
                let mut t = 0.0;
                best = best.max(value);
                for &(at, own) in breaks.iter().chain(std::iter::once(&(1.0, 0.0))) {
                    let at = at.clamp(t, 1.0);
                    if slope <= 0.0 {
                        break;
                    }
                    value += slope * (at - t);
                    t = at;
                    best = best.max(value);
                    slope -= own;
                }
            }
        }
        best
    }

    /// The kernel-count bound with weights spread over any rows: for weights `mu` (summing to
    /// 1), every plan takes at least the `mu`-weighted mean of the rows' terms, each counting
    /// the kernels that start after that row's arrival; so at least the weighted mean of
    /// `fixed` plus, per op, the least over ways of grouping its rows into kernels of each
    /// kernel's time times the weight of the rows at or above the last input row it reads
    /// ([`group_rows`]), each op's kernel time being its share of its own and its dominators'
    /// (module docs, "Kernels are shared"). Concave in `mu` for fixed shares, and in the shares
    /// for fixed `mu`: raised by Frank-Wolfe steps from the best single row (`best_row`), each
    /// toward the row the current grouping charges most, then `share_rounds` rounds that move
    /// the shares and the weights in turn; the best value seen is a bound whatever the search.
    pub(super) fn kernel_weights(&self, rel: &Releases, best_row: usize, fixed: &[f64], share_rounds: usize) -> f64 {
        let g = self.graph();
        let n = rel.rows;
        // Per op in the input's cone: its time per kernel and per row, and per row the last
        // input row it reads (rows that read row i or below are the last deps[i] rows).
        let ids: Vec<NodeId> = (0..g.node_count())
            // Ops whose every row reads the input (a row that does not could run at any time).
            .filter(|&id| g.node_is_op(id) && self.is_live(id) && rel.deps[0][id] == g.node_info(id).rows().max(1))
            .collect();
        let ops: Vec<(f64, f64, Vec<usize>)> = ids
            .iter()
            .map(|&id| {
                let rows = g.node_info(id).rows().max(1);
                let a = self.op_time(Side::Server, id, 0);
                let b = self.op_time(Side::Server, id, 1) - a;
                let mut last = vec![0usize; rows];
                let mut i = 0;
                for (r, l) in last.iter_mut().enumerate() {
                    while i + 1 < n && rel.deps[i + 1][id] >= rows - r {
                        i += 1;
                    }
                    *l = i;
                }
                (a, b, last)
            })
            .collect();
        let heirs = match self.single_input() {
            Some(input) => dominated(g, input, &ids),
            None => vec![Vec::new(); ids.len()],
        };
        // shares[i][0]: the part of op i's kernel time it keeps; shares[i][1 + k]: the part
        // handed to heirs[i][k] (module docs, "Kernels are shared").
        let mut shares: Vec<Vec<f64>> = heirs.iter().map(|h| std::iter::once(1.0).chain(h.iter().map(|_| 0.0)).collect()).collect();
        let shared_a = |shares: &[Vec<f64>]| {
            let mut a: Vec<f64> = ops.iter().zip(shares).map(|((a, _, _), s)| a * s[0]).collect();
            for (i, h) in heirs.iter().enumerate() {
                for (k, &j) in h.iter().enumerate() {
                    a[j] += ops[i].0 * shares[i][k + 1];
                }
            }
            a
        };
        let start = best_row;
        let mut mu = vec![0.0; n];
        mu[start] = 1.0;
        let mut best = f64::NEG_INFINITY;
        let mut charge = vec![0.0; n + 1];
        let mut below = vec![0.0; n];
        let mut kernels = vec![0.0; ops.len()];
        // The value at `mu` with every op's kernel time `a`; fills `below`, `charge` and each
        // op's kernel weight.
        let value_at = |mu: &[f64], a: &[f64], below: &mut [f64], charge: &mut [f64], kernels: &mut [f64]| {
            let mut acc = 0.0;
            for (w, m) in below.iter_mut().zip(mu) {
                acc += m;
                *w = acc;
            }
            charge.iter_mut().for_each(|c| *c = 0.0);
            let mut value: f64 = mu.iter().zip(fixed).map(|(m, f)| m * f).sum();
            for (((_, b, last), &a), k) in ops.iter().zip(a).zip(kernels.iter_mut()) {
                let (v, w) = group_rows(a, *b, last, below, charge);
                value += v;
                *k = w;
            }
            value
        };
        let (mut mu_steps, mut share_steps) = (0usize, 0usize);
        let mut a = shared_a(&shares);
        for round in 0..=share_rounds {
            // Frank-Wolfe steps on the row weights.
            let steps = if round == 0 { WEIGHT_STEPS } else { WEIGHT_STEPS_PER_ROUND };
            for _ in 0..steps {
                let value = value_at(&mu, &a, &mut below, &mut charge, &mut kernels);
                best = best.max(value);
                // charge[j] counts for every row at or below j: the supergradient at row i is
                // fixed[i] plus the charges from i up.
                let mut up = 0.0;
                let mut toward = (f64::NEG_INFINITY, start);
                for i in (0..n).rev() {
                    up += charge[i];
                    let grad = fixed[i] + up;
                    if grad > toward.0 {
                        toward = (grad, i);
                    }
                }
                let gamma = 2.0 / (mu_steps as f64 + 2.0);
                mu_steps += 1;
                mu.iter_mut().for_each(|m| *m *= 1.0 - gamma);
                mu[toward.1] += gamma;
            }
            if round == share_rounds || heirs.iter().all(Vec::is_empty) {
                break;
            }
            // Frank-Wolfe steps on the shares: each op hands its kernel time toward whichever
            // of itself and its heirs has the most kernel weight (the value's supergradient in
            // its share of op j is its `a` times op j's kernel weight).
            for _ in 0..SHARE_STEPS_PER_ROUND {
                let value = value_at(&mu, &a, &mut below, &mut charge, &mut kernels);
                best = best.max(value);
                let gamma = 2.0 / (share_steps as f64 + 2.0);
                share_steps += 1;
                for (i, h) in heirs.iter().enumerate() {
                    let mut toward = (kernels[i], 0);
                    for (k, &j) in h.iter().enumerate() {
                        if kernels[j] > toward.0 {
                            toward = (kernels[j], k + 1);
                        }
                    }
                    shares[i].iter_mut().for_each(|x| *x *= 1.0 - gamma);
                    shares[i][toward.1] += gamma;
                }
                a = shared_a(&shares);
            }
        }
        best
    }
}
