//! The handshake: a session's Hello is checked in turn (shutting down, the model by content
//! hash, its input shape and dtype, the planner configuration, a cold model, the robot profile),
//! then its schedule table is awaited for a while; the answer is Welcome (with the edge's
//! profile and the table's hash) or Reject with the reason (`Planning` with the profile too, so
//! that a robot planned for another server plans the same table meanwhile).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use lop::graph::DType as GraphDType;
use lop::profile::Profile;
use lop_msgs::Frame;
use lop_msgs::protocol::{DType, Hello, RejectReason, Welcome};

use super::model::Model;
use super::profiles::{MAX_RECEIVED_BUILDS, received_profile};
use super::session::Session;
use super::state::Inner;
use crate::exec::InputWire;
use crate::plans::{PlanBook, digest};

/// Why a Hello is refused: the Reject's reason and text.
type Refusal = (RejectReason, String);

impl Session {
    /// A Hello: the current inference ends and the session forgets its table; the Hello is
    /// checked ([`Session::check_hello`]), and once its table is ready it is welcomed, else
    /// refused.
    pub(super) async fn hello(&mut self, h: Hello) {
        self.abort_current("a new Hello");
        self.book = None;
        match self.check_hello(&h) {
            Ok((mi, input_wire, robot)) => self.await_table(&h, mi, input_wire, robot).await,
            Err((reason, text)) => self.reject(reason, text),
        }
    }

    /// What the Hello asks for, checked in turn: the edge not shutting down, the model and its
    /// input ([`Session::hello_model`]), the planner configuration, the model warm (a cold one
    /// is placed now), the robot profile ([`Session::hello_profile`]). Returns the model's index,
    /// the input wire and the robot profile.
    fn check_hello(&self, h: &Hello) -> Result<(usize, InputWire, Profile), Refusal> {
        if self.svc.shutting_down.load(Ordering::SeqCst) {
            return Err((RejectReason::ShuttingDown, "the edge is shutting down".into()));
        }
        let (mi, input_wire) = self.hello_model(h)?;
        let model = &self.svc.models[mi];
        let spec_hash = self.svc.opts.spec.hash();
        if digest(&spec_hash).ok() != Some(h.planner_hash) {
            return Err((
                RejectReason::NoTable,
                format!("planner configuration {} differs from the edge's {spec_hash}", h.planner_hash.to_hex()),
            ));
        }
        model.asked();
        if model.replicas().is_empty() {
            // Cold under the memory budget: this request (a well-formed one: model, shape, dtype and
            // planner checked) counts for placement, run now.
            self.svc.place_now.notify_one();
            return Err((
                RejectReason::Loading,
                format!("model '{}' is not loaded on this edge (memory budget); placing it now: retry (run alone meanwhile)", model.id),
            ));
        }
        let robot = self.hello_profile(h, model)?;
        Ok((mi, input_wire, robot))
    }

    /// The model the Hello names by content hash (its index), and how its input travels, given
    /// the Hello's input shape and dtype.
    fn hello_model(&self, h: &Hello) -> Result<(usize, InputWire), Refusal> {
        let Some(mi) = self.svc.models.iter().position(|m| m.hash == h.model_sha256) else {
            // The same model at another input size is the likely cause: say which sizes are served.
            let shapes: Vec<&Vec<u32>> = self.svc.models.iter().filter(|m| m.id == h.model_id).map(|m| &m.input_shape).collect();
            let text = if shapes.is_empty() || shapes.contains(&&h.input_shape) {
                format!("no model with sha256 {} (id '{}') in the store", h.model_sha256.to_hex(), h.model_id)
            } else {
                format!(
                    "model '{}' is served at input shapes {shapes:?}, not {:?} (edge: models[].input_shapes, or models[].camera_fits for robots with image.camera_size)",
                    h.model_id, h.input_shape
                )
            };
            return Err((RejectReason::UnknownModel, text));
        };
        let model = &self.svc.models[mi];
        if h.input_shape != model.input_shape {
            return Err((RejectReason::BadInput, format!("input shape {:?}, the model takes {:?}", h.input_shape, model.input_shape)));
        }
        let input_wire = match (h.input_dtype, model.input_dtype) {
            (DType::F32, Some(GraphDType::U8)) => InputWire::F32,
            (DType::U8, Some(GraphDType::U8)) | (DType::F32, Some(GraphDType::F32)) => InputWire::Native,
            (d, m) => return Err((RejectReason::BadInput, format!("input dtype {d:?} for a model input of {m:?}"))),
        };
        Ok((mi, input_wire))
    }

