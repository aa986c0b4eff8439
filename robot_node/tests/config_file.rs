//! `config/robot.yaml` documents every parameter of the three nodes with its default: each
//! node's section names exactly the parameters the node reads, each with the default value.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use robot_node::config::{BandwidthConfig, PowerConfig, RobotConfig};
use robot_node::params::{Params, RosArgs};

fn check(node: &str, read: impl Fn(&mut Params)) {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/robot.yaml");
    let mut p = Params::load(node, Some(&file), &RosArgs::default()).unwrap();
    read(&mut p);
    assert!(p.unknown().is_empty(), "{node}: parameters in the file that the node does not read: {:?}", p.unknown());
    let mut defaults = Params::empty(node);
    read(&mut defaults);
    let missing: Vec<&str> =
        defaults.declared().iter().map(|d| d.name.as_str()).filter(|n| !p.declared().iter().any(|d| &d.name == n)).collect();
    assert!(missing.is_empty(), "{node}: {missing:?}");
    for d in p.declared() {
        assert_eq!(d.value, d.default, "{node}: {} in the file is not its default", d.name);
    }
    // Every parameter the node reads appears in the file (the file's values were all used).
    let text = std::fs::read_to_string(&file).unwrap();
    for d in p.declared() {
        let leaf = d.name.rsplit('.').next().unwrap();
        assert!(text.contains(&format!("{leaf}:")), "{node}: {} is not documented", d.name);
    }
}

#[test]
fn robot_yaml_documents_every_parameter_with_its_default() {
    check("lop_robot", |p| drop(RobotConfig::from_params(p).unwrap()));
    check("lop_bandwidth", |p| drop(BandwidthConfig::from_params(p).unwrap()));
    check("lop_power", |p| drop(PowerConfig::from_params(p).unwrap()));
}

/// The two-camera example under `cameras:` in `config/robot.yaml`, given as a second
/// parameters file over the first, makes two cameras with the settings it shows, every
/// parameter known.
#[test]
fn robot_yaml_shows_two_cameras() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/robot.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let example: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("# Two cameras"))
        .skip(1)
        .take_while(|l| l.trim_start().starts_with('#'))
        .map(|l| l.trim_start().trim_start_matches('#'))
        .collect();
    assert!(example.len() > 5, "no two-camera example in config/robot.yaml: {example:?}");
    let overlay = std::env::temp_dir().join(format!("lop-two-cameras-{}.yaml", std::process::id()));
    std::fs::write(
        &overlay,
        format!("lop_robot:\n  ros__parameters:\n{}\n", example.iter().map(|l| format!("   {l}")).collect::<Vec<_>>().join("\n")),
    )
    .unwrap();
    let args = RosArgs { params_files: vec![overlay.clone()], ..RosArgs::default() };
    let mut p = Params::load("lop_robot", Some(&file), &args).unwrap();
    let _ = std::fs::remove_file(&overlay);
    let cfg = RobotConfig::from_params(&mut p).unwrap();
    assert!(p.unknown().is_empty(), "{:?}", p.unknown());
    let topics: Vec<(String, String)> = cfg.inputs.iter().map(|c| (c.name.clone(), c.input_topic())).collect();
    assert_eq!(topics, [("front".into(), "/front/image_raw".into()), ("rear".into(), "/rear/image_raw/compressed".into())]);
    assert_eq!(cfg.inputs[1].fit, Some(robot_node::convert::Fit::Letterbox { pad: 0 }));
}

