//! The targets for what the robot and the edge take in besides wire frames and files: the
//! camera's compressed pictures ([`picture`]), the coded input bands an edge receives
//! ([`band`]), the site digests a robot hears ([`site`]), and the robot and server profiles that
//! Hello and Welcome carry ([`hello`]).

use std::ops::Range;
use std::time::Instant;

use hiroz::msg::ZMessage;
use hiroz_msgs::sensor_msgs::CompressedImage;
use lop::codec::photo::Format;
use lop::codec::{self, FrameCodec, Image};
use lop::graph::{DType as GraphDType, Graph, GraphBuilder};
use lop::planner::table::{ScheduleTable, TableSpec};
use lop::profile::Profile;
use lop::sim::{Schedule, ScheduledTransfer};
use lop::{Op, Side};
use lop_fleet::shard::{robot_hash, robot_shards};
use lop_fleet::{Choice, ModelCost, Policy, Router, ServerView};
use lop_msgs::Digest;
use lop_msgs::key::SessionKeys;
use lop_msgs::protocol::{CODED_DIGEST_LEN, Coding, Frame, Hello, Limits};
use lop_msgs::site::LoadDigest;
use lop_runtime::exec::{GraphMeta, InputWire};
use lop_runtime::plans::Prepared;
use lop_runtime::received_profiles::ReceivedProfiles;
use lop_runtime::session::{self, FrameStats, Inbound};
use robot_node::config::{ImageSettings, Transport};
use robot_node::convert::{self, compressed};
use tch::{Device, Kind};

use crate::{TABLE_GRAPH, image_target, once_per_process};

/// Builds the state of the band and hello targets ([`crate::prepare`]).
pub(crate) fn prepare(target: &str) {
    match target {
        "band" => BAND.with(|_| ()),
        "hello" => SIDES.with(|_| ()),
        _ => {}
    }
}

/// The picture target's cap on a compressed frame's pixels: a robot configured with
/// `image.max_pixels: 65536` (the default cap, a 4K frame's, would spend the fuzzer's time
/// allocating pixels rather than reading headers).
pub const PICTURE_MAX_PIXELS: u64 = 1 << 16;

/// A `sensor_msgs/CompressedImage` as CDR bytes, as `lop_robot` reads one on
/// `<image topic>/compressed`: the first byte picks the model input's shape (as the ros target's
/// second byte does), the rest is the message. The format field is parsed, the picture's size
/// read from its headers, the picture decoded under the pixel cap and converted to the input; a
/// JPEG is also decoded as a passed-through frame is (`passthrough`: the decoder the edge uses),
/// at its own size.
pub fn picture(data: &[u8]) {
    let Some((&shape, cdr)) = data.split_first() else { return };
    let Ok(m) = CompressedImage::deserialize(cdr) else { return };
    let input = robot_node::backend::hiroz::compressed_in(m);
    let bytes = (*input.data).as_ref();
    let t = image_target(shape);
    let settings = ImageSettings {
        height: 0,
        width: 0,
        order: t.order,
        fit: Some(t.fit),
        pad: 114,
        transport: Transport::Compressed,
        max_pixels: PICTURE_MAX_PIXELS,
        camera_size: None,
    };
    let cap = settings.max_pixels_for(t.width, t.height);
    let headers = compressed::dimensions(&input.format, bytes);
    let Ok(p) = compressed::decode(&input.format, bytes, cap) else { return };
    assert!(p.width * p.height <= cap, "a {}x{} picture decoded under a cap of {cap} pixels", p.width, p.height);
    assert_eq!(p.pixels.len(), p.width * p.height * p.channels, "a picture holds its pixels");
    let size = (u32::try_from(p.width).unwrap_or(u32::MAX), u32::try_from(p.height).unwrap_or(u32::MAX));
    // The headers give the size of the picture they decode to (a PNG 16385 to 65536 pixels a
    // side used to decode without a size: found by this target).
    assert_eq!(headers.ok(), Some(size), "the headers give the size of the picture they decode to");
    if let Ok(chw) = convert::image_to_chw(&compressed::view(&p), &t) {
        assert_eq!(chw.len() as u64, u64::from(t.channels * t.height * t.width), "a picture converts to the target's size");
    }
    if Format::sniff(bytes) == Some(Format::Jpeg) {
        let image = Image { channels: t.channels as usize, width: p.width, height: p.height };
        let planar = codec::decode(FrameCodec::Passthrough, &image, bytes, p.height)
            .expect("a JPEG the robot decodes decodes as a passed-through frame too");
        if image.channels == 3 {
            let plane = p.width * p.height;
            let same = (0..plane).all(|i| (0..3).all(|c| planar[c * plane + i] == p.pixels[i * 3 + c]));
            assert!(same, "the passthrough decoder and the robot's give other pixels for the same JPEG");
        }
    }
}

