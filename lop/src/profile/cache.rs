//! Measured profiles kept on disk, so that a model is measured once per machine and setting
//! (the edge server at start-up, `lop bench` before its runs) and measured again when anything
//! the times depend on changes.

use super::{DeviceKind, Profile, ProfileOptions, profile_graph};
use crate::error::{Error, Result};
use crate::graph::Graph;
use std::path::{Path, PathBuf};
use tch::Tensor;

/// A directory of measured profiles, one file per (model, content hash, role, device, dilation,
/// libtorch threads, layout asked for).
#[derive(Debug, Clone)]
pub struct ProfileCache {
    dir: PathBuf,
}

fn device_label(device: tch::Device) -> String {
    match device {
        tch::Device::Cuda(n) => format!("cuda{n}"),
        _ => "cpu".into(),
    }
}

fn file_safe(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

impl ProfileCache {
    /// The cache in `dir` (created on the first save).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ProfileCache { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file a profile of `graph` (content hash `hash`) measured with `opts` on `device`
    /// with the current libtorch thread count is kept in.
    pub fn path(&self, graph: &Graph, hash: &str, opts: &ProfileOptions, device: tch::Device) -> PathBuf {
        self.dir.join(format!(
            "{}.{}.{}.d{}.t{}.{}.{}.json",
            file_safe(&graph.name),
            opts.role.name(),
            device_label(device),
            opts.dilation,
            tch::get_num_threads(),
            opts.layout.name(),
            &hash[..16.min(hash.len())]
        ))
    }

    /// The cached profile of `graph` measured as `opts` asks, if there is one. A missing,
    /// corrupt or stale file (another model, role, device kind or dilation, or a dilated profile
    /// measured without the dilation waits) gives `None`: it is measured again, never trusted.
    pub fn load(&self, graph: &Graph, hash: &str, opts: &ProfileOptions, device: tch::Device) -> Option<(Profile, PathBuf)> {
        let path = self.path(graph, hash, opts, device);
        let p = Profile::load(&path).ok()?;
        let fits = p.validate(graph, hash).is_ok()
            && p.role == opts.role
            && p.device == opts.device
            && p.dilation == opts.dilation
            && (p.dilation_waits || opts.dilation <= 1.0)
            && opts.layout.fixed().is_none_or(|l| l == p.layout);
        fits.then_some((p, path))
    }

    /// Measures `graph` (already on `device`) on `inputs` and saves the profile; `progress` as
    /// in [`profile_graph`].
    ///
    /// # Errors
    /// Measurement errors; [`Error::Io`] when the directory or file cannot be written.
    pub fn measure(
        &self,
        graph: &mut Graph,
        hash: &str,
        inputs: &[Tensor],
        opts: &ProfileOptions,
        device: tch::Device,
        progress: impl FnMut(usize, usize, &str),
    ) -> Result<(Profile, PathBuf)> {
        let kind = if device.is_cuda() { DeviceKind::Cuda } else { DeviceKind::Cpu };
        if kind != opts.device {
            return Err(Error::Input(format!("profile options name device {:?} but the graph is on {device:?}", opts.device)));
        }
        let prof = profile_graph(graph, inputs, opts, progress)?;
        for s in prof.slow_bands() {
            tracing::warn!(
                op = %s.op,
                rows = s.rows,
                ms = s.seconds * 1e3,
                more_rows = s.more_rows,
                more_ms = s.more_seconds * 1e3,
                "profile: a smaller band of this op took longer than a larger one (a slow kernel path for small bands, or a busy machine); the planner will avoid cutting it"
            );
        }
        std::fs::create_dir_all(&self.dir).map_err(|source| Error::Io { path: self.dir.clone(), source })?;
        let path = self.path(graph, hash, opts, device);
        prof.save(&path)?;
        Ok((prof, path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Side;

    fn tiny() -> Graph {
        use crate::graph::{DType, GraphBuilder};
        use crate::ops::{Op, UnaryOp};
        let mut b = GraphBuilder::new("tiny/model");
        let x = b.input("x", vec![1, 2, 8, 4], DType::F32);
        let y = b.add("relu", Op::Unary(UnaryOp::Relu), &[x]).expect("relu");
        b.output(y);
        b.build().expect("graph")
    }

    #[test]
    fn a_measured_profile_is_found_again_only_for_the_same_settings() {
        let dir = std::env::temp_dir().join(format!("lop-profile-cache-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = ProfileCache::new(&dir);
        let mut g = tiny();
        let hash = g.content_hash().expect("hash");
        let inputs = crate::exec::synthetic_inputs(&g, 0).expect("inputs");
        let robot = ProfileOptions { role: Side::Robot, dilation: 2.0, ..ProfileOptions::default() };
        assert!(cache.load(&g, &hash, &robot, tch::Device::Cpu).is_none(), "nothing cached yet");
        let (p, path) = cache.measure(&mut g, &hash, &inputs, &robot, tch::Device::Cpu, |_, _, _| {}).expect("measure");
        assert!(path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("tiny_model.robot.cpu.d2.t")));
        let (again, _) = cache.load(&g, &hash, &robot, tch::Device::Cpu).expect("cached");
        assert_eq!(again.ops.len(), p.ops.len());
        assert_eq!(again.ops[0].samples[0].median_s, p.ops[0].samples[0].median_s);
        // Other settings miss.
        let server = ProfileOptions { role: Side::Server, dilation: 1.0, ..ProfileOptions::default() };
        assert!(cache.load(&g, &hash, &server, tch::Device::Cpu).is_none());
        let d3 = ProfileOptions { dilation: 3.0, ..robot.clone() };
        assert!(cache.load(&g, &hash, &d3, tch::Device::Cpu).is_none());
        // A layout asked for misses a profile chosen automatically, and one in another layout.
        assert!(path.to_string_lossy().ends_with(&format!(".auto.{}.json", &hash[..16])));
        let nchw = ProfileOptions { layout: super::super::LayoutChoice::Fixed(crate::graph::Layout::Nchw), ..robot.clone() };
        assert!(cache.load(&g, &hash, &nchw, tch::Device::Cpu).is_none());
        let mut other = p.clone();
        other.layout = crate::graph::Layout::ChannelsLast;
        other.save(&cache.path(&g, &hash, &nchw, tch::Device::Cpu)).expect("save");
        assert!(cache.load(&g, &hash, &nchw, tch::Device::Cpu).is_none(), "a profile in another layout than asked is stale");
        // A dilated profile measured without the waits is stale.
        let mut old = p.clone();
        old.dilation_waits = false;
        old.save(&path).expect("save");
        assert!(cache.load(&g, &hash, &robot, tch::Device::Cpu).is_none());
        // A corrupt file is not trusted.
        std::fs::write(&path, "{ not json").expect("write");
        assert!(cache.load(&g, &hash, &robot, tch::Device::Cpu).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
