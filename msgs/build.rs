//! Build script of `lop_msgs`.
//!
//! With feature `ros`, generates the Rust types of `msg/*.msg` (package `lop_msgs`) and of
//! `vision_msgs/msg/*.msg` (vision_msgs' detection messages, field for field) with hiroz-codegen (the same
//! generator hiroz-msgs uses, so the types implement `hiroz::MessageTypeInfo` with the REP-2011
//! RIHS01 hash of ROS Jazzy, and the CDR traits that make them `hiroz::msg::ZMessage`), plus a
//! table of each type's ROS name, DDS name and hash. Without `ros` it does nothing.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=msg");
    println!("cargo:rerun-if-changed=package.xml");
    println!("cargo:rerun-if-changed=vision_msgs");
    #[cfg(feature = "ros")]
    ros::generate()?;
    Ok(())
}

#[cfg(feature = "ros")]
mod ros {
    use std::collections::HashSet;
    use std::env;
    use std::fmt::Write as _;
    use std::path::{Path, PathBuf};

    /// The ROS distro whose bundled interface definitions (std_msgs, builtin_interfaces, ...) the
    /// hashes are computed against; hiroz-msgs' default, matching hiroz's default `jazzy` feature.
    const DISTRO: &str = "jazzy";
    /// The package name in package.xml.
    const PACKAGE: &str = "lop_msgs";
    /// The vision_msgs subset in `vision_msgs/` (its own package.xml).
    const VISION: &str = "vision_msgs";

    pub fn generate() -> Result<(), Box<dyn std::error::Error>> {
        let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
        let out_dir = PathBuf::from(env::var("OUT_DIR")?);

        let discovered = hiroz_codegen::discovery::discover_package_name(&manifest_dir).map_err(|e| format!("{e:#}"))?;
        if discovered != PACKAGE {
            return Err(format!("package.xml names package {discovered:?}, expected {PACKAGE:?}").into());
        }
        let vision_dir = manifest_dir.join(VISION);
        let vision = hiroz_codegen::discovery::discover_package_name(&vision_dir).map_err(|e| format!("{e:#}"))?;
        if vision != VISION {
            return Err(format!("vision_msgs/package.xml names package {vision:?}, expected {VISION:?}").into());
        }

        // Every bundled standard package is loaded for hash resolution only (no code emitted: the
        // types come from hiroz_msgs), so references to them hash exactly as in ROS Jazzy.
        let assets = hiroz_codegen::bundled_assets_dir_for(DISTRO);
        let mut deps: Vec<PathBuf> = Vec::new();
        for entry in std::fs::read_dir(&assets)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            // Test and example packages are nothing lop_msgs may depend on (and hold wstring types
            // hiroz-codegen skips with a warning).
            if name.starts_with("test_") || name == "example_interfaces" {
                continue;
            }
            if path.join("msg").is_dir() || path.join("srv").is_dir() || path.join("action").is_dir() {
                deps.push(path);
            }
        }
        deps.sort();
        println!("cargo:rustc-env=LOP_MSGS_ROS_ASSETS={}", assets.display());

        let manifest_json = out_dir.join("lop_msgs_manifest.json");
        let config = hiroz_codegen::GeneratorConfig {
            generate_cdr: true,
            generate_protobuf: false,
            generate_type_info: true,
            is_humble: false,
            output_dir: out_dir.clone(),
            external_crate: Some("hiroz_msgs".to_string()),
            local_packages: HashSet::from([PACKAGE.to_string(), VISION.to_string()]),
            json_out: Some(manifest_json.clone()),
        };
        let dep_refs: Vec<&Path> = deps.iter().map(PathBuf::as_path).collect();
        hiroz_codegen::MessageGenerator::new(config)
            .generate_from_msg_files_with_deps(&[manifest_dir.as_path(), vision_dir.as_path()], &dep_refs)
            .map_err(|e| format!("hiroz-codegen failed on {}/msg: {e:#}", manifest_dir.display()))?;

        write_type_table(&manifest_json, &out_dir.join("type_table.rs"))
    }

    /// Writes `impl T { pub const ROS_TYPE: RosType = ... }` for every generated message,
    /// `pub const ALL_TYPES: &[RosType]` (lop_msgs) and `pub const VISION_TYPES: &[RosType]`, from
    /// hiroz-codegen's JSON manifest (its resolved hashes).
    fn write_type_table(manifest: &Path, out: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(manifest)?)?;
        let messages = manifest["messages"].as_array().ok_or("manifest without messages")?;
        let mut entries: Vec<(String, String, String)> = Vec::new();
        for m in messages {
            let package = m["package"].as_str().ok_or("message without package")?;
            let name = m["name"].as_str().ok_or("message without name")?;
            let hash = m["type_hash"].as_str().ok_or("message without type_hash")?;
            if package != PACKAGE && package != VISION {
                continue;
            }
            let valid = hash.strip_prefix("RIHS01_").is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
            if !valid || hash.ends_with(&"0".repeat(64)) {
                return Err(format!("{package}/msg/{name}: unusable type hash {hash:?}").into());
            }
            entries.push((package.to_string(), name.to_string(), hash.to_string()));
        }
        for package in [PACKAGE, VISION] {
            if !entries.iter().any(|(p, _, _)| p == package) {
                return Err(format!("no {package} messages generated").into());
            }
        }
        entries.sort();

        let mut code = String::from("// Generated by lop_msgs' build.rs from hiroz-codegen's resolved types. Do not edit.\n\n");
        let module = |package: &str| if package == PACKAGE { "msg" } else { "vision" };
        for (package, name, hash) in &entries {
            writeln!(
                code,
                "impl {}::{name} {{\n    /// ROS name, DDS name and REP-2011 type hash of `{package}/msg/{name}`.\n    \
                 pub const ROS_TYPE: RosType = RosType {{ name: \"{package}/msg/{name}\", dds_name: \"{package}::msg::dds_::{name}_\", \
                 hash: \"{hash}\" }};\n}}\n",
                module(package)
            )?;
        }
        for (package, list, what) in [(PACKAGE, "ALL_TYPES", "the `lop_msgs` package"), (VISION, "VISION_TYPES", "the vision_msgs subset")]
        {
            writeln!(code, "/// Every message type of {what}, sorted by name.\npub const {list}: &[RosType] = &[")?;
            for (_, name, _) in entries.iter().filter(|(p, _, _)| p == package) {
                writeln!(code, "    {}::{name}::ROS_TYPE,", module(package))?;
            }
            code.push_str("];\n");
        }
        std::fs::write(out, code)?;
        Ok(())
    }
}