/// The band target's frames: a camera model's two uint8 inputs, an RGB frame of 24x16 and a
/// grey one of 16x8, each normalised.
pub fn band_graph() -> Graph {
    let mut b = GraphBuilder::new("camera");
    let rgb = b.input("image", vec![1, 3, 24, 16], GraphDType::U8);
    let grey = b.input("grey", vec![1, 1, 16, 8], GraphDType::U8);
    let norm = b.add("norm", Op::NormalizeU8 { mean: vec![0.5; 3], std: vec![0.25; 3] }, &[rgb]).expect("the band graph builds");
    let norm_grey = b.add("norm_grey", Op::NormalizeU8 { mean: vec![0.5], std: vec![0.25] }, &[grey]).expect("the band graph builds");
    b.output(norm);
    b.output(norm_grey);
    b.build().expect("the band graph builds")
}

/// The input bands the band target's plan sends (input, rows), on JPEG's 8-row grid.
pub const BAND_TRANSFERS: [(usize, Range<usize>); 6] = [(0, 0..8), (0, 8..24), (0, 0..24), (0, 0..16), (1, 0..16), (1, 8..16)];

/// The plans the band target's first byte picks: how they carry their input bands.
pub const BAND_CODECS: [(FrameCodec, InputWire); 5] = [
    (FrameCodec::Raw, InputWire::Native),
    (FrameCodec::Raw, InputWire::F32),
    (FrameCodec::Lossless, InputWire::Native),
    (FrameCodec::Jpeg { quality: 75 }, InputWire::Native),
    (FrameCodec::Passthrough, InputWire::Native),
];

/// The band target's graph, its facts and one plan per entry of [`BAND_CODECS`].
struct BandPlans {
    graph: Graph,
    meta: GraphMeta,
    plans: Vec<Prepared>,
}

thread_local! {
    static BAND: BandPlans = {
        once_per_process();
        let graph = band_graph();
        let meta = GraphMeta::of(&graph);
        let transfers = BAND_TRANSFERS
            .iter()
            .map(|(node, rows)| ScheduledTransfer { up: true, node: *node, rows: rows.clone(), bytes: 0, producer: None, waiters: Vec::new() })
            .collect();
        let schedule = Schedule { transfers, ..Schedule::default() };
        let plans = BAND_CODECS
            .iter()
            .map(|&(codec, wire)| Prepared {
                bucket: 0,
                bucket_mb_s: 10.0,
                plan_hash: Digest([0; 32]),
                schedule: schedule.clone(),
                expect: meta.expectations(&schedule, wire, codec).expect("the band plan's expected bands"),
                predicted_s: None,
            })
            .collect();
        BandPlans { graph, meta, plans }
    };
}

