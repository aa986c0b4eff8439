//! What operators install beside `lop_edge` (docs/edge.md, "Dashboard and alerts"): the Grafana
//! dashboard `deploy/grafana/lop-edge.json` and the alerting rules
//! `deploy/prometheus/lop-edge-rules.yaml` with their unit tests.
//!
//! - `promtool check rules` and `promtool test rules` pass on the committed files, every alert is
//!   tested both firing and silent, and the dashboard's PromQL parses (Debian's `prometheus`
//!   package, installed by `scripts/setup.sh --test-deps`; without it these tests fail).
//! - Every metric and label the dashboard and the rules name is one `lop_edge` exports:
//!   [`exported_families`], itself checked here against an exposition rendered with every family
//!   but the GPUs' present, so that a renamed family fails this test rather than empty a panel.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use edge_server::metrics::{Desc, Kind, Metrics, exported_families};
use lop_runtime::edge::{EdgeOptions, EdgeService, Served, ServedOutcome, ServerDevice};

const RULES: &str = "deploy/prometheus/lop-edge-rules.yaml";
const RULES_TEST: &str = "deploy/prometheus/lop-edge-rules.test.yaml";
const DASHBOARD: &str = "deploy/grafana/lop-edge.json";

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The repository's file `rel`.
fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `promtool ARGS` run in the repository's root: its output, or a failure naming the package.
fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool").args(args).current_dir(root()).output().unwrap_or_else(|e| {
        panic!(
            "promtool did not run ({e}): install Debian's prometheus package \
             (scripts/setup.sh --test-deps, or apt-get install -y --no-install-recommends prometheus)"
        )
    });
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool {} failed:\n{text}", args.join(" "));
    text
}

/// The rules file's alerting rules.
fn alerts() -> Vec<serde_yaml_ng::Value> {
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(&read(RULES)).unwrap();
    let groups = rules["groups"].as_sequence().unwrap();
    groups.iter().flat_map(|g| g["rules"].as_sequence().unwrap().iter().cloned()).filter(|r| r.get("alert").is_some()).collect()
}