#[test]
fn command_line_overrides_and_bad_values() {
    let args = RosArgs::parse(
        &["--ros-args", "-p", "edge.endpoint:=tcp/10.0.0.2:7447", "-p", "dilation:=20", "-p", "table.bandwidth_scale:=auto"]
            .map(String::from),
    )
    .unwrap();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/robot.yaml");
    let mut p = Params::load("lop_robot", Some(&file), &args).unwrap();
    let cfg = RobotConfig::from_params(&mut p).unwrap();
    assert_eq!(cfg.edge.endpoint, "tcp/10.0.0.2:7447");
    assert_eq!(cfg.dilation, 20.0);
    assert_eq!(cfg.table.bandwidth_scale, lop_runtime::table_config::ScaleSetting::Word("auto".into()));
    assert!(!cfg.edge.fleet());
    let fleet = RosArgs::parse(&["-p", "edge.mode:=fleet", "-p", "edge.deadline_ms:=150"].map(String::from)).unwrap();
    let cfg = RobotConfig::from_params(&mut Params::load("lop_robot", Some(&file), &fleet).unwrap()).unwrap();
    assert!(cfg.edge.fleet());
    assert_eq!(cfg.fleet_deadline, std::time::Duration::from_millis(150));
    assert_eq!(cfg.fleet_lanes, 1);
    assert!(cfg.fleet_deadline_binding, "a fleet robot never idles past a deadline unless told to");
    let loose = RosArgs::parse(&["-p", "edge.mode:=fleet", "-p", "edge.deadline_binding:=false"].map(String::from)).unwrap();
    assert!(!RobotConfig::from_params(&mut Params::load("lop_robot", Some(&file), &loose).unwrap()).unwrap().fleet_deadline_binding);
    let lanes = RosArgs::parse(&["-p", "edge.mode:=fleet", "-p", "edge.lanes:=4"].map(String::from)).unwrap();
    assert_eq!(RobotConfig::from_params(&mut Params::load("lop_robot", Some(&file), &lanes).unwrap()).unwrap().fleet_lanes, 4);
    assert_eq!(cfg.fleet_site_shards, None, "robots hear every edge by default");
    let site =
        RosArgs::parse(&["-p", "edge.mode:=fleet", "-p", "edge.hear:=site", "-p", "edge.shards_heard:=2"].map(String::from)).unwrap();
    assert_eq!(RobotConfig::from_params(&mut Params::load("lop_robot", Some(&file), &site).unwrap()).unwrap().fleet_site_shards, Some(2));
    for (bad, says) in [
        (&["-p", "edge.mode:=fleet", "-p", "edge.hear:=some"][..], "edge.hear"),
        (&["-p", "edge.mode:=fleet", "-p", "edge.hear:=site", "-p", "edge.shards_heard:=0"], "edge.shards_heard"),
        (&["-p", "edge.hear:=site"], "edge.mode: fleet"),
    ] {
        let args = RosArgs::parse(&bad.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        let err = RobotConfig::from_params(&mut Params::load("lop_robot", None, &args).unwrap()).err().map(|e| e.to_string());
        assert!(err.as_deref().is_some_and(|e| e.contains(says)), "{bad:?}: {err:?}");
    }
    // Lanes spread frames over a fleet: with one edge configured they are an error, as is a
    // robot id that leaves no room for the lanes' ids or is itself a lane's.
    for bad in [
        &["-p", "edge.lanes:=2"][..],
        &["-p", "edge.mode:=fleet", "-p", "edge.lanes:=9"],
        &["-p", "edge.mode:=fleet", "-p", "edge.lanes:=0"],
        &["-p", "edge.mode:=fleet", "-p", "edge.lanes:=2", "-p", "robot_id:=r1.lane3"],
    ] {
        let args = RosArgs::parse(&bad.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        let err = RobotConfig::from_params(&mut Params::load("lop_robot", None, &args).unwrap()).err().map(|e| e.to_string());
        assert!(err.as_deref().is_some_and(|e| e.contains("lane")), "{bad:?}: {err:?}");
    }
    for bad in [
        "method:=fastest",
        "dilation:=0.5",
        "input:=radar",
        "image.fit:=crop",
        "table.input_wire:=f16",
        "edge.mode:=router",
        "edge.deadline_ms:=0",
        // Numbers a node turns into durations: refused by name, not a panic where they are used
        // (the hour-long fuzz run found 2e49 ms).
        "edge.deadline_ms:=2e49",
        "diagnostics_period_s:=1e300",
        "deadline_factor:=1e300",
        "edge.deadline_binding:=maybe",
    ] {
        let args = RosArgs::parse(&["-p".to_string(), bad.to_string()]).unwrap();
        let mut p = Params::load("lop_robot", None, &args).unwrap();
        let err = RobotConfig::from_params(&mut p).err().map(|e| e.to_string()).unwrap_or_default();
        let name = bad.split(":=").next().unwrap().rsplit('.').next().unwrap();
        assert!(err.contains(name), "{bad}: {err}");
    }
}

/// lop_bandwidth's and lop_power's rates and windows: each a duration or a buffer where it is
/// used, so bounded where it is read, by name.
#[test]
fn rates_and_windows_are_bounded_by_name() {
    let load = |node: &str, kvs: &str| {
        let args: Vec<String> = kvs.split(' ').flat_map(|kv| ["-p".to_string(), kv.to_string()]).collect();
        let mut p = Params::load(node, None, &RosArgs::parse(&args).unwrap()).unwrap();
        match node {
            "lop_bandwidth" => BandwidthConfig::from_params(&mut p).err(),
            _ => PowerConfig::from_params(&mut p).err(),
        }
        .map(|e| e.to_string())
    };
    for (node, bad, says) in [
        ("lop_bandwidth", "rate_hz:=1e-300", "rate_hz must be in [0.01, 1000]"),
        ("lop_power", "rate_hz:=1e-300", "rate_hz must be in [0.01, 10000]"),
        ("lop_power", "publish_hz:=1e-300", "publish_hz must be in [0.01, 1000]"),
        ("lop_power", "window_s:=1e300", "window_s must be in [0.01, 3600]"),
        ("lop_power", "rate_hz:=1000 window_s:=3600", "rate_hz x window_s must keep at most 1000000 readings"),
    ] {
        let err = load(node, bad).unwrap_or_default();
        assert!(err.contains(says), "{node} {bad}: {err}");
    }
    assert_eq!(load("lop_power", "window_s:=600"), None, "100 Hz for 600 s is 60,000 readings");
}

/// The edge session's TLS and password parameters: all three TLS files or none, a tls/
/// endpoint needs them, files must exist, user and password file go together.
#[test]
fn edge_tls_and_password_parameters() {
    let dir = std::env::temp_dir().join(format!("lop-robot-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    lop_runtime::security::certs::make_site_certs(
        &dir,
        &lop_runtime::security::certs::CertsRequest { robots: vec!["r1".into()], edge_names: vec![], days: 1 },
    )
    .unwrap();
    std::fs::write(dir.join("pw"), "secret\n").unwrap();
    let d = dir.display();
    let load = |extra: &[String]| {
        let args = RosArgs::parse(extra).unwrap();
        RobotConfig::from_params(&mut Params::load("lop_robot", None, &args).unwrap()).map_err(|e| e.to_string())
    };
    let p = |kv: String| ["-p".to_string(), kv];
    let tls: Vec<String> = [
        p("edge.endpoint:=tls/gpu-1.lab:7447".into()),
        p(format!("edge.tls.ca:={d}/ca.pem")),
        p(format!("edge.tls.cert:={d}/robot-r1.pem")),
        p(format!("edge.tls.key:={d}/robot-r1.key")),
        p("edge.user:=r1".into()),
        p(format!("edge.password_file:={d}/pw")),
    ]
    .concat();
    let cfg = load(&tls).unwrap();
    assert!(cfg.edge.security.has_tls());
    assert_eq!(cfg.edge.security.login.as_ref().map(|l| l.password.as_str()), Some("secret"));

    let err = load(&p("edge.endpoint:=tls/gpu-1.lab:7447".into())).unwrap_err();
    assert!(err.contains("edge.tls"), "{err}");
    let err = load(&[p("edge.tls.ca:=x".into()), p("edge.tls.cert:=y".into())].concat()).unwrap_err();
    assert!(err.contains("together"), "{err}");
    let missing = [
        p(format!("edge.tls.ca:={d}/nope.pem")),
        p(format!("edge.tls.cert:={d}/robot-r1.pem")),
        p(format!("edge.tls.key:={d}/robot-r1.key")),
    ];
    let err = load(&missing.concat()).unwrap_err();
    assert!(err.contains("nope.pem"), "a missing file is named: {err}");
    let err = load(&p("edge.user:=r1".into())).unwrap_err();
    assert!(err.contains("password_file"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