/// A Band frame as the edge receives one towards its side of an inference: the first byte's low
/// bits pick the plan in force ([`BAND_CODECS`]), the rest is the frame. Classified by header,
/// matched to the plan's bands, turned into its rows of the input (a coded band decoded, its
/// digest checked) and inserted where the server computes, as `runtime/src/exec/side.rs` does.
/// Unless the first byte's top bit is set, a coded band's digest is first replaced by that of
/// the pixels its unit decodes to (no fuzzer forges an xxh3 of pixels), so that everything past
/// the digest check is reached; with it set, the digest is checked as sent.
pub fn band(data: &[u8]) {
    let _ = band_accepted(data);
}

/// [`band`], saying whether the edge took the band in.
pub fn band_accepted(data: &[u8]) -> bool {
    let Some((&which, frame)) = data.split_first() else { return false };
    BAND.with(|b| {
        let plan = &b.plans[usize::from(which & 0x7f) % b.plans.len()];
        let (limits, stats) = (Limits::default(), FrameStats::default());
        let mut frame = frame.to_vec();
        if which & 0x80 == 0 {
            own_digest(&b.meta, plan, &mut frame);
        }
        let Some(Inbound::Band(_, bytes)) = session::classify(&limits, frame, &stats) else { return false };
        let mut received = vec![false; plan.schedule.transfers.len()];
        let Some(band) = session::match_band(&limits, plan, true, bytes, &mut received, &stats) else { return false };
        let t = &plan.schedule.transfers[band.transfer as usize];
        let mut headers = lop_runtime::exec::CameraHeaders::default();
        let Ok(tensor) = band.tensor(&b.meta, (t.node, &t.rows), Device::Cpu, &mut headers) else { return false };
        let info = b.meta.info(t.node);
        let dims = [1, info.shape[1] as i64, t.rows.len() as i64, info.shape[3] as i64];
        assert_eq!(tensor.size(), dims, "a band the edge takes in is its rows of the input");
        assert_eq!(tensor.kind(), Kind::Uint8, "a band of a uint8 input is uint8");
        if band.coding != Coding::Raw {
            let n = tensor.numel();
            let mut pixels = vec![0u8; n];
            tensor.f_copy_data_u8(&mut pixels, n).expect("a band's pixels copy out");
            let payload = &band.frame[band.payload.clone()];
            let named = payload.first_chunk::<CODED_DIGEST_LEN>().map(|d| u64::from_le_bytes(*d));
            assert_eq!(Some(codec::digest(&pixels)), named, "a coded band the edge takes in holds the pixels its digest names");
        }
        let mut exec = lop::exec::SideExec::new(&b.graph, Side::Server);
        exec.insert(t.node, t.rows.clone(), tensor).expect("the server holds a band the edge took in");
        true
    })
}

/// Replaces the digest of a coded band of `plan` by that of the pixels its unit decodes to, when
/// it decodes to the rows its header names: the digest the robot would have sent with that unit.
fn own_digest(meta: &GraphMeta, plan: &Prepared, frame: &mut [u8]) {
    let Ok((h, payload)) = Limits::default().decode_band(frame) else { return };
    let Some(e) = plan.expect.get(&(true, h.tensor_id, h.row_start, h.row_end)) else { return };
    let t = &plan.schedule.transfers[e.transfer as usize];
    let Ok(image) = Image::of(meta.info(t.node)) else { return };
    let Some((_, unit)) = payload.split_first_chunk::<CODED_DIGEST_LEN>() else { return };
    let pixels = match h.coding {
        Coding::Qoi => codec::decode(FrameCodec::Lossless, &image, unit, t.rows.len()),
        Coding::Jpeg | Coding::Camera => codec::decode(FrameCodec::Passthrough, &image, unit, t.rows.len()),
        Coding::JpegScan => codec::restart::decode_unit(&image, unit, t.rows.len()),
        Coding::CameraScan => match codec::camera_scan::split_unit(unit) {
            Ok((Some(header), scan)) => codec::camera_scan::decode_scan(&image, header, scan, t.rows.len()),
            _ => return,
        },
        _ => return,
    };
    let Ok(pixels) = pixels else { return };
    let start = frame.len() - payload.len();
    frame[start..start + CODED_DIGEST_LEN].copy_from_slice(&codec::digest(&pixels).to_le_bytes());
}

