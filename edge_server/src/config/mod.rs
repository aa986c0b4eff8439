//! The edge server's YAML configuration (`lop_edge --config FILE`; `config/edge.yaml` documents
//! every field with its default).
//!
//! [`EdgeConfig::load`] parses the file (unknown fields are errors), checks every value and
//! resolves relative paths against the file's directory. Errors name the file and the field.
//! Nothing is loaded or measured here: [`crate::prepare`] does that.
//!
//! ## Layout
//! - `schema`: the top level of the YAML, [`EdgeConfig`], with its defaults.
//! - `sections`: its sections ([`ZenohSection`], [`TlsSection`], [`AccessSection`],
//!   [`GpuEnergySection`], [`MetricsSection`], [`SiteSection`]).
//! - `model_entry`: one served model's YAML ([`ModelEntry`], [`ProfileSource`]).
//! - `error`: [`ConfigError`].
//! - `load`: reading, resolving and the values derived from a loaded configuration.
//! - `check`: every value checked, in order.
//! - `variants`: a model entry's resolved source ([`ModelSource`]) and served variants.
//! - `device`: the devices the edge computes on.
//! - `listen`: where the edge listens, secure by default ([`ListenPlan`]), its Zenoh session's
//!   security and configuration, and the operators' HTTP address.
//!
//! The types are leaves (`schema` over `sections` and `model_entry`; `error` over `schema`);
//! each other file adds methods to [`EdgeConfig`] and imports only those.

mod check;
mod device;
mod error;
mod listen;
mod load;
mod model_entry;
mod schema;
mod sections;
mod variants;

pub use error::ConfigError;
pub use listen::ListenPlan;
pub use model_entry::{ModelEntry, ProfileSource};
pub use schema::EdgeConfig;
pub use sections::{AccessSection, GpuEnergySection, MetricsSection, Mode, SiteSection, TlsSection, ZenohSection};
pub use variants::ModelSource;
