//! Tests that cannot run here fail, unless the user names what they lack in an explicit
//! allow-list (issue 56): a green test run then means every test ran, or says which did not.
//!
//! `LOP_ALLOW_SKIP` is a comma-separated list of needs a test may lack and still pass by
//! skipping (`netns`: network namespaces, root and iproute2; `rto-cap`: the kernel's cap on
//! TCP's retransmission backoff; `all`). Each skip so allowed is printed loudly on stderr and,
//! when `LOP_SKIP_LOG` names a file, appended to it as one line, so that `scripts/test.sh` lists
//! every skipped test in its summary.

use std::io::Write;

/// The allow-list variable.
pub const ALLOW_ENV: &str = "LOP_ALLOW_SKIP";
/// The file each allowed skip is appended to.
pub const LOG_ENV: &str = "LOP_SKIP_LOG";

/// Whether `allow` (the allow-list's value) names `need`, or `all`.
pub fn allowed(need: &str, allow: Option<&str>) -> bool {
    allow.is_some_and(|a| a.split(',').map(str::trim).any(|n| n == need || n == "all"))
}

/// For a test that cannot run here because it lacks `need` (`why` says how): `true` when the
/// allow-list lets it skip (logged, and the test should return), otherwise a panic naming the
/// test, the cause and the allow-list entry that would let it skip.
///
/// # Panics
/// When `need` is not in `LOP_ALLOW_SKIP`.
pub fn may_skip(test: &str, need: &str, why: &str) -> bool {
    let allow = std::env::var(ALLOW_ENV).ok();
    assert!(
        allowed(need, allow.as_deref()),
        "{test} cannot run here: {why}. Provide it, or let the test skip by naming it: {ALLOW_ENV}={need}"
    );
    eprintln!("\n!!!!!!!! {test} SKIPPED ({ALLOW_ENV} names {need}): {why} !!!!!!!!\n");
    if let Ok(path) = std::env::var(LOG_ENV) {
        let line = format!("{test}: {need}: {}\n", why.replace('\n', " "));
        match std::fs::OpenOptions::new().create(true).append(true).open(&path) {
            Ok(mut f) => {
                if let Err(e) = f.write_all(line.as_bytes()) {
                    eprintln!("the skip was not logged to {path}: {e}");
                }
            }
            Err(e) => eprintln!("the skip was not logged to {path}: {e}"),
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_named_need_or_all_is_allowed() {
        assert!(!allowed("netns", None));
        assert!(!allowed("netns", Some("")));
        assert!(!allowed("netns", Some("netem")));
        assert!(!allowed("netns", Some("netnsx")));
        assert!(allowed("netns", Some("netem, netns")));
        assert!(allowed("rto-cap", Some("all")));
    }
}