/// Every PromQL expression of the dashboard: its targets' `expr`, and the selector inside each
/// `label_values(SELECTOR, LABEL)` variable query, with that LABEL.
fn dashboard_exprs() -> (Vec<String>, Vec<String>) {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(e) = m.get("expr").and_then(|e| e.as_str()) {
                    out.push(e.to_string());
                }
                m.values().for_each(|v| walk(v, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let dash: serde_json::Value = serde_json::from_str(&read(DASHBOARD)).unwrap();
    let mut exprs = Vec::new();
    walk(&dash["panels"], &mut exprs);
    let mut labels = Vec::new();
    for var in dash["templating"]["list"].as_array().unwrap().iter().filter(|v| v["type"] == "query") {
        let q = var["query"]["query"].as_str().or(var["query"].as_str()).unwrap();
        let inner = q.strip_prefix("label_values(").and_then(|q| q.strip_suffix(')'));
        let (selector, label) =
            inner.and_then(|i| i.rsplit_once(',')).unwrap_or_else(|| panic!("variable query {q}: not label_values(...)"));
        exprs.push(selector.trim().to_string());
        labels.push(label.trim().to_string());
    }
    (exprs, labels)
}

/// PromQL's aggregations, operators, modifiers and constants: identifiers that name no metric
/// though no `(` may follow them (functions are told by the `(` that always follows them).
const KEYWORDS: &str = "sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio \
                        by without on ignoring group_left group_right bool offset and or unless atan2 inf nan";

/// The metric names and label names a PromQL expression reads: bare identifiers that are not
/// [`KEYWORDS`] nor followed by `(` are metrics; identifiers inside `{...}` and in the lists of
/// `by`, `without`, `on`, `ignoring`, `group_left` and `group_right` are labels. Strings, ranges
/// (`[5m]`), numbers and Grafana variables (`$__rate_interval`) are skipped.
fn promql_names(expr: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let b = expr.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let (mut metrics, mut labels) = (BTreeSet::new(), BTreeSet::new());
    let (mut i, mut braces, mut list) = (0, false, false);
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\'' || c == b'`' {
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == b'[' {
            while i < b.len() && b[i] != b']' {
                i += 1;
            }
        } else if c == b'$' && b.get(i + 1) == Some(&b'{') {
            while i < b.len() && b[i] != b'}' {
                i += 1;
            }
            i += 1;
        } else if c == b'$' || c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            i += 1;
            while i < b.len() && (ident(b[i]) || b[i] == b'.') {
                i += 1;
            }
        } else if c == b'{' || c == b'}' {
            braces = c == b'{';
            i += 1;
        } else if c == b')' {
            list = false;
            i += 1;
        } else if ident(c) {
            let start = i;
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            let word = &expr[start..i];
            let next = b[i..].iter().find(|c| !c.is_ascii_whitespace()).copied();
            if braces || list {
                labels.insert(word.to_string());
            } else if ["by", "without", "on", "ignoring", "group_left", "group_right"].contains(&word) {
                list = next == Some(b'(');
            } else if next != Some(b'(') && !KEYWORDS.split_whitespace().any(|k| k == word) {
                metrics.insert(word.to_string());
            }
        } else {
            i += 1;
        }
    }
    (metrics, labels)
}

/// Each series name PromQL may select (`lop_edge_inferences_total`, `..._bucket`) with its family.
fn series_names() -> BTreeMap<String, Desc> {
    exported_families().into_iter().flat_map(|d| d.kind.series(&d.full_name()).into_iter().map(move |s| (s, d))).collect()
}

#[test]
fn promql_names_reads_metrics_and_labels() {
    let (m, l) = promql_names(
        "histogram_quantile(0.95, sum by (job, le) (rate(a_bucket{x=\"1\",y=~\"$v|{w}\"}[$__rate_interval]))) \
         / on (job) group_left b > 1e3 or label_replace(sum without (z) (c), \"d\", \"e\", \"\", \"\") unless up offset 5m",
    );
    assert_eq!(m, ["a_bucket", "b", "c", "up"].map(String::from).into(), "metrics");
    assert_eq!(l, ["job", "le", "x", "y", "z"].map(String::from).into(), "labels");
}

/// The families rendered with every one but the GPUs' present: one served inference observed,
/// the service attached (no model: its per-model families have no sample, but their descriptors
/// are written).
#[tokio::test]
async fn exported_families_are_the_exposition() {
    let cfg = edge_server::EdgeConfig::parse("models:\n  - id: r18\n    source: zoo:resnet18\n", Path::new("edge.yaml")).unwrap();
    let opts = EdgeOptions {
        models: Vec::new(),
        robot_profiles: Vec::new(),
        profiles_dir: None,
        spec: cfg.table_spec().unwrap(),
        cache_dir: std::env::temp_dir().join("lop-edge-deploy-unused"),
        replicas: 1,
        devices: vec![ServerDevice::only(tch::Device::Cpu)],
        limits: Default::default(),
        hello_timeout: Duration::from_secs(5),
        table_wait: Duration::from_secs(1),
        dilation: 1.0,
        memory_budget: None,
        batching: Default::default(),
    };
    let metrics = Metrics::new();
    metrics.attach(EdgeService::start(opts).await.unwrap());
    let now = Instant::now();
    metrics.observe(&Served {
        inference_id: 1,
        robot_id: "robot".into(),
        model_id: "r18".into(),
        replica: 0,
        start: now,
        end: now + Duration::from_millis(30),
        start_wall: SystemTime::now(),
        server_compute_s: 0.01,
        bytes_received: 1000,
        bytes_sent: 100,
        upload_s: 0.01,
        queue_s: 0.001,
        batch: 1,
        download_s: 0.002,
        device: "cpu".into(),
        outcome: ServedOutcome::Done,
    });
    let text = metrics.encode().unwrap();
    let rendered: BTreeSet<(String, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, k)| (n.to_string(), k.to_string()))
        .collect();
    let (gpu, listed): (Vec<Desc>, Vec<Desc>) = exported_families().into_iter().partition(|d| d.name.starts_with("gpu_"));
    assert_eq!(gpu.len(), 5, "the GPU families, not rendered without NVML: {gpu:?}");
    let listed: BTreeSet<(String, String)> = listed.iter().map(|d| (d.full_name(), d.kind.as_str().to_string())).collect();
    assert_eq!(rendered, listed, "families rendered (left) and listed by exported_families (right)\n{text}");
    // Every sample is named as its family's kind says, and carries only its listed label keys.
    let series = series_names();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let name = &line[..line.find(['{', ' ']).unwrap()];
        let d = series.get(name).unwrap_or_else(|| panic!("sample {line}: no listed family has it"));
        let body = line.split_once('{').and_then(|(_, r)| r.split_once('}')).map_or("", |(l, _)| l);
        for key in body.split(',').filter(|kv| !kv.is_empty()).map(|kv| kv.split_once('=').unwrap().0) {
            assert!(d.labels.contains(&key) || (key == "le" && d.kind == Kind::Histogram), "sample {line}: label {key} not listed");
        }
    }
}