/// The model the site target routes frames of, and what one costs (resnet18's order of
/// magnitude at 224x224; the digest's reports give the edges' share).
fn site_cost() -> ModelCost {
    ModelCost { name: "resnet18".into(), input_bytes: 150_528.0, output_bytes: 4_000.0, server_s: 0.004, tail_s: 0.001, robot_s: 0.05 }
}

/// A site digest's bytes (`lop/v1/site/digest/<shard>`), as a robot of a large site hears one:
/// decoded, then the shards three robots listen to from its shard count, and one frame routed by
/// every policy over the edges it lists, their views built as the fleet robot builds them
/// (`runtime/src/fleet/client.rs`).
pub fn site(data: &[u8]) {
    let Ok(d) = LoadDigest::decode(data) else { return };
    let again = LoadDigest::decode(&d.encode().expect("a decoded digest encodes")).expect("a re-encoded digest decodes");
    assert_eq!(again, d, "a site digest survives a round trip");
    let shards = usize::from(d.shards);
    for (robot, heard) in [("jetson-01", 1), ("amr-7", 2), ("r", 3)] {
        let mut wanted = robot_shards(robot_hash(robot), shards, heard);
        assert_eq!(wanted.len(), heard.min(shards), "a robot hears {heard} shards of {shards}: {wanted:?}");
        wanted.sort_unstable();
        wanted.dedup();
        assert!(wanted.len() == heard.min(shards) && wanted.iter().all(|&s| s < shards), "distinct shards of the site: {wanted:?}");
    }
    let cost = site_cost();
    let views: Vec<ServerView> = d
        .edges
        .iter()
        .filter_map(|(load, age_ms)| {
            let m = load.model(&cost.name)?;
            let reported_s = f64::from(m.server_s).max(1e-6);
            Some(ServerView {
                queued_s: (f64::from(m.queued_s) - f64::from(*age_ms) / 1e3).max(0.0),
                speed: cost.server_s / reported_s,
                bytes_per_s: 1e7,
                latency_s: 0.001,
                warm: true,
            })
        })
        .collect();
    let mut rng = lop::Rng::new(d.seq);
    for policy in Policy::ALL {
        let mut router = Router::new(policy, 0);
        for deadline in [0.03, 0.3] {
            if let Choice::Server(j) = router.choose(&cost, 0.0, deadline, cost.robot_s, &views, &mut rng) {
                assert!(j < views.len(), "{policy:?} routed to edge {j} of {}", views.len());
            }
        }
    }
}

/// The table spec the hello target plans with (one bucket: a fast link, where plans split the
/// work); Hello seeds name its hash as their planner's. Planning costs about 65 ms on resnet18
/// at 32x32, two thirds of it the model's content hash (of its 11.7M weights), which
/// `ScheduleTable::build` computes again for each table.
pub fn hello_spec() -> TableSpec {
    TableSpec::latency(vec![50.0], 0.001)
}

/// What the edge and the robot hold when a profile arrives: the model's hash
/// ([`crate::TABLE_MODEL`], shared with the table target) and the profiles of both sides.
struct Sides {
    model_hash: String,
    robot: Profile,
    server: Profile,
}

thread_local! {
    static SIDES: Sides = {
        once_per_process();
        TABLE_GRAPH.with(|g| {
            let (robot, server) = lop::profile::SYNTHETIC.pair(g).expect("synthetic profiles of the table model");
            Sides { model_hash: g.content_hash().expect("the table model's hash"), robot, server }
        })
    };
}

