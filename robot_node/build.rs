//! Link settings of the r2r backend (feature `ros2`) against a ROS 2 that lives outside the
//! system's library folders, such as the project-local Jazzy of `scripts/ros.sh`.
//! `. scripts/ros-env.sh` exports what this reads:
//!
//! - `LOP_ROS_LINK_DIRS`: the ROS library folders (`:`-separated). They are searched at link
//!   time and written into the binaries as DT_RPATH (not RUNPATH, whose search does not reach the
//!   libraries' own dependencies), so the nodes run without `LD_LIBRARY_PATH`.
//! - `LOP_ROS_LIBPYTHON`: `DIR:NAME` of a shared libpython (`NAME` as `-l` takes it). The
//!   wheels' librcl depends on rosidl Python libraries that use Python's symbols; linking
//!   libpython provides them (Python itself never starts).
//!
//! Without the feature, or without these variables (a system ROS 2 install), nothing is added.

fn main() {
    // Builds without the feature are separate units that never look at the variables, so
    // switching between the two builds recompiles neither.
    if std::env::var_os("CARGO_FEATURE_ROS2").is_none() {
        println!("cargo:rerun-if-changed=build.rs");
        return;
    }
    println!("cargo:rerun-if-env-changed=LOP_ROS_LINK_DIRS");
    println!("cargo:rerun-if-env-changed=LOP_ROS_LIBPYTHON");
    let mut rpath: Vec<String> = Vec::new();
    if let Ok(dirs) = std::env::var("LOP_ROS_LINK_DIRS") {
        for d in dirs.split(':').filter(|d| !d.is_empty()) {
            println!("cargo:rustc-link-search=native={d}");
            rpath.push(d.to_string());
        }
    }
    if let Ok(py) = std::env::var("LOP_ROS_LIBPYTHON") {
        match py.rsplit_once(':') {
            Some((dir, name)) if !dir.is_empty() && !name.is_empty() => {
                println!("cargo:rustc-link-search=native={dir}");
                println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-l{name},--as-needed");
                rpath.push(dir.to_string());
            }
            _ => println!("cargo:warning=LOP_ROS_LIBPYTHON must be DIR:NAME (e.g. /usr/lib:python3.11), got '{py}'; ignored"),
        }
    }
    if !rpath.is_empty() {
        println!("cargo:rustc-link-arg=-Wl,--disable-new-dtags,-rpath,{}", rpath.join(":"));
    }
}
