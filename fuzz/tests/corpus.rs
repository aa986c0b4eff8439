//! Replays the committed corpus of every fuzz target through its body, so that inputs the
//! fuzzer once found (crashes fixed, and the seeds) are checked on every test run, and checks that
//! each corpus holds inputs its reader accepts, so that the fuzzer starts past the first error.
#![allow(clippy::unwrap_used)]

use std::path::Path;

fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = lop_fuzz::corpus_dir(target);
    let mut files: Vec<_> =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).collect();
    files.sort();
    files.into_iter().map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())).collect()
}

#[test]
fn every_committed_input_runs_through_its_target() {
    for (target, body) in lop_fuzz::TARGETS {
        let inputs = inputs(target);
        assert!(inputs.len() >= 2, "the {target} corpus has {} inputs", inputs.len());
        for (name, bytes) in &inputs {
            // A panic names the input; libFuzzer would have reported it as a crash.
            let r = std::panic::catch_unwind(|| body(bytes));
            assert!(r.is_ok(), "fuzz/corpus/{target}/{name} crashes the {target} target");
        }
    }
}

#[test]
fn the_seeds_are_inputs_their_readers_accept() {
    use lop_msgs::protocol::decode;
    for (name, bytes) in inputs("frame").iter().filter(|(n, _)| ["hello", "band", "band-coded", "done"].contains(&n.as_str())) {
        assert!(decode(&bytes[1..]).is_ok(), "frame seed {name} does not decode");
    }
    let table = std::fs::read_to_string(lop_fuzz::corpus_dir("table").join("resnet18-32-fast")).unwrap();
    assert!(lop::planner::table::ScheduleTable::from_json(&table, "seed").is_ok(), "the table seed does not load");
    let edge = std::fs::read(lop_fuzz::corpus_dir("config").join("edge")).unwrap();
    let text = std::str::from_utf8(&edge[1..]).unwrap();
    assert!(edge_server::config::EdgeConfig::parse(text, Path::new("/x/edge.yaml")).is_ok(), "the edge config seed does not parse");
    let onnx = inputs("onnx");
    let imported = onnx.iter().filter(|(_, b)| lop::onnx::import_bytes(b, "seed", None, &Default::default()).is_ok()).count();
    assert!(imported >= 2, "only {imported} of {} onnx seeds import", onnx.len());
}

#[test]
fn the_new_readers_accept_their_seeds() {
    use hiroz::msg::ZMessage;
    for (name, bytes) in inputs("picture") {
        let m = robot_node::backend::hiroz::compressed_in(hiroz_msgs::sensor_msgs::CompressedImage::deserialize(&bytes[1..]).unwrap());
        let cap = lop_fuzz::PICTURE_MAX_PIXELS as usize;
        let decoded = robot_node::convert::compressed::decode(&m.format, (*m.data).as_ref(), cap);
        assert!(decoded.is_ok(), "picture seed {name} does not decode");
    }
    let bands = inputs("band");
    for (name, bytes) in &bands {
        assert!(lop_fuzz::band_accepted(bytes), "band seed {name} is not taken in by the edge");
    }
    for (which, _) in lop_fuzz::BAND_CODECS.iter().enumerate() {
        assert!(bands.iter().any(|(_, b)| usize::from(b[0] & 0x7f) == which), "no band seed for plan {which}");
    }
    for (name, bytes) in inputs("site") {
        assert!(lop_msgs::site::LoadDigest::decode(&bytes).is_ok(), "site seed {name} does not decode");
    }
    let hellos = inputs("hello");
    for (name, bytes) in &hellos {
        assert!(lop_msgs::protocol::decode(bytes).is_ok(), "hello seed {name} does not decode");
    }
    let planned = hellos.iter().filter(|(_, b)| lop_fuzz::hello_accepted(b)).count();
    assert!(planned >= 4, "only {planned} of {} hello seeds carry a profile a table is planned with", hellos.len());
}