#[test]
fn dashboard_and_rules_name_only_what_lop_edge_exports() {
    let series = series_names();
    let mut known_labels: BTreeSet<&str> = exported_families().iter().flat_map(|d| d.labels.iter().copied()).collect();
    known_labels.extend(["le", "job", "instance"]);
    let (mut exprs, var_labels) = dashboard_exprs();
    let on_dashboard = exprs.len();
    exprs.extend(alerts().iter().map(|r| r["expr"].as_str().unwrap().to_string()));
    let (mut unknown, mut used) = (BTreeSet::new(), BTreeSet::new());
    let mut unknown_labels: BTreeSet<String> = var_labels.into_iter().filter(|l| !known_labels.contains(l.as_str())).collect();
    for e in &exprs {
        let (metrics, labels) = promql_names(e);
        for m in metrics {
            match series.get(&m) {
                Some(d) => {
                    used.insert(d.full_name());
                }
                None if m == "up" => {}
                None => {
                    unknown.insert(format!("{m} (in {e})"));
                }
            }
        }
        unknown_labels.extend(labels.into_iter().filter(|l| !known_labels.contains(l.as_str())));
    }
    assert!(unknown.is_empty(), "metrics lop_edge does not export:\n{}", unknown.into_iter().collect::<Vec<_>>().join("\n"));
    assert!(unknown_labels.is_empty(), "labels lop_edge's metrics do not carry: {unknown_labels:?}");
    // The dashboard shows every family (a new one belongs on it too).
    let mut shown = BTreeSet::new();
    for e in &exprs[..on_dashboard] {
        shown.extend(promql_names(e).0.into_iter().filter_map(|m| series.get(&m).map(Desc::full_name)));
    }
    let missing: Vec<String> = exported_families().iter().map(Desc::full_name).filter(|n| !shown.contains(n)).collect();
    assert!(missing.is_empty(), "families not on the dashboard {DASHBOARD}: {missing:?}");
    assert!(used.contains("lop_edge_inference_seconds"), "the rules' latency alert reads lop_edge_inference_seconds: {used:?}");
}

#[tokio::test]
async fn promtool_checks_and_tests_the_rules() {
    let _heavy = crate::HEAVY.lock().await;
    let checked = promtool(&["check", "rules", RULES]);
    let alerts = alerts();
    assert!(checked.contains(&format!("SUCCESS: {} rules found", alerts.len())), "{checked}");
    promtool(&["test", "rules", RULES_TEST]);
    // Every alert is asserted firing (with its labels and annotations) and silent.
    let tests: serde_yaml_ng::Value = serde_yaml_ng::from_str(&read(RULES_TEST)).unwrap();
    let cases: Vec<&serde_yaml_ng::Value> =
        tests["tests"].as_sequence().unwrap().iter().flat_map(|t| t["alert_rule_test"].as_sequence().unwrap()).collect();
    for rule in &alerts {
        let name = rule["alert"].as_str().unwrap();
        assert!(rule.get("for").is_some(), "{name}: no for:");
        assert!(["warning", "critical"].contains(&rule["labels"]["severity"].as_str().unwrap_or("")), "{name}: severity");
        assert!(rule["annotations"]["summary"].is_string() && rule["annotations"]["description"].is_string(), "{name}: annotations");
        let of = |fires: bool| {
            cases.iter().filter(|c| c["alertname"].as_str() == Some(name)).any(|c| {
                let exp = c["exp_alerts"].as_sequence().map_or(0, Vec::len);
                let annotated = c["exp_alerts"].as_sequence().into_iter().flatten().all(|a| a["exp_annotations"].is_mapping());
                if fires { exp > 0 && annotated } else { exp == 0 }
            })
        };
        assert!(of(true) && of(false), "{name}: {RULES_TEST} must show it firing, with its annotations, and silent");
    }
    // The dashboard's queries parse: each as a recording rule, Grafana's interval variables set.
    let (exprs, _) = dashboard_exprs();
    let mut yaml = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let e = e.replace("$__rate_interval", "5m").replace("$__interval", "1m");
        yaml.push_str(&format!("      - record: dashboard:query_{i}\n        expr: {}\n", serde_json::to_string(&e).unwrap()));
    }
    let dir = lop_runtime::scratch::scratch_dir("lop-edge-deploy", "dashboard");
    let file = dir.join("dashboard-queries.yaml");
    std::fs::write(&file, yaml).unwrap();
    let checked = promtool(&["check", "rules", file.to_str().unwrap()]);
    assert!(checked.contains(&format!("SUCCESS: {} rules found", exprs.len())), "{checked}");
    let _ = std::fs::remove_dir_all(&dir);
}