/// A frame that carries a profile: a Hello (the robot's, at the edge), a Welcome or a Planning
/// Reject (the edge's, at the robot). Each profile is checked as its receiver checks it (the
/// edge's `received_profile` in `runtime/src/edge/profiles.rs`, the robot's `start_replan` in
/// `runtime/src/client/replan.rs`: JSON of a profile whose own contents are sane, of the right
/// side, of the model), kept where the edge keeps received ones, and a schedule table planned
/// with it as the receiver does next. The hash a Hello names is the profile's own here (no fuzzer
/// forges a sha256), so everything past that check is reached.
pub fn hello(data: &[u8]) {
    let _ = hello_accepted(data);
}

/// [`hello`], saying whether the frame's profile was taken (a table planned with it).
pub fn hello_accepted(data: &[u8]) -> bool {
    let Ok(frame) = Limits::default().decode(data) else { return false };
    match frame {
        Frame::Hello(h) => robot_profile_at_the_edge(&h),
        Frame::Welcome(w) => server_profile_at_the_robot(&w.server_profile),
        Frame::Reject(r) => server_profile_at_the_robot(&r.server_profile),
        _ => false,
    }
}

fn robot_profile_at_the_edge(h: &Hello) -> bool {
    // The link's check (runtime/src/zenoh_link/edge_shared.rs): a valid robot id's hello key names it, in
    // the single edge's key space and in a fleet edge's.
    if lop_msgs::validate_robot_id(&h.robot_id).is_ok() {
        for keys in [SessionKeys::single(), SessionKeys::fleet("gpu-1").expect("a fleet edge id")] {
            let key = keys.hello(&h.robot_id).expect("a valid robot id has a hello key");
            assert_eq!(keys.robot_of_hello(&key), Some(h.robot_id.as_str()), "a Hello's key names its robot");
        }
    }
    if h.robot_profile.is_empty() {
        return false;
    }
    SIDES.with(|s| {
        let Some(p) = received(&h.robot_profile, Side::Robot) else { return false };
        if p.model_hash != s.model_hash {
            return false;
        }
        let (hash, now) = (p.hash(), Instant::now());
        let mut store = ReceivedProfiles::default();
        let _ = store.insert(&h.robot_id, p.clone(), now);
        assert_eq!(store.get(&hash, now).as_ref(), Some(&p), "a received profile just kept is found by its hash");
        plan_with(&p, &s.server)
    })
}

fn server_profile_at_the_robot(json: &[u8]) -> bool {
    if json.is_empty() {
        return false;
    }
    SIDES.with(|s| match received(json, Side::Server) {
        Some(p) => plan_with(&s.robot, &p),
        None => false,
    })
}

/// A profile's JSON as a receiver takes it: parsed, its hash stable over a round trip (so that
/// both sides key the same table by it), its own contents checked, of side `role`.
fn received(json: &[u8], role: Side) -> Option<Profile> {
    let p: Profile = serde_json::from_slice(json).ok()?;
    let printed = serde_json::to_vec(&p).expect("a parsed profile prints");
    let again: Profile = serde_json::from_slice(&printed).expect("a printed profile parses");
    assert_eq!(again.hash(), p.hash(), "a profile, printed and parsed again, keeps its hash");
    (p.check().is_ok() && p.role == role).then_some(p)
}

/// The table the receiver plans next (the edge for the robot's profile, the robot for the
/// edge's), with the frame codec priced as the edge's spec prices it.
fn plan_with(robot: &Profile, server: &Profile) -> bool {
    let spec = hello_spec();
    let _ = spec.clone().with_frame_codec(FrameCodec::Lossless, robot, server);
    TABLE_GRAPH.with(|g| {
        let Ok((table, _)) = ScheduleTable::build(g, robot, server, &spec, 1) else { return false };
        assert_eq!(
            (&table.key.robot_profile_hash, &table.key.server_profile_hash),
            (&robot.hash(), &server.hash()),
            "a table is keyed by the profiles it was planned with"
        );
        true
    })
}