    /// The robot profile the Hello names: one the edge knows, or the one it carries (checked,
    /// then remembered) when a build slot is this profile's turn.
    fn hello_profile(&self, h: &Hello, model: &Model) -> Result<Profile, Refusal> {
        match self.svc.robot_profile(&h.robot_profile_hash.to_hex()) {
            Some(p) => Ok(p),
            None if h.robot_profile.is_empty() => {
                Err((RejectReason::NoTable, format!("unknown robot profile {} and the Hello carries none", h.robot_profile_hash.to_hex())))
            }
            None if !self.svc.build_turn(&h.robot_profile_hash.to_hex()) => {
                self.svc.profiles_refused.fetch_add(1, Ordering::Relaxed);
                Err((
                    RejectReason::Planning,
                    format!(
                        "robot profile {} is new and the edge is building {MAX_RECEIVED_BUILDS} schedule table(s) already, or another new profile has waited longer: retry (run alone meanwhile), or add it to the edge's robot_profiles",
                        h.robot_profile_hash.to_hex()
                    ),
                ))
            }
            None => match received_profile(h, &model.hash.to_hex()) {
                Ok(p) => {
                    tracing::info!(robot = %h.robot_id, model = %h.model_id, profile = %p.hash(), ops = p.ops.len(), "robot profile received in Hello");
                    self.svc.remember_profile(&h.robot_id, p.clone());
                    Ok(p)
                }
                Err(why) => Err((RejectReason::BadInput, format!("the robot profile in Hello: {why}"))),
            },
        }
    }

    /// Waits up to the edge's `table_wait` for the schedule table of the model `mi` and `robot`
    /// (loaded from the cache or built in the background), then welcomes the session, or refuses
    /// it: `Planning` while the table is still being built, `NoTable` when it failed.
    async fn await_table(&mut self, h: &Hello, mi: usize, input_wire: InputWire, robot: Profile) {
        let model = &self.svc.models[mi];
        let profile_hash = robot.hash();
        let mut ready = Inner::book(&self.svc, mi, robot, input_wire);
        let wait = self.svc.opts.table_wait;
        let outcome = match tokio::time::timeout(wait, ready.wait_for(Option::is_some)).await {
            Ok(Ok(r)) => r.clone(),
            Ok(Err(_)) => Some(Err("the table build stopped".into())),
            Err(_) => None,
        };
        match outcome {
            // The profile goes along: a robot planned for another server can plan meanwhile.
            None => self.reject_with(
                RejectReason::Planning,
                format!(
                    "building the schedule table for robot profile {} (model '{}'); it was not ready within {wait:?}: retry (run alone meanwhile)",
                    &profile_hash[..12.min(profile_hash.len())],
                    model.id
                ),
                server_profile_json(&model.server_profile),
            ),
            Some(Ok(book)) => self.welcome(h, mi, input_wire, book),
            Some(Err(e)) => self.reject(RejectReason::NoTable, format!("building the schedule table: {e}")),
        }
    }

    /// Welcomes the session with the table of `book`: from now on its Starts name plans of it.
    fn welcome(&mut self, h: &Hello, mi: usize, input_wire: InputWire, book: Arc<PlanBook>) {
        let model = &self.svc.models[mi];
        let Ok(server_hash) = digest(&model.server_profile.hash()) else {
            return self.reject(RejectReason::Other, "bad server profile hash".into());
        };
        // The profile goes along, so a robot that planned for another server profile
        // can plan this table itself (it answers with a new Hello once it has).
        let server_profile = server_profile_json(&model.server_profile);
        self.send(Frame::Welcome(Welcome { server_profile_hash: server_hash, table_hash: book.table_hash, server_profile }));
        self.svc.sessions.fetch_add(1, Ordering::Relaxed);
        tracing::info!(robot = %h.robot_id, model = %h.model_id, "session welcomed");
        self.model = Some(mi);
        self.book = Some(book);
        self.input_wire = input_wire;
        self.last_id = 0;
        self.robot_id = h.robot_id.clone();
    }
}

/// The edge's profile as JSON for Welcome and the Planning reject (empty, with a warning, when
/// it does not fit a frame: robots with other tables then cannot plan this one).
fn server_profile_json(p: &Profile) -> Vec<u8> {
    match serde_json::to_vec(p) {
        Ok(j) if j.len() <= lop_msgs::protocol::MAX_PROFILE_LEN => j,
        Ok(j) => {
            tracing::warn!(bytes = j.len(), "the server profile is too large to send; robots with other tables cannot plan this one");
            Vec::new()
        }
        Err(e) => {
            tracing::warn!(error = %e, "serialising the server profile");
            Vec::new()
        }
    }
}
