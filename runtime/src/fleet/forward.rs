//! An edge's forwarding over Zenoh: its own view of the fleet ([`FleetView`]) and the choice of
//! where to forward (`lop_fleet::forward::pick_edge`, EPARA's rule). The edge service applies
//! the rules that keep forwarding finite (`crate::edge::Forwarding`).

use std::time::Duration;

use lop_fleet::forward::pick_edge;

use super::view::FleetView;
use crate::edge::Forwarding;
use crate::error::Result;

/// Forwarding for the edge `edge_id` on `session`: its own view of the fleet (the edges' tokens
/// and load reports, forgotten after `stale_after`), at most `max_forwards` forwards per request.
///
/// # Errors
/// [`Error::Zenoh`](crate::error::Error::Zenoh) when the view cannot subscribe.
pub async fn forwarding(session: &zenoh::Session, edge_id: &str, max_forwards: usize, stale_after: Duration) -> Result<Forwarding> {
    let view = FleetView::new(session, stale_after).await?;
    Ok(Forwarding {
        edge_id: edge_id.to_string(),
        max_forwards,
        pick: Box::new(move |model, budget_s, exclude| pick_edge(&view.edges(), model, budget_s, exclude)),
    })
}
