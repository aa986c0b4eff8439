//! Replanning: when the edge's schedule table differs from the robot's (the robot was planned
//! for another server profile), the robot plans the edge's table from the server profile the
//! edge sends, in the background while it runs alone, then takes it into use and connects again.

use std::sync::Arc;

use lop::plan::Side;
use lop::profile::Profile;

use super::{Connector, RobotClient, frame_ratio_of};
use crate::plans::PlanBook;

impl<C: Connector> RobotClient<C> {
    /// Starts planning the table for the edge's server profile (JSON from Welcome, or from the
    /// Planning reject, so that both sides plan at once) in the background, unless the robot's
    /// table is planned for it already, one is being planned, or the client cannot plan.
    pub(super) fn start_replan(&mut self, server_profile: &[u8]) {
        let Some(replan) = self.opts.replan.clone() else {
            tracing::warn!("the edge's schedule table differs from this robot's and no planner is set: running alone");
            return;
        };
        if self.replanning.is_some() {
            return;
        }
        let profile: Profile = match serde_json::from_slice(server_profile) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, bytes = server_profile.len(), "the edge's server profile in Welcome is not a profile: running alone");
                return;
            }
        };
        let hash = profile.hash();
        if hash == self.book.table.key.server_profile_hash {
            // Planned for this server already: the edge's table will be this one.
            return;
        }
        if self.replanned.contains(&hash) {
            // Planned for it already, and the edge still names another table: the two sides do
            // not plan alike (other table settings or planner versions). Said once.
            if !self.replan_failed {
                self.replan_failed = true;
                tracing::warn!(profile = %hash, "the table planned for the edge's server profile still differs from the edge's: running alone (check that both use the same table settings and lop version)");
            }
            return;
        }
        if profile.role != Side::Server || profile.check().is_err() {
            tracing::warn!(profile = %hash, "the edge's server profile in Welcome is not a valid server profile: running alone");
            return;
        }
        tracing::info!(server_profile = %hash, "planning the schedule table for the edge's server profile; running alone meanwhile");
        self.replanned.push(hash.clone());
        self.replanning = Some((hash, tokio::task::spawn_blocking(move || (replan.0)(profile))));
    }

    /// Takes a finished replanned table into use (then connects again at once).
    pub(super) async fn finish_replan(&mut self) {
        let Some((hash, task)) = self.replanning.take_if(|(_, t)| t.is_finished()) else { return };
        let table = match task.await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return tracing::warn!(server_profile = %hash, error = %e, "planning the edge's table failed: running alone"),
            Err(e) => return tracing::warn!(error = %e, "the planning task failed: running alone"),
        };
        match PlanBook::prepare(&self.worker, &self.meta, Arc::new(table), self.opts.input_wire).await {
            Ok(book) => {
                tracing::info!(server_profile = %hash, table = %book.table_hash.to_hex(), "schedule table planned for the edge; connecting");
                // The frames seen so far still tell how they code.
                self.ratio = self.ratio.repriced(frame_ratio_of(&book).priced());
                self.book = Arc::new(book);
                self.last_attempt = None;
            }
            Err(e) => tracing::warn!(error = %e, "the edge's table does not fit the model: running alone"),
        }
    }
}
